"""InstanceThread: calls run on its one thread in order; results, errors, cancellation, close."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from backends.inline import InlineRule
from backends.instance_thread import InstanceClosedError, InstanceThread


async def test_calls_run_on_the_thread_in_arrival_order() -> None:
    worker = InstanceThread("instance_0")
    seen: list[tuple[int, str]] = []

    def call(index: int) -> int:
        seen.append((index, threading.current_thread().name))
        return index * 10

    try:
        results = await asyncio.gather(*(worker.run(call, i) for i in range(20)))
    finally:
        worker.close()
    assert results == [i * 10 for i in range(20)]
    assert seen == [(i, "instance_0") for i in range(20)]


async def test_an_exception_reaches_the_caller_and_the_thread_goes_on() -> None:
    worker = InstanceThread("instance_0")

    def fail() -> None:
        raise ValueError("bad batch")

    try:
        with pytest.raises(ValueError, match="bad batch"):
            await worker.run(fail)
        assert await worker.run(lambda: "next") == "next"
    finally:
        worker.close()


async def test_a_call_cancelled_while_queued_never_runs() -> None:
    worker = InstanceThread("instance_0")
    release = threading.Event()
    ran: list[str] = []
    try:
        busy = asyncio.ensure_future(worker.run(release.wait, 5))
        queued = asyncio.ensure_future(worker.run(ran.append, "queued"))
        await asyncio.sleep(0.05)
        queued.cancel()
        await asyncio.sleep(0)  # the cancellation lands before the thread frees up
        release.set()
        assert await busy is True
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert await worker.run(ran.append, "after") is None
    finally:
        worker.close()
    assert ran == ["after"]


async def test_a_caller_cancelled_while_its_call_runs_drops_the_result() -> None:
    worker = InstanceThread("instance_0")
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "late"

    try:
        running = asyncio.ensure_future(worker.run(slow))
        await asyncio.to_thread(started.wait, 5)
        running.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert await worker.run(lambda: "next") == "next"  # the late result harmed nothing
    finally:
        worker.close()


async def _busy_and_queued(
    worker: InstanceThread,
) -> tuple[threading.Event, asyncio.Future[bool], asyncio.Future[str]]:
    """A call holding the thread until the event is set, and one queued behind it."""
    release = threading.Event()
    busy = asyncio.ensure_future(worker.run(release.wait, 5))
    queued = asyncio.ensure_future(worker.run(lambda: "queued"))
    await asyncio.sleep(0.05)
    return release, busy, queued


async def test_close_lets_queued_calls_finish_and_refuses_new_ones() -> None:
    worker = InstanceThread("instance_0")
    release, busy, queued = await _busy_and_queued(worker)
    release.set()
    await asyncio.to_thread(worker.close)
    assert await busy is True and await queued == "queued"
    with pytest.raises(InstanceClosedError, match="closed"):
        await worker.run(lambda: None)


async def test_close_with_cancel_pending_fails_the_queued_calls() -> None:
    worker = InstanceThread("instance_0")
    release, busy, queued = await _busy_and_queued(worker)
    closing = asyncio.ensure_future(asyncio.to_thread(worker.close, cancel_pending=True))
    await asyncio.sleep(0.05)
    release.set()
    await closing
    assert await busy is True  # the running call always finishes
    with pytest.raises(InstanceClosedError, match="before the call ran"):
        await queued


def test_a_result_for_a_closed_loop_is_dropped_and_the_thread_serves_on() -> None:
    worker = InstanceThread("instance_0")
    release = threading.Event()
    loop = asyncio.new_event_loop()
    pending = loop.create_task(worker.run(release.wait, 5))
    loop.run_until_complete(asyncio.sleep(0.05))  # the call is on the thread
    pending.cancel()
    loop.run_until_complete(asyncio.gather(pending, return_exceptions=True))
    loop.close()
    release.set()
    try:
        assert asyncio.run(worker.run(lambda: "served")) == "served"
    finally:
        worker.close()


def test_the_interpreter_exits_after_the_running_call_finishes() -> None:
    # The call is running when the main thread returns: it completes, and exit is clean.
    script = textwrap.dedent(
        """
        import asyncio, threading, time
        from backends.instance_thread import InstanceThread

        worker = InstanceThread("instance_0")
        started = threading.Event()

        def slow():
            started.set()
            time.sleep(0.3)
            print("finished", flush=True)

        async def main():
            asyncio.ensure_future(worker.run(slow))
            await asyncio.to_thread(started.wait, 5)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "finished\n"


async def test_fast_calls_move_inline_once_measured_and_slow_ones_stay_on_the_thread() -> None:
    worker = InstanceThread("instance_0", InlineRule(limit_ns=50_000_000, window=3))
    loop_thread = threading.current_thread().name

    def where() -> str:
        return threading.current_thread().name

    def slow() -> str:
        end_ns = time.thread_time_ns() + 60_000_000  # busy: CPU time over the limit
        while time.thread_time_ns() < end_ns:
            pass
        return threading.current_thread().name

    try:
        fast_runs = [await worker.run(where, size=1) for _ in range(5)]
        slow_runs = [await worker.run(slow, size=8) for _ in range(4)]
    finally:
        worker.close()
    assert fast_runs == ["instance_0"] * 3 + [loop_thread] * 2
    assert slow_runs == ["instance_0"] * 4


async def test_without_a_rule_every_call_runs_on_the_thread() -> None:
    worker = InstanceThread("instance_0")
    try:
        seen = [await worker.run(lambda: threading.current_thread().name) for _ in range(20)]
    finally:
        worker.close()
    assert seen == ["instance_0"] * 20


async def test_calls_of_size_zero_and_calls_after_keep_on_thread_stay_on_the_thread() -> None:
    worker = InstanceThread("instance_0", InlineRule(limit_ns=50_000_000, window=3))
    loop_thread = threading.current_thread().name

    def where() -> str:
        return threading.current_thread().name

    try:
        unsized = [await worker.run(where, size=0) for _ in range(5)]
        sized = [await worker.run(where, size=1) for _ in range(5)]
        worker.keep_on_thread()
        kept = [await worker.run(where, size=1) for _ in range(3)]
    finally:
        worker.close()
    assert unsized == ["instance_0"] * 5
    assert sized == ["instance_0"] * 3 + [loop_thread] * 2
    assert kept == ["instance_0"] * 3
