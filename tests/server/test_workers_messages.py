"""The wire's message layouts: a request and a response encoded by one side and decoded by the
other, tensors placed in an arena, inline, or in a shared memory region."""

import msgspec
import numpy as np

from server.contract.datatypes import BY_WIRE, encode_raw
from server.contract.errors import InvalidInputError, UnavailableError
from server.contract.load import LoadReport
from server.contract.model_io import TensorSpec
from server.contract.requests import InferInput, InferOptions, InferRequest, Received
from server.contract.responses import InferOutput, InferResponse
from server.frontend import SerializedAnswer
from server.workers import messages
from server.workers.arena import Allocator, Arena


def test_a_request_decodes_as_it_was_encoded_with_each_placement() -> None:
    floats = np.arange(6, dtype=np.float32).reshape(2, 3)
    words = np.array([b"ab", b""], dtype=object)
    request = InferRequest(
        "model",
        "2",
        [
            InferInput("FLOATS", "FP32", (2, 3), floats),
            InferInput("WORDS", "BYTES", (2,), words),
            InferInput("SHARED", "INT32", (4,), None, ("region", 64, 16)),
        ],
        ["OUT"],
        InferOptions(priority=1, timeout_us=500, parameters={"key": "value"}, in_turn=True),
        "id-7",
        {"traceparent": "00-ab"},
        {"OUT": ("region", 128, 24)},
        received=Received("GRPC", 100, 250),
    )
    with Arena.create(1 << 16) as arena:
        arena.write_array(256, floats)
        placements = [
            (messages.ARENA, 256, floats.nbytes),
            (messages.INLINE, encode_raw(BY_WIRE["BYTES"], words)),
            (messages.SHARED, ("region", 64, 16)),
        ]
        rid, stream, decoded = messages.decode_infer(
            messages.encode_infer(9, True, request, placements), arena
        )
        assert (rid, stream) == (9, True)
        assert decoded.options == request.options
        assert (decoded.model, decoded.version, decoded.request_id) == ("model", "2", "id-7")
        assert list(decoded.outputs) == ["OUT"]
        assert decoded.carrier == request.carrier
        assert decoded.received == Received("GRPC", 100, 250)
        assert decoded.output_locations == request.output_locations
        arena_input, inline_input, shared_input = decoded.inputs
        np.testing.assert_array_equal(arena_input.array, floats)
        assert not arena_input.array.flags.owndata  # a view of the arena, not a copy
        assert list(inline_input.array) == [b"ab", b""]
        assert (inline_input.name, inline_input.datatype, inline_input.shape) == (
            "WORDS",
            "BYTES",
            (2,),
        )
        assert shared_input.array is None
        assert shared_input.location == ("region", 64, 16)


def test_a_request_without_options_shares_the_default_ones() -> None:
    request = InferRequest("model", "", [], [], InferOptions())
    with Arena.create(4096) as arena:
        _, stream, decoded = messages.decode_infer(
            messages.encode_infer(1, False, request, []), arena
        )
        in_turn = msgspec.structs.replace(request, options=InferOptions(in_turn=True))
        _, _, taken_in_turn = messages.decode_infer(
            messages.encode_infer(2, False, in_turn, []), arena
        )
    assert not stream
    assert decoded.options == InferOptions()
    assert decoded.inputs == [] and decoded.carrier is None and decoded.received is None
    assert taken_in_turn.options == InferOptions(in_turn=True)  # an HTTP request's


def test_a_response_decodes_with_its_outputs_copied_and_their_blocks_released() -> None:
    spec = TensorSpec("OUT", BY_WIRE["FP32"], (-1,), False)
    words = TensorSpec("WORDS", BY_WIRE["BYTES"], (1,), False)
    shared = TensorSpec("SHARED", BY_WIRE["INT32"], (2,), False)
    array = np.array([[1.5, -2.0]], np.float32)
    text = np.array([[b"x"]], dtype=object)
    response = InferResponse(
        "model",
        3,
        [
            InferOutput(spec, (1, 2), array),
            InferOutput(words, (1, 1), text),
            InferOutput(shared, (1, 2), None),
        ],
    )
    released: list[int] = []
    with Arena.create(4096) as arena:
        arena.write_array(512, array)
        placements = [
            (messages.ARENA, 512, array.nbytes),
            (messages.INLINE, encode_raw(BY_WIRE["BYTES"], text)),
            (messages.SHARED, None),
        ]
        message = messages.encode_answer(4, True, response, placements)
        assert message[:3] == (messages.ANSWER, 4, True)
        decoded = messages.decode_answer(message, arena, released.append)
        arena.write_array(512, np.zeros(2, np.float32))  # the worker may reuse the block now
    assert released == [512]
    assert decoded is not None and (decoded.model, decoded.version) == ("model", 3)
    floats, strings, in_region = decoded.outputs
    np.testing.assert_array_equal(floats.array, array)
    assert floats.spec == spec and floats.shape == (1, 2)
    assert strings.array is not None and strings.array.tolist() == [[b"x"]]
    assert in_region.array is None


def test_a_final_flag_alone_and_a_failure_keep_their_meaning() -> None:
    with Arena.create(4096) as arena:
        alone = messages.encode_answer(5, True, None, ())
        assert messages.decode_answer(alone, arena, lambda offset: None) is None
        failed = messages.encode_failed(
            6, InvalidInputError("bad shape"), final=False, in_band=True
        )
        error, final = messages.stream_item(failed, arena, lambda offset: None)
    assert isinstance(error, InvalidInputError) and str(error) == "bad shape"
    assert not final


def test_a_refusal_keeps_its_retry_hint_across_the_boundary() -> None:
    with Arena.create(4096) as arena:
        refused = messages.encode_failed(7, UnavailableError("over its target", 42), in_band=True)
        error, _ = messages.stream_item(refused, arena, lambda offset: None)
        plain = messages.encode_failed(8, UnavailableError("queue full"), in_band=True)
        unhinted, _ = messages.stream_item(plain, arena, lambda offset: None)
    assert isinstance(error, UnavailableError) and error.retry_after_ms == 42
    assert str(error) == "over its target"
    assert isinstance(unhinted, UnavailableError) and unhinted.retry_after_ms is None


def test_small_tensors_travel_inline_and_large_ones_in_the_arena_while_it_has_room() -> None:
    floats = BY_WIRE["FP32"]
    small = np.arange(messages.INLINE_MAX_BYTES // 4, dtype=np.float32)
    large = np.arange(messages.INLINE_MAX_BYTES // 4 + 1, dtype=np.float32).reshape(1, -1)
    words = np.array([b"x" * (2 * messages.INLINE_MAX_BYTES)], dtype=object)
    size = 4 * messages.INLINE_MAX_BYTES
    with Arena.create(size) as arena:
        allocator = Allocator(size)
        assert messages.place(small, floats, arena, allocator) == (messages.INLINE, small.tobytes())
        kind, offset, nbytes = messages.place(large, floats, arena, allocator)
        assert (kind, nbytes) == (messages.ARENA, large.nbytes)
        np.testing.assert_array_equal(arena.array(offset, np.float32, large.shape), large)
        assert messages.place(words, BY_WIRE["BYTES"], arena, allocator)[0] == messages.INLINE
        allocator.allocate(allocator.size_bytes - 2 * messages.INLINE_MAX_BYTES - 64)  # nearly full
        assert messages.place(large, floats, arena, allocator) == (messages.INLINE, large.tobytes())


def test_a_serialized_request_travels_inline_or_in_the_arena_and_reads_back_the_same() -> None:
    small, large = b"s" * messages.INLINE_MAX_BYTES, b"L" * (messages.INLINE_MAX_BYTES + 1)
    size = 4 * messages.INLINE_MAX_BYTES
    with Arena.create(size) as arena:
        allocator = Allocator(size)
        inline = messages.place_bytes(small, arena, allocator)
        assert inline == (messages.INLINE, small)
        placed = messages.place_bytes(large, arena, allocator)
        assert placed[0] == messages.ARENA and allocator.used_bytes >= len(large)
        message = messages.encode_infer_serialized(5, 123, True, placed)
        assert message[:4] == (messages.INFER_SERIALIZED, 5, 123, True)
        view = messages.placed_bytes(message[4:], arena)
        assert isinstance(view, memoryview) and bytes(view) == large  # read in place
        assert messages.placed_bytes(inline, arena) == small
        allocator.allocate(allocator.free_bytes - 64)  # nearly full: large ones go inline
        assert messages.place_bytes(large, arena, allocator) == (messages.INLINE, large)


def test_a_serialized_answer_keeps_its_load_and_header_and_gives_its_arena_block_back() -> None:
    data = b"answer" * messages.INLINE_MAX_BYTES
    size = 2 * len(data)
    released: list[int] = []
    with Arena.create(size) as arena:
        allocator = Allocator(size)
        placed = messages.place_bytes(data, arena, allocator)
        loaded = SerializedAnswer(data, LoadReport(3, 5, 0.25), header_length=12)
        message = messages.encode_serialized(8, loaded, placed)
        assert message[:3] == (messages.SERIALIZED, 8, True)  # always final
        answer = messages.decode_serialized(message, arena, released.append)
        assert answer == loaded and isinstance(answer.data, bytes)  # copied out
        assert released == [placed[1]]
        small = SerializedAnswer(b"tiny")
        inline = messages.encode_serialized(
            9, small, messages.place_bytes(b"tiny", arena, allocator)
        )
        assert messages.decode_serialized(inline, arena, released.append) == small
        assert released == [placed[1]]  # nothing more to give back
