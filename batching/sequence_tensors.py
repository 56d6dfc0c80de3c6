"""What a stateful model's request carries to it and back: its own tensors with the config's
control tensors and the sequence's implicit state added, the zeros of an empty batch position,
the state kept from its outputs, and its parameters. Pure functions of the sequence policy and
plain values (`batching.sequence_slots` holds the sequences)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from batching.messages import CORRELATION_ID, SEQUENCE_END, SEQUENCE_START, Parameters, TensorMap
from batching.sequence_policy import ControlKind, SequencePolicy


def request_feed(
    policy: SequencePolicy,
    inputs: TensorMap,
    correlation_id: int | str,
    start: bool,
    end: bool,
    state: Mapping[str, np.ndarray],
) -> dict[str, Any]:
    """A request's tensors as the model takes them: its own, the controls and the states
    (`state`: the sequence's last state outputs, by input name; a START request reads each
    state's initial value)."""
    feed = dict(inputs)
    for control in policy.controls:
        if control.kind is ControlKind.CORRID:
            value = _corrid(correlation_id, control.false.dtype)
        elif control.kind is ControlKind.START:
            value = control.true if start else control.false
        elif control.kind is ControlKind.END:
            value = control.true if end else control.false
        else:
            value = control.true
        feed[control.name] = _per_request(policy, value)
    for implicit in policy.states:
        if start or implicit.input_name not in state:
            feed[implicit.input_name] = _batched(policy, implicit.initial)
        else:
            feed[implicit.input_name] = state[implicit.input_name]
    return feed


def null_feed(policy: SequencePolicy, template: TensorMap) -> dict[str, Any]:
    """An empty batch position (DIRECT): zeros shaped like a real request, READY false."""
    feed: dict[str, Any] = {name: np.zeros_like(array) for name, array in template.items()}
    for control in policy.controls:  # all false: a model reads nothing else of it
        feed[control.name] = _per_request(policy, control.false)
    for implicit in policy.states:
        feed[implicit.input_name] = _batched(policy, implicit.initial)
    return feed


def keep_state(
    policy: SequencePolicy, state: dict[str, np.ndarray], response: TensorMap
) -> TensorMap:
    """Keep a response's state outputs in `state` (by input name) for the sequence's next
    request; the outputs the client gets are the others."""
    if not policy.states:
        return response
    for implicit in policy.states:
        if implicit.output_name in response:
            state[implicit.input_name] = np.array(response[implicit.output_name])
    hidden = policy.state_outputs
    return {name: array for name, array in response.items() if name not in hidden}


def step_parameters(
    parameters: Parameters, correlation_id: int | str, start: bool, end: bool
) -> Parameters:
    """A request's parameters as its executor gets them: its own, its correlation id, and its
    START and END flags where set."""
    step: dict[str, Any] = {**parameters, CORRELATION_ID: correlation_id}
    if start:
        step[SEQUENCE_START] = True
    if end:
        step[SEQUENCE_END] = True
    return step


def _per_request(policy: SequencePolicy, value: np.ndarray) -> np.ndarray:
    # A control tensor has dims [1]; a batching model's requests add the batch dim.
    return np.reshape(value, (1, 1) if policy.batching else (1,))


def _batched(policy: SequencePolicy, array: np.ndarray) -> np.ndarray:
    return array[np.newaxis] if policy.batching else array


def _corrid(correlation_id: int | str, dtype: np.dtype[Any]) -> np.ndarray:
    if isinstance(correlation_id, str):
        return np.array(correlation_id.encode(), dtype=object)
    return np.array(correlation_id, dtype=dtype)
