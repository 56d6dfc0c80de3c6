"""The python worker's framing: messages over a socket pair, their arrays in shared memory, and
when the ring gives their space back."""

from __future__ import annotations

import os
import pickle
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from backends.python._frames import (
    LEASE_NEW_BATCH,
    LEASE_NONE,
    LEASE_TO_BATCH,
    Reader,
    copied,
    encode_message,
    read_frame,
    send_what_fits,
    write_message,
)
from backends.python._pickling import Unpickler, stack_rows, unstack_rows
from backends.python._ring import Ring
from backends.python._worker_channel import WorkerChannel

SIZE = 64 + 4096  # a data area of 4 KiB


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _reader(sock: socket.socket):  # type: ignore[no-untyped-def]
    def read_exact(size: int) -> bytearray:
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            got += sock.recv_into(view[got:])
        return buffer

    return read_exact


def _send_and_read(
    pair: tuple[socket.socket, socket.socket], sender: Ring, receiver: Ring, message: object
) -> tuple[object, list[bytearray | memoryview], object]:
    write_message(pair[0], message, sender)
    data, buffers, entry, _ = read_frame(_reader(pair[1]), receiver)
    return pickle.loads(data, buffers=buffers), buffers, entry


def test_arrays_travel_in_the_ring_and_only_descriptors_on_the_socket(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ring = Ring.create("test", SIZE)
    other = Ring(os.dup(ring.fd), ring.size)  # the receiver's own mapping of the same memory
    array = np.arange(256, dtype=np.float32).reshape(16, 16)
    message, buffers, entry = _send_and_read(pair, ring, other, ("execute", 0, [{"X": array}]))
    assert isinstance(message, tuple)
    received = message[2][0]["X"]
    np.testing.assert_array_equal(received, array)
    assert isinstance(buffers[0], memoryview)  # a view of the shared memory, not a copy
    assert received.flags.writeable  # inputs are the model's to write, as in Triton
    pair[1].setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing of the array was left on the socket
        pair[1].recv(1)
    assert entry is not None
    other.release(entry)  # type: ignore[arg-type]
    ring.close()
    other.close()


def test_a_buffer_that_does_not_fit_goes_inline_and_the_space_comes_back_in_order(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ring = Ring.create("test", SIZE)
    other = Ring(os.dup(ring.fd), ring.size)
    big = np.ones(2048, dtype=np.uint8)  # half the area
    first, _, held_first = _send_and_read(pair, ring, other, (big,))
    second, _, held_second = _send_and_read(pair, ring, other, (big,))
    third, buffers, held_third = _send_and_read(pair, ring, other, (big,))  # full: inline
    assert held_third is None and isinstance(buffers[0], bytearray)
    np.testing.assert_array_equal(third[0], big)  # type: ignore[index]
    other.release(held_second)  # type: ignore[arg-type]
    # The first message still holds its space, so the second's is not given back either.
    assert ring.place([big.data]) is None
    other.release(held_first)  # type: ignore[arg-type]
    placed = ring.place([big.data])
    assert placed is not None and placed[0] == [0]  # all released: the start again
    for message in (first, second):
        np.testing.assert_array_equal(message[0], big)  # type: ignore[index]
    ring.close()
    other.close()


def test_the_server_copies_what_it_receives_and_frees_the_space_at_once(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ring = Ring.create("test", SIZE)
    other = Ring(os.dup(ring.fd), ring.size)
    array = np.full(1000, 7, dtype=np.int32)  # nearly the whole area
    write_message(pair[0], (array,), ring)
    data, buffers, entry, _ = read_frame(_reader(pair[1]), other)
    owned = copied(other, buffers, entry)
    assert all(isinstance(buffer, bytearray) for buffer in owned)
    assert ring.place([array.data]) is not None  # the space is free again
    np.testing.assert_array_equal(pickle.loads(data, buffers=owned)[0], array)
    ring.close()
    other.close()


def test_a_descriptor_outside_the_ring_is_refused(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ring = Ring.create("test", SIZE)
    with pytest.raises(ValueError, match="outside the ring"):
        ring.view(4000, 200)
    ring.close()


@pytest.mark.parametrize("decoupled", [False, True])
def test_the_worker_releases_an_execute_message_when_its_batch_is_answered(
    pair: tuple[socket.socket, socket.socket], decoupled: bool
) -> None:
    to_worker = Ring.create("in", SIZE)
    to_server = Ring.create("out", SIZE)
    incoming = Ring(os.dup(to_worker.fd), to_worker.size)
    channel = WorkerChannel(pair[1], incoming, to_server)
    inputs = [{"X": np.ones(512, dtype=np.uint8)}, {"X": np.zeros(512, dtype=np.uint8)}]
    write_message(pair[0], ("execute", 3, inputs, ["Y"], [{}, {}]), to_worker, LEASE_NEW_BATCH)
    message = channel.receive()
    assert message[2][1]["X"].sum() == 0
    space = [np.ones(3100, dtype=np.uint8).data]  # fits only once the batch is released
    assert to_worker.place(space) is None
    if decoupled:
        channel.send(("response", 3, 0, None, True))
        channel.send(("done", 3, None, 1, []))  # returned, but request 1 has not finished
        assert to_worker.place(space) is None
        channel.send(("response", 3, 1, {"Y": message[2][1]["X"]}, True))
    else:
        channel.send(("done", 3, [{"Y": message[2][0]["X"]}, None], 1, []))
    assert to_worker.place(space) is not None
    read_exact = _reader(pair[0])
    server_ring = Ring(os.dup(to_server.fd), to_server.size)
    replies = []
    for _ in range(3 if decoupled else 1):
        data, buffers, entry, _ = read_frame(read_exact, server_ring)
        replies.append(pickle.loads(data, buffers=copied(server_ring, buffers, entry)))
    # What the worker sent was read before the inputs' space could be written again.
    y = replies[-1][3]["Y"] if decoupled else replies[0][2][0]["Y"]
    assert y.sum() == (0 if decoupled else 512)
    for ring in (to_worker, to_server, server_ring, incoming):
        ring.close()


def test_a_bls_calls_outputs_stay_in_the_ring_until_the_batch_is_answered(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    to_worker = Ring.create("in", SIZE)
    incoming = Ring(os.dup(to_worker.fd), to_worker.size)
    to_server = Ring.create("out", SIZE)
    channel = WorkerChannel(pair[1], incoming, to_server)
    execute: tuple[object, ...] = ("execute", 0, [{"X": np.ones(8)}], ["Y"], [{}])
    write_message(pair[0], execute, to_worker, LEASE_NEW_BATCH)
    channel.receive()
    outputs = {"Y": np.full(256, 3, dtype=np.uint8)}
    write_message(pair[0], ("called", 0, outputs), to_worker, LEASE_TO_BATCH)
    called = channel.receive()
    assert called[2]["Y"].base is not None  # over the ring, not a copy
    write_message(pair[0], ("called", 1, "failed"), to_worker, LEASE_NONE)
    assert channel.receive()[2] == "failed"
    space = [np.ones(3900, dtype=np.uint8).data]
    assert to_worker.place(space) is None
    channel.send(("done", 0, [{"Y": called[2]["Y"]}], 1, []))
    assert to_worker.place(space) is not None
    for ring in (to_worker, incoming, to_server):
        ring.close()


def test_a_bytes_tensor_travels_as_lengths_and_items_not_pickled_objects(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ring = Ring.create("test", SIZE)
    other = Ring(os.dup(ring.fd), ring.size)
    items = np.array([[b"a", b""], [b"\x00\xffz", "é".encode()]], dtype=object)
    write_message(pair[0], ({"TEXT": items},), ring)
    data, buffers, entry, _ = read_frame(_reader(pair[1]), other)
    assert b"\xffz" not in bytes(data)  # the items are not in the pickle
    assert len(buffers) == 2 and all(isinstance(b, memoryview) for b in buffers)
    server_globals = frozenset({("numpy", "ndarray")})  # bytes_tensor is always allowed
    received = Unpickler(data, copied(other, buffers, entry), server_globals).load()[0]["TEXT"]
    assert received.dtype == object and received.shape == (2, 2)
    assert received.tolist() == items.tolist()
    with pytest.raises(pickle.UnpicklingError, match=r"names posix\.system"):
        Unpickler(pickle.dumps(os.system), [], server_globals).load()
    ring.close()
    other.close()


PLAIN_DTYPES = ("?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16")
PLAIN_ARRAYS = [np.arange(1, 7).astype(dtype).reshape(2, 3) for dtype in PLAIN_DTYPES] + [
    np.arange(4, dtype=">f4"),  # big-endian stays so
    np.array(7.5, dtype=np.float32),  # 0-d
    np.zeros((0, 3), dtype=np.int64),  # empty
]


@pytest.mark.parametrize("array", PLAIN_ARRAYS, ids=lambda array: f"{array.dtype.str}{array.shape}")
def test_a_plain_array_travels_as_its_bytes_dtype_and_shape(
    pair: tuple[socket.socket, socket.socket], array: np.ndarray
) -> None:
    """The pickle names no NumPy global: the server reads it with an allowlist that has none."""
    ring = Ring.create("test", SIZE)
    other = Ring(os.dup(ring.fd), ring.size)
    write_message(pair[0], ("done", 1, array), ring)
    data, buffers, entry, _ = read_frame(_reader(pair[1]), other)
    assert b"numpy" not in bytes(data)
    received = Unpickler(data, copied(other, buffers, entry), frozenset()).load()[2]
    assert received.dtype == array.dtype and received.shape == array.shape
    np.testing.assert_array_equal(received, array)
    ring.close()
    other.close()


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],  # not contiguous
        np.arange(6, dtype=np.float32).reshape(2, 3).T,  # Fortran order
        np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),  # structured
    ],
    ids=["strided", "fortran", "structured"],
)
def test_other_arrays_travel_as_numpy_pickles_them(
    pair: tuple[socket.socket, socket.socket], array: np.ndarray
) -> None:
    write_message(pair[0], ("done", 1, array))
    data, buffers, _, _ = read_frame(_reader(pair[1]))
    assert b"numpy" in bytes(data)
    received = Unpickler(data, buffers).load()[2]
    assert received.dtype == array.dtype
    np.testing.assert_array_equal(received, array)


def test_the_reader_takes_messages_in_few_receives_and_keeps_what_follows(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    received: list[int] = []

    def receive_into(view: memoryview) -> int:
        count = pair[1].recv_into(view)
        received.append(count)
        return count

    reader = Reader(receive_into, size=1024)
    ring = Ring.create("test", SIZE)
    messages = [("first", np.arange(3)), ("second", np.arange(100, 104))]
    for message in messages:
        write_message(pair[0], message, ring)
    trailing = bytes(range(200)) * 15  # then 3,000 bytes, more than the reader's buffer
    pair[0].sendall(trailing)
    other = Ring(os.dup(ring.fd), ring.size)
    for name, array in messages:
        data, buffers, entry, _ = read_frame(reader.read_exact, other)
        message = Unpickler(data, copied(other, buffers, entry)).load()
        assert message[0] == name and message[1].tolist() == array.tolist()
    assert len(received) == 1  # both messages came in the first receive
    assert reader.read_exact(10) == trailing[:10]
    assert reader.read_exact(2990) == trailing[10:]
    pair[0].close()
    with pytest.raises(EOFError):
        reader.read_exact(1)
    ring.close()
    other.close()


def test_a_batch_of_small_tensors_travels_as_one_array_per_name(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    to_worker = Ring.create("in", 1 << 20)
    to_server = Ring.create("out", 1 << 20)
    incoming = Ring(os.dup(to_worker.fd), to_worker.size)
    channel = WorkerChannel(pair[1], incoming, to_server)
    inputs = [
        {"X": np.full((rows, 4), rows, dtype=np.float32), "ID": np.arange(rows)}
        for rows in (1, 3, 2)
    ]
    stacked = stack_rows(inputs)
    assert isinstance(stacked, tuple)  # three arrays of X became one
    execute = ("execute", 5, stacked, ["Y"], [{}, {}, {}])
    write_message(pair[0], execute, to_worker, LEASE_NEW_BATCH)
    message = channel.receive()
    assert [request["X"].shape for request in message[2]] == [(1, 4), (3, 4), (2, 4)]
    assert [request["X"][0, 0] for request in message[2]] == [1, 3, 2]
    assert [request["ID"].tolist() for request in message[2]] == [[0], [0, 1, 2], [0, 1]]
    assert all(request["X"].flags.writeable for request in message[2])  # the model's to write
    assert message[2][1]["X"].base is not None  # a view of the ring, not a copy
    outputs = [{"Y": request["X"] * 2} for request in message[2]]
    channel.send(("done", 5, outputs, 1, []))
    read_exact = _reader(pair[0])
    server_ring = Ring(os.dup(to_server.fd), to_server.size)
    data, buffers, entry, _ = read_frame(read_exact, server_ring)
    assert len(buffers) == 1  # the three answers' Y in one buffer
    done = pickle.loads(data, buffers=copied(server_ring, buffers, entry))
    answers = unstack_rows(done[2])
    assert [answer["Y"][:, 0].tolist() for answer in answers] == [[2], [6, 6, 6], [4, 4]]
    for ring in (to_worker, to_server, server_ring, incoming):
        ring.close()


@pytest.mark.parametrize(
    "maps",
    [
        [{"X": np.ones(2)}],  # one request: nothing to gain
        [{"X": np.ones(2)}, {"Y": np.ones(2)}],  # other names
        [{"X": np.ones(2)}, {"X": np.ones(2, dtype=np.int8)}],  # other dtypes
        [{"X": np.ones((1, 2))}, {"X": np.ones((1, 3))}],  # other shapes past the first axis
        [{"X": np.ones(2)}, {"X": np.ones(5000)}],  # a large array: copied once more for nothing
        [{"X": np.array([b"a"], dtype=object)}, {"X": np.array([b"b"], dtype=object)}],  # BYTES
        [{"X": np.float32(1)}, {"X": np.float32(2)}],  # no first axis
        [{"X": np.ones(1)}, {"X": np.array(2.0)}],  # one without
        [{"X": np.ones(2)}, "the model's error"],  # not every answer holds tensors
        [({"X": np.ones(2)}, '{"p": 1}'), ({"X": np.ones(2)}, '{"p": 1}')],  # with parameters
    ],
)
def test_tensors_that_cannot_stack_travel_as_they_are(maps: list[object]) -> None:
    assert stack_rows(maps) is maps


@pytest.mark.parametrize(
    "stacked",
    [
        (["X"], [np.ones(3)], [[1, 1]]),  # rows that do not add up to the array's
        (["X"], [np.ones(3)], [[1, -1, 3]]),
        (["X", "Y"], [np.ones(3), np.ones(3)], [[3], [1, 2]]),  # requests that differ in number
        (["X"], [[1.0, 2.0]], [[1, 1]]),  # not an array
        (["X"], [np.float64(1.0)], [[1]]),
        ([1], [np.ones(1)], [[1]]),
        (["X"], [np.ones(1)]),
        [["X"], [np.ones(1)], [[1]]],
    ],
)
def test_stacked_tensors_that_do_not_add_up_are_refused(stacked: object) -> None:
    with pytest.raises(ValueError, match="stacked tensor"):
        unstack_rows(stacked)


def test_the_reader_says_when_a_message_has_come_whole_without_waiting(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    def receive_now(view: memoryview) -> int:
        return pair[1].recv_into(view, 0, socket.MSG_DONTWAIT)

    reader = Reader(pair[1].recv_into, size=1024)
    assert reader.take_arrived(receive_now) and not reader.has_message()  # nothing came yet
    parts = encode_message(("small", np.arange(4)))  # no ring: the array goes inline
    data = b"".join(bytes(part) for part in parts)
    previous = 0
    for cut in (10, 30, len(data) - 1):  # the header, the descriptors, all but a byte
        pair[0].sendall(data[previous:cut])
        previous = cut
        assert reader.take_arrived(receive_now) and not reader.has_message()
    pair[0].sendall(data[previous:])
    assert reader.take_arrived(receive_now) and reader.has_message()
    frame, buffers, _, _ = read_frame(reader.read_exact)
    assert Unpickler(frame, buffers).load()[1].tolist() == [0, 1, 2, 3]
    large = encode_message(("large", np.zeros(1000)))  # 8 KB inline: more than the buffer
    pair[0].sendall(b"".join(bytes(part) for part in large))
    while not reader.full:
        assert reader.take_arrived(receive_now) and not reader.has_message()
    pair[0].close()
    read_frame(reader.read_exact)  # what the buffer held, then the rest: the blocking read
    assert not reader.take_arrived(receive_now)  # the other end closed


def test_a_send_that_does_not_wait_keeps_what_the_socket_did_not_take(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    parts = encode_message(("large", np.zeros(1 << 20, dtype=np.uint8)))
    total = sum(part.nbytes for part in parts)
    send_what_fits(pair[0], parts)
    left = sum(part.nbytes for part in parts)
    assert 0 < left < total  # the socket's buffer took some of the 1 MiB
    received = 0
    while parts or received < total:
        received += len(pair[1].recv(1 << 20))
        send_what_fits(pair[0], parts)
    assert received == total
