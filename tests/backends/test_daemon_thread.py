"""`on_daemon_thread`: the work's result or error reaches the caller; the thread is a daemon's
(the process never waits for it at exit); a caller that left drops the outcome quietly; the
caller's context variables are seen, as under `asyncio.to_thread`."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from backends import on_daemon_thread

_REQUEST = contextvars.ContextVar("request", default="none")


def _describe() -> tuple[str, bool, str]:
    thread = threading.current_thread()
    return thread.name, thread.daemon, _REQUEST.get()


def test_the_result_comes_back_from_a_named_daemon_thread_in_the_callers_context() -> None:
    async def main() -> tuple[str, bool, str]:
        _REQUEST.set("r1")
        return await on_daemon_thread(_describe, name="convoy-test")

    assert asyncio.run(main()) == ("convoy-test", True, "r1")


def test_an_error_reaches_the_caller() -> None:
    def fails(message: str) -> None:
        raise ValueError(message)

    async def main() -> None:
        await on_daemon_thread(fails, "no good", name="convoy-test")

    with pytest.raises(ValueError, match="no good"):
        asyncio.run(main())


def test_a_caller_that_left_drops_the_outcome() -> None:
    release = threading.Event()
    finished = threading.Event()

    def blocks() -> str:
        release.wait(5)
        finished.set()
        return "late"

    async def main() -> None:
        waiting = asyncio.ensure_future(on_daemon_thread(blocks, name="convoy-test"))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await asyncio.to_thread(finished.wait, 5)
        await asyncio.sleep(0.05)  # its outcome arrives on the loop, and is dropped

    asyncio.run(main())  # no InvalidStateError, nothing logged as never retrieved
    assert finished.is_set()
