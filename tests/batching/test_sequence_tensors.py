"""What a stateful model's request carries: controls, implicit state, an empty position's
zeros, the state kept from its outputs, and its parameters (pure functions)."""

import numpy as np

from batching import Control, ControlKind, ImplicitState, SequencePolicy
from batching.messages import CORRELATION_ID, SEQUENCE_END, SEQUENCE_START
from batching.sequence_tensors import keep_state, null_feed, request_feed, step_parameters


def _policy(batching: bool = True, corrid: type = np.uint64) -> SequencePolicy:
    return SequencePolicy(
        model="acc",
        batching=batching,
        slots=4,
        max_batch_size=4,
        controls=(
            Control(ControlKind.START, "START", np.array(0, np.int32), np.array(1, np.int32)),
            Control(ControlKind.END, "END", np.array(False), np.array(True)),
            Control(
                ControlKind.READY, "READY", np.array(0.0, np.float32), np.array(1.0, np.float32)
            ),
            Control(ControlKind.CORRID, "CORRID", np.array(0, corrid), np.array(0, corrid)),
        ),
        states=(ImplicitState("STATE", "STATE_OUT", np.array([7], np.int32)),),
    )


def test_a_start_request_reads_the_initial_state_and_its_controls() -> None:
    inputs = {"INPUT": np.array([[3]], np.int32)}
    feed = request_feed(_policy(), inputs, 42, True, False, {"STATE": np.array([[9]], np.int32)})
    assert feed["INPUT"] is inputs["INPUT"]
    assert feed["START"].tolist() == [[1]] and feed["START"].dtype == np.int32
    assert feed["END"].tolist() == [[False]]
    assert feed["READY"].tolist() == [[1.0]]
    assert feed["CORRID"].tolist() == [[42]] and feed["CORRID"].dtype == np.uint64
    assert feed["STATE"].tolist() == [[7]]  # START: the initial state, not the kept one


def test_a_later_request_reads_the_kept_state() -> None:
    kept = np.array([[9]], np.int32)
    feed = request_feed(_policy(), {}, 42, False, True, {"STATE": kept})
    assert feed["STATE"] is kept
    assert feed["START"].tolist() == [[0]] and feed["END"].tolist() == [[True]]


def test_without_batching_controls_have_no_batch_dimension() -> None:
    feed = request_feed(_policy(batching=False), {}, 5, True, True, {})
    assert feed["START"].shape == (1,) and feed["STATE"].shape == (1,)


def test_a_string_correlation_id_travels_as_bytes() -> None:
    feed = request_feed(_policy(corrid=object), {}, "user-1", True, False, {})
    assert feed["CORRID"].tolist() == [[b"user-1"]]


def test_an_empty_position_is_zeros_with_every_control_false() -> None:
    template = {"INPUT": np.array([[3, 4]], np.float32)}
    feed = null_feed(_policy(), template)
    assert feed["INPUT"].tolist() == [[0.0, 0.0]] and feed["INPUT"].dtype == np.float32
    assert feed["READY"].tolist() == [[0.0]] and feed["START"].tolist() == [[0]]
    assert feed["STATE"].tolist() == [[7]]


def test_state_outputs_are_kept_and_hidden_from_the_client() -> None:
    state: dict[str, np.ndarray] = {}
    out = np.array([[11]], np.int32)
    answer = keep_state(_policy(), state, {"OUTPUT": out, "STATE_OUT": np.array([[12]], np.int32)})
    assert list(answer) == ["OUTPUT"] and answer["OUTPUT"] is out
    assert state["STATE"].tolist() == [[12]]


def test_parameters_carry_the_correlation_id_and_the_flags_set() -> None:
    assert step_parameters({"x": 1}, 42, True, False) == {
        "x": 1,
        CORRELATION_ID: 42,
        SEQUENCE_START: True,
    }
    assert step_parameters({}, "id", False, True) == {CORRELATION_ID: "id", SEQUENCE_END: True}
