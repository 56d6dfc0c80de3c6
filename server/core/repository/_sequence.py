"""A stateful model's `sequence_batching {}` read into the sequence batcher's policy: its control
tensors, implicit states (with their initial values) and strategy, checked as Triton checks them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batching import Control, ControlKind, ImplicitState, SequencePolicy, Strategy
from proto import model_config_pb2 as mc
from server.contract.datatypes import BY_CONFIG, decode_raw, element_count
from server.contract.errors import ConfigError, InvalidInputError

_DEFAULT_IDLE_US = 1_000_000  # Triton's default max_sequence_idle_microseconds
_KINDS = {
    mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START: ControlKind.START,
    mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END: ControlKind.END,
    mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY: ControlKind.READY,
    mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID: ControlKind.CORRID,
}
_CORRID_TYPES = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)


def sequence_policy(config: mc.ModelConfig, model_dir: Path) -> SequencePolicy:
    """The policy of a config with `sequence_batching`; ConfigError for what Triton refuses."""
    batching = config.sequence_batching
    name = config.name
    oldest = batching.WhichOneof("strategy_choice") == "oldest"
    max_batch_size = max(config.max_batch_size, 1)
    if oldest:
        candidates = batching.oldest.max_candidate_sequences or max_batch_size
        preferred = tuple(sorted(set(batching.oldest.preferred_batch_size)))
        if any(size < 1 or size > max_batch_size for size in preferred):
            raise ConfigError(
                f"model '{name}': sequence batching preferred batch size must be <= max batch "
                f"size ({max_batch_size}) and >= 1"
            )
        delay_us = batching.oldest.max_queue_delay_microseconds
        utilization = 0.0
    else:
        candidates = max_batch_size
        preferred = ()
        delay_us = batching.direct.max_queue_delay_microseconds
        utilization = batching.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            raise ConfigError(
                f"model '{name}': sequence batching minimum slot utilization must be in range "
                f"(0.0, 1.0], got {utilization}"
            )
    return SequencePolicy(
        model=name,
        batching=config.max_batch_size > 0,
        slots=candidates,
        max_batch_size=max_batch_size,
        strategy=Strategy.OLDEST if oldest else Strategy.DIRECT,
        idle_ns=(batching.max_sequence_idle_microseconds or _DEFAULT_IDLE_US) * 1000,
        max_queue_delay_ns=delay_us * 1000,
        minimum_slot_utilization=utilization,
        preferred_batch_sizes=preferred,
        controls=_controls(config),
        states=tuple(_state(config, state, model_dir) for state in batching.state),
        iterative=batching.iterative_sequence,
    )


def sequence_tensors(config: mc.ModelConfig) -> tuple[frozenset[str], frozenset[str]]:
    """The model file's inputs and outputs that the server fills or keeps (control and state
    tensors), which the config does not declare as the client's."""
    batching = config.sequence_batching
    inputs = {control.name for control in batching.control_input}
    inputs.update(state.input_name for state in batching.state)
    return frozenset(inputs), frozenset(state.output_name for state in batching.state)


def _controls(config: mc.ModelConfig) -> tuple[Control, ...]:
    controls: dict[ControlKind, Control] = {}
    for tensor in config.sequence_batching.control_input:
        if not tensor.name:
            raise ConfigError(
                f"model '{config.name}': a sequence batching control input has no name"
            )
        for control in tensor.control:
            kind = _KINDS[control.kind]
            if kind in controls:
                raise ConfigError(
                    f"model '{config.name}': sequence batching specifies multiple "
                    f"CONTROL_SEQUENCE_{kind.name} tensors"
                )
            controls[kind] = _control(config.name, tensor.name, kind, control)
    return tuple(controls.values())


def _control(
    model: str, name: str, kind: ControlKind, control: mc.ModelSequenceBatching.Control
) -> Control:
    where = f"model '{model}': sequence batching control 'CONTROL_SEQUENCE_{kind.name}' ('{name}')"
    if kind is ControlKind.CORRID:
        if control.data_type not in _CORRID_TYPES:
            raise ConfigError(
                f"{where} must specify data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, "
                "TYPE_INT32 or TYPE_STRING"
            )
        zero = _zeros(BY_CONFIG[control.data_type].numpy, ())
        return Control(kind, name, zero, zero)
    given = [
        (values, dtype)
        for values, dtype in (
            (list(control.int32_false_true), np.dtype(np.int32)),
            (list(control.fp32_false_true), np.dtype(np.float32)),
            (list(control.bool_false_true), np.dtype(np.bool_)),
        )
        if values
    ]
    if len(given) != 1 or len(given[0][0]) != 2:
        raise ConfigError(
            f"{where} must specify exactly one of int32_false_true, fp32_false_true or "
            "bool_false_true, with two values (false, true)"
        )
    (false, true), dtype = given[0]
    return Control(kind, name, np.array(false, dtype), np.array(true, dtype))


def _state(
    config: mc.ModelConfig, state: mc.ModelSequenceBatching.State, model_dir: Path
) -> ImplicitState:
    where = f"model '{config.name}': sequence batching state '{state.input_name}'"
    if not state.input_name or not state.output_name:
        raise ConfigError(f"{where} must name both input_name and output_name")
    datatype = BY_CONFIG.get(state.data_type)
    if datatype is None or state.data_type == mc.TYPE_INVALID:
        raise ConfigError(f"{where} must specify a data_type")
    if len(state.initial_state) > 1:
        raise ConfigError(f"{where} may have at most one initial_state")
    if not state.initial_state:
        if any(dim < 0 for dim in state.dims):
            raise ConfigError(f"{where} has variable dims; give it an initial_state")
        return ImplicitState(
            state.input_name, state.output_name, _zeros(datatype.numpy, tuple(state.dims))
        )
    initial = state.initial_state[0]
    dims = tuple(initial.dims)
    if any(dim < 0 for dim in dims):
        raise ConfigError(f"{where}: initial_state dims must be fixed, got {list(dims)}")
    if initial.data_type != state.data_type:
        raise ConfigError(f"{where}: initial_state data_type must match the state's")
    if initial.WhichOneof("state_data") != "data_file":
        return ImplicitState(state.input_name, state.output_name, _zeros(datatype.numpy, dims))
    path = model_dir / "initial_state" / initial.data_file
    try:
        data = path.read_bytes()
        array = decode_raw(state.input_name, datatype, dims, data)
    except OSError as exc:
        raise ConfigError(f"{where}: initial_state file '{path}' cannot be read: {exc}") from exc
    except InvalidInputError as exc:
        raise ConfigError(
            f"{where}: initial_state file '{path}' does not hold {element_count(dims)} "
            f"{datatype.wire} values: {exc}"
        ) from exc
    return ImplicitState(state.input_name, state.output_name, array)


def _zeros(dtype: np.dtype, dims: tuple[int, ...]) -> np.ndarray:
    if dtype == np.object_:
        return np.full(dims, b"", dtype=object)
    return np.zeros(dims, dtype)
