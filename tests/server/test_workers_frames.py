"""Descriptor messages over a Unix socket: framing, batching, flow control, loss, and the
handshake that hands an arena to another process."""

import asyncio
import marshal
import os
import random
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvloop

from server.workers.arena import Arena
from server.workers.frames import Channel, Message, encode

REPO = Path(__file__).resolve().parents[2]

# The other process: attaches an arena it inherited, writes an array into it, then echoes every
# message over a Channel until told to close.
PEER = """
import asyncio, socket, sys
import numpy as np
from server.workers.arena import Allocator, Arena
from server.workers.frames import Channel

sock = socket.socket(fileno=int(sys.argv[1]))
size_bytes = int(sys.argv[3])
arena = Arena.attach(int(sys.argv[2]), size_bytes)
data = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5
offset = Allocator(size_bytes).allocate(data.nbytes)
arena.write_array(offset, data)

async def main():
    lost = asyncio.get_running_loop().create_future()
    def on_message(message):
        channel.close() if message == ("close",) else channel.send(message)
    channel = Channel(on_message, lost.set_result)
    await asyncio.get_running_loop().create_unix_connection(lambda: channel, sock=sock)
    channel.send(("written", offset, "float32", data.shape))
    return await lost

sys.exit(0 if asyncio.run(main()) is None else 1)
"""


def descriptor(i: int) -> Message:
    return ("infer", i, "mlp", "", (("INPUT0", "FP32", (1, 16), 4096 + 64 * i, 64),), None, 0.5)


class Inbox:
    """Messages a Channel received, and the reason it was lost."""

    def __init__(self, expected: int = 0) -> None:
        self.messages: list[Message] = []
        self.expected = expected
        self.full: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def channel(self) -> Channel:
        return Channel(self.on_message, self.lost.set_result)

    def on_message(self, message: Message) -> None:
        self.messages.append(message)
        if len(self.messages) == self.expected:
            self.full.set_result(None)


async def start_peer(arena: Arena, inbox: Inbox) -> tuple[Channel, subprocess.Popen[bytes]]:
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    command = [sys.executable, "-c", PEER, str(theirs.fileno()), str(arena.fd)]
    peer = subprocess.Popen(
        [*command, str(arena.size_bytes)], pass_fds=[theirs.fileno(), arena.fd], cwd=REPO
    )
    theirs.close()
    _, channel = await asyncio.get_running_loop().create_unix_connection(inbox.channel, sock=mine)
    return channel, peer


async def test_a_peer_attaches_a_passed_arena_and_its_bytes_read_back_as_an_array() -> None:
    inbox = Inbox(expected=1)
    with Arena.create(1 << 20) as arena:
        channel, peer = await start_peer(arena, inbox)
        await asyncio.wait_for(inbox.full, 30)
        kind, offset, dtype, shape = inbox.messages[0]
        assert kind == "written"
        array = arena.array(offset, dtype, shape)
        np.testing.assert_array_equal(array, np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5)
        channel.send(("close",))
        assert await asyncio.wait_for(inbox.lost, 30) is None
        assert peer.wait(30) == 0


async def test_messages_cross_processes_in_order_with_a_multi_mib_one_among_them() -> None:
    await cross_processes_in_order()


async def cross_processes_in_order() -> None:
    sent = [descriptor(i) for i in range(10_000)]
    sent[5000] = ("inline", 5000, os.urandom(4 << 20))
    inbox = Inbox(expected=1 + len(sent))
    with Arena.create(1 << 20) as arena:
        channel, peer = await start_peer(arena, inbox)
        for message in sent:
            channel.send(message)
        await asyncio.wait_for(inbox.full, 30)
        assert inbox.messages[1:] == sent
        channel.send(("close",))
        assert await asyncio.wait_for(inbox.lost, 30) is None  # the peer closed: clean loss
        assert peer.wait(30) == 0  # and it saw its own loss as clean


async def connected_pair(sender_inbox: Inbox, receiver_inbox: Inbox) -> tuple[Channel, Channel]:
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    _, sender = await loop.create_unix_connection(sender_inbox.channel, sock=a)
    _, receiver = await loop.create_unix_connection(receiver_inbox.channel, sock=b)
    return sender, receiver


async def test_sends_in_one_loop_iteration_go_out_in_one_write() -> None:
    receiver_inbox = Inbox(expected=100)
    sender, _ = await connected_pair(Inbox(), receiver_inbox)
    for i in range(100):
        sender.send(descriptor(i))
    assert sender.flush_count == 0  # nothing written until the iteration ends
    await asyncio.wait_for(receiver_inbox.full, 10)
    assert sender.flush_count == 1
    assert receiver_inbox.messages == [descriptor(i) for i in range(100)]
    sender.send(descriptor(100))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sender.flush_count == 2
    sender.close()


async def test_frames_split_anywhere_across_chunks_are_reassembled() -> None:
    sent = [descriptor(i) for i in range(300)]
    sent[150] = ("inline", b"\x07" * (3 << 20))
    stream = b"".join(encode(message) for message in sent)
    inbox = Inbox()
    receiver = inbox.channel()
    rng = random.Random(5)
    position = 0
    while position < len(stream):
        step = rng.choice([1, 2, 3, 5, 100, 4096, 70_000])
        receiver.data_received(stream[position : position + step])
        position += step
    assert inbox.messages == sent


async def test_a_large_frame_arriving_in_small_chunks_is_not_recopied() -> None:
    big = encode(("inline", bytes(16 << 20)))
    inbox = Inbox()
    receiver = inbox.channel()
    started_s = time.monotonic()
    for position in range(0, len(big), 4096):
        receiver.data_received(big[position : position + 4096])
    # Re-copying the buffer on every chunk would move 32 GiB here: many seconds, not a few ms.
    assert time.monotonic() - started_s < 2
    assert inbox.messages == [("inline", bytes(16 << 20))]


@pytest.mark.parametrize("scenario", [cross_processes_in_order])
def test_the_same_on_uvloop(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    uvloop.run(scenario())  # the server's loop: its transports are not asyncio.Transport


async def test_the_peer_closing_mid_frame_is_a_connection_error() -> None:
    loop = asyncio.get_running_loop()
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    inbox = Inbox()
    await loop.create_unix_connection(inbox.channel, sock=mine)
    frame = encode(descriptor(1))
    theirs.sendall(frame + frame[:10])
    theirs.close()
    exc = await asyncio.wait_for(inbox.lost, 10)
    assert isinstance(exc, ConnectionError) and "middle of a frame" in str(exc)
    assert inbox.messages == [descriptor(1)]


async def test_a_frame_over_the_limit_ends_the_connection() -> None:
    loop = asyncio.get_running_loop()
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    inbox = Inbox()
    await loop.create_unix_connection(
        lambda: Channel(inbox.on_message, inbox.lost.set_result, max_frame_bytes=1 << 20),
        sock=mine,
    )
    theirs.sendall(struct.pack("<I", 2 << 20))
    exc = await asyncio.wait_for(inbox.lost, 10)
    assert isinstance(exc, ConnectionError) and "over 1048576 bytes" in str(exc)
    theirs.close()


async def test_send_refuses_what_marshal_cannot_encode_and_a_closed_channel() -> None:
    sender, _ = await connected_pair(Inbox(), Inbox())
    with pytest.raises(ValueError):
        sender.send(("infer", object()))
    sender.close()
    with pytest.raises(ConnectionError):
        sender.send(descriptor(0))
    with pytest.raises(ValueError, match="exceeds 100 bytes"):
        encode(("inline", bytes(200)), max_frame_bytes=100)


def test_a_frame_is_a_little_endian_length_and_marshal_of_the_tuple() -> None:
    frame = encode(descriptor(3))
    assert struct.unpack_from("<I", frame) == (len(frame) - 4,)
    assert marshal.loads(frame[4:]) == descriptor(3)
