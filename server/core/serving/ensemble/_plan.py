"""An ensemble's steps validated at load as a DAG over tensor names (pure: configs in, plan out)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError

ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True, slots=True)
class Step:
    """One composing model's call: which ensemble tensors feed it and which it produces."""

    model: str
    version: str  # "" serves the newest ready version (config -1)
    inputs: Mapping[str, str]  # the model's input name -> ensemble tensor name
    outputs: Mapping[str, str]  # the model's output name -> ensemble tensor name
    # (model, version) of the steps reading its outputs; None when one leaves the ensemble.
    consumers: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True, slots=True)
class EnsemblePlan:
    """Steps in an order where each one's inputs come from the request or from earlier steps."""

    name: str
    inputs: tuple[str, ...]  # the ensemble's own input tensors
    optional: frozenset[str]  # those a request may leave out (they feed only optional inputs)
    outputs: tuple[str, ...]  # the ensemble's own output tensors
    steps: tuple[Step, ...]  # topologically sorted
    max_inflight: int  # requests in flight at each step, all requests together; 0: unbounded

    @property
    def models(self) -> tuple[str, ...]:
        """The composing models, each once, in step order."""
        return tuple(dict.fromkeys(step.model for step in self.steps))


@dataclass(frozen=True, slots=True)
class _Tensor:
    """A tensor's type and full shape (-1 first where a batching model adds the batch axis)."""

    data_type: int
    dims: tuple[int, ...]
    where: str  # who declares it, for messages


def is_ensemble(config: mc.ModelConfig) -> bool:
    return config.platform == ENSEMBLE_PLATFORM


def composing_models(config: mc.ModelConfig) -> list[str]:
    """The models an ensemble config names, each once, in step order."""
    return list(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))


def plan_ensemble(
    config: mc.ModelConfig, composing: Callable[[str], mc.ModelConfig | None]
) -> EnsemblePlan:
    """Validate an ensemble against its composing models' configs; any fault is a ConfigError.

    `composing(name)` gives a composing model's effective config, or None when it is unknown.
    """
    name = config.name
    if not config.ensemble_scheduling.step:
        raise ConfigError(f"ensemble '{name}' has no ensemble_scheduling steps")
    batching = config.max_batch_size > 0
    optional = {t.name for t in config.input if t.optional}
    produced: dict[str, _Tensor] = {
        t.name: _tensor(t, batching, f"ensemble input '{t.name}'") for t in config.input
    }
    steps: list[Step] = []
    wanted: list[tuple[str, _Tensor]] = []  # (tensor, what a step expects of it)
    for index, entry in enumerate(config.ensemble_scheduling.step):
        model = composing(entry.model_name) if entry.model_name != name else None
        label = f"ensemble '{name}' step {index} ('{entry.model_name}')"
        if entry.model_name == name:
            raise ConfigError(f"{label} refers to the ensemble itself")
        if model is None:
            raise ConfigError(f"{label}: model '{entry.model_name}' is not available")
        if entry.model_version < -1 or entry.model_version == 0:
            raise ConfigError(f"{label}: model_version must be -1 or a version number")
        if batching and model.max_batch_size < config.max_batch_size:
            raise ConfigError(
                f"{label}: the ensemble's max_batch_size is {config.max_batch_size}, but the "
                f"model's is {model.max_batch_size}"
            )
        step = Step(
            entry.model_name,
            "" if entry.model_version == -1 else str(entry.model_version),
            dict(entry.input_map),
            dict(entry.output_map),
        )
        step_batching = model.max_batch_size > 0
        model_inputs = {t.name: t for t in model.input}
        model_outputs = {t.name: t for t in model.output}
        for key, tensor in step.inputs.items():
            if key not in model_inputs:
                raise ConfigError(f"{label}: input_map names '{key}', which is not an input")
            expected = _tensor(model_inputs[key], step_batching, f"{label} input '{key}'")
            wanted.append((tensor, expected))
            if tensor in optional and not model_inputs[key].optional:
                raise ConfigError(
                    f"{label}: optional ensemble input '{tensor}' feeds input '{key}', which "
                    "the model requires"
                )
        unmapped = [t.name for t in model.input if t.name not in step.inputs and not t.optional]
        if unmapped:
            raise ConfigError(f"{label}: input(s) {unmapped} are not mapped in input_map")
        for key, tensor in step.outputs.items():
            if key not in model_outputs:
                raise ConfigError(f"{label}: output_map names '{key}', which is not an output")
            if tensor in produced:
                raise ConfigError(
                    f"{label}: tensor '{tensor}' is already produced by "
                    f"{produced[tensor].where}; each tensor needs exactly one producer"
                )
            produced[tensor] = _tensor(model_outputs[key], step_batching, f"{label} output '{key}'")
        steps.append(step)
    for tensor, expected in wanted:
        _check_match(name, tensor, produced.get(tensor), expected)
    for output in config.output:
        _check_match(
            name, output.name, produced.get(output.name), _tensor(output, batching, "the output")
        )
    return EnsemblePlan(
        name,
        tuple(t.name for t in config.input),
        frozenset(optional),
        tuple(t.name for t in config.output),
        _with_consumers(
            _sorted_steps(name, steps, {t.name for t in config.input}),
            {t.name for t in config.output},
        ),
        config.ensemble_scheduling.max_inflight_requests,
    )


def _with_consumers(steps: tuple[Step, ...], outputs: set[str]) -> tuple[Step, ...]:
    """Each step told which steps read its tensors, unless one of them is an ensemble output
    (that one goes back to the client, so the step's outputs must come to the host)."""
    return tuple(
        replace(
            step,
            consumers=None
            if outputs & set(step.outputs.values())
            else tuple(
                dict.fromkeys(
                    (other.model, other.version)
                    for other in steps
                    if set(other.inputs.values()) & set(step.outputs.values())
                )
            ),
        )
        for step in steps
    )


def _tensor(tensor: mc.ModelInput | mc.ModelOutput, batching: bool, where: str) -> _Tensor:
    return _Tensor(tensor.data_type, ((-1,) if batching else ()) + tuple(tensor.dims), where)


def _check_match(name: str, tensor: str, producer: _Tensor | None, consumer: _Tensor) -> None:
    if producer is None:
        raise ConfigError(
            f"ensemble '{name}': tensor '{tensor}' for {consumer.where} is not produced by any "
            "step and is not an ensemble input"
        )
    if producer.data_type != consumer.data_type:
        raise ConfigError(
            f"ensemble '{name}': tensor '{tensor}' is {mc.DataType.Name(producer.data_type)} "
            f"from {producer.where} but {consumer.where} expects "
            f"{mc.DataType.Name(consumer.data_type)}"
        )
    compatible = len(producer.dims) == len(consumer.dims) and all(
        a == b or -1 in (a, b) for a, b in zip(producer.dims, consumer.dims, strict=True)
    )
    if not compatible:
        raise ConfigError(
            f"ensemble '{name}': tensor '{tensor}' has shape {list(producer.dims)} from "
            f"{producer.where} but {consumer.where} expects {list(consumer.dims)}"
        )


def _sorted_steps(name: str, steps: list[Step], available: set[str]) -> tuple[Step, ...]:
    """Kahn's order over tensors; steps left over wait on each other: a cycle."""
    ready = set(available)
    ordered: list[Step] = []
    left = list(steps)
    while left:
        runnable = [s for s in left if all(t in ready for t in s.inputs.values())]
        if not runnable:
            cycle = ", ".join(f"'{s.model}'" for s in left)
            raise ConfigError(f"ensemble '{name}': steps {cycle} depend on each other (a cycle)")
        for step in runnable:
            ordered.append(step)
            ready.update(step.outputs.values())
            left.remove(step)
    return tuple(ordered)
