"""Shared memory arenas: the allocator's bookkeeping, and one segment mapped by two processes."""

import itertools
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from server.workers.arena import ALIGNMENT_BYTES, Allocator, Arena

REPO = Path(__file__).resolve().parents[2]


def test_blocks_are_aligned_disjoint_and_fill_the_arena_until_none() -> None:
    allocator = Allocator(1 << 20)
    rng = random.Random(7)
    blocks: list[tuple[int, int]] = []
    while (offset := allocator.allocate(nbytes := rng.randint(1, 20_000))) is not None:
        blocks.append((offset, nbytes))
    assert allocator.used_bytes + allocator.free_bytes == 1 << 20
    assert allocator.free_bytes < 20_000 + ALIGNMENT_BYTES  # it stopped because it was full
    blocks.sort()
    assert all(offset % ALIGNMENT_BYTES == 0 for offset, _ in blocks)
    assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(blocks))
    assert blocks[-1][0] + blocks[-1][1] <= 1 << 20


def test_released_in_any_order_the_arena_is_one_block_again() -> None:
    allocator = Allocator(1 << 20)
    rng = random.Random(11)
    offsets: list[int] = []
    while (offset := allocator.allocate(rng.choice([64, 100, 1000, 4096, 30_000]))) is not None:
        offsets.append(offset)
    rng.shuffle(offsets)
    for offset in offsets[: len(offsets) // 2]:
        allocator.release(offset)
    refill = [allocator.allocate(rng.choice([64, 1000, 4096])) for _ in range(200)]
    for offset in offsets[len(offsets) // 2 :] + [o for o in refill if o is not None]:
        allocator.release(offset)
    assert allocator.used_bytes == 0
    assert allocator.allocate(1 << 20) == 0


def test_mixed_sizes_churning_at_half_full_never_fail() -> None:
    # Many requests in flight, mostly small tensors and some large ones, each freed when its
    # response is done: while less than half the arena is in use every allocation succeeds.
    allocator = Allocator(64 << 20)
    rng = random.Random(3)
    live: list[int] = []
    for _ in range(20_000):
        if allocator.used_bytes > 24 << 20:
            allocator.release(live.pop(rng.randrange(len(live))))
            continue
        small = rng.random() < 0.9
        nbytes = rng.randint(64, 16 << 10) if small else rng.randint(256 << 10, 4 << 20)
        offset = allocator.allocate(nbytes)
        assert offset is not None, f"{nbytes} bytes refused with {allocator.used_bytes} in use"
        live.append(offset)
    for offset in live:
        allocator.release(offset)
    assert allocator.allocate(64 << 20) == 0


def test_a_gap_smaller_than_its_power_of_two_is_found() -> None:
    allocator = Allocator(4 * 960 + 64)  # 960-byte blocks are rounded to 960: 15 cache lines
    first, second, third, fourth = (allocator.allocate(960) for _ in range(4))
    assert allocator.allocate(960) is None  # 64 bytes left
    assert second is not None
    allocator.release(second)
    assert allocator.allocate(960) == second
    assert first is not None and third is not None and fourth is not None


def test_sizes_round_up_to_the_alignment_and_zero_bytes_take_one_line() -> None:
    allocator = Allocator(1024)
    assert allocator.allocate(0) == 0
    assert allocator.allocate(65) == 64
    assert allocator.used_bytes == 3 * ALIGNMENT_BYTES
    assert allocator.allocate(2048) is None


def test_releasing_twice_or_an_unknown_offset_is_an_error() -> None:
    allocator = Allocator(1024)
    offset = allocator.allocate(100)
    assert offset is not None
    allocator.release(offset)
    with pytest.raises(ValueError, match="released twice, or never allocated"):
        allocator.release(offset)
    with pytest.raises(ValueError, match="offset 64 is not an allocated block"):
        allocator.release(64)
    with pytest.raises(ValueError, match="cannot allocate -1 bytes"):
        allocator.allocate(-1)


def test_arrays_and_views_are_the_segment_itself() -> None:
    with Arena.create(1 << 16) as arena:
        array = arena.array(128, np.float32, (2, 3))
        assert not array.flags.owndata and array.flags.writeable
        payload = np.arange(6, dtype=np.float32)
        assert arena.write(128, payload.tobytes()) == 24
        np.testing.assert_array_equal(array, payload.reshape(2, 3))
        arena.write_array(128, payload.reshape(3, 2).T)  # strided source, written in C order
        np.testing.assert_array_equal(array.ravel(), payload.reshape(3, 2).T.ravel())
        for contiguous in (
            np.array(-1.5, np.float16),  # zero dimensions
            np.array([[True], [False]]),
            np.arange(4, dtype=np.int64).reshape(2, 1, 2),
        ):
            assert arena.write_array(1024, contiguous) == contiguous.nbytes
            back = arena.array(1024, contiguous.dtype, contiguous.shape)
            np.testing.assert_array_equal(back, contiguous)
        view = arena.view(128, 24)
        view[:4] = bytes(4)
        assert array[0, 0] == 0
        assert os.readlink(f"/proc/self/fd/{arena.fd}").startswith("/memfd:convoy-arena")


def test_reaching_past_the_end_is_an_index_error() -> None:
    with Arena.create(4096) as arena:
        with pytest.raises(IndexError, match="do not fit in the arena of 4096 bytes"):
            arena.view(4000, 100)
        with pytest.raises(IndexError, match="does not fit in the arena of 4096 bytes"):
            arena.array(4000, np.float64, (100,))
        with pytest.raises(IndexError):
            arena.write(-1, b"x")
        with pytest.raises(IndexError):
            arena.write_array(4090, np.zeros(2, np.float64))
        with pytest.raises(ValueError, match="negative dimension"):
            arena.array(0, np.float32, (2, -1))


def mapped(name: str) -> bool:
    with open("/proc/self/maps") as maps:
        return f"/memfd:{name} " in maps.read()


def test_close_with_live_views_unmaps_when_they_go() -> None:
    arena = Arena.create(4096, name="close-with-views")
    fd = arena.fd
    array = arena.array(0, np.uint8, (16,))
    view = arena.view(16, 16)
    array[:] = 7
    arena.close()
    arena.close()
    assert arena.closed
    assert array.sum() == 7 * 16  # the mapping outlives the arena while a view holds it
    view[:] = bytes(range(16))
    assert bytes(view) == bytes(range(16))
    with pytest.raises(ValueError, match="arena is closed"):
        arena.view(0, 1)
    with pytest.raises(OSError):
        os.fstat(fd)
    del array
    assert mapped("close-with-views")
    del view
    assert not mapped("close-with-views")


def test_close_without_views_unmaps_at_once() -> None:
    arena = Arena.create(4096, name="close-without-views")
    arena.write(0, b"abc")
    assert mapped("close-without-views")
    arena.close()
    assert not mapped("close-without-views")


def test_attach_refuses_a_short_or_unsealed_segment_and_closes_the_fd() -> None:
    with Arena.create(4096) as arena:
        fd = os.dup(arena.fd)
        with pytest.raises(ValueError, match="holds 4096 bytes, expected 8192"):
            Arena.attach(fd, 8192)
        with pytest.raises(OSError):
            os.fstat(fd)
    unsealed = os.memfd_create("plain")
    os.ftruncate(unsealed, 4096)
    with pytest.raises(ValueError, match="not sealed against shrinking"):
        Arena.attach(unsealed, 4096)


READER_AND_WRITER = """
import sys
import numpy as np
from server.workers.arena import Arena

arena = Arena.attach(int(sys.argv[1]), 1 << 20)
seen = arena.array(0, np.int64, (1000,))
assert (seen == np.arange(1000)).all(), "the child does not see the parent's bytes"
arena.write_array(8192, np.arange(1000, dtype=np.float32) * 2)
arena.close()
"""


def test_two_processes_share_one_segment_through_a_passed_fd() -> None:
    with Arena.create(1 << 20) as arena:
        arena.write_array(0, np.arange(1000, dtype=np.int64))
        result = arena.array(8192, np.float32, (1000,))  # made before the child writes
        subprocess.run(
            [sys.executable, "-c", READER_AND_WRITER, str(arena.fd)],
            pass_fds=[arena.fd],
            cwd=REPO,
            check=True,
            timeout=30,
        )
        np.testing.assert_array_equal(result, np.arange(1000, dtype=np.float32) * 2)
