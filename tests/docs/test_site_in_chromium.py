"""The documentation site, built with `mkdocs build --strict`, opened page by page in headless
Chromium (Debian's `chromium`, which .ci/run installs) from a local HTTP server, as a reader's
browser opens it: every page must load, render its content with the theme's JavaScript running,
and log no console error.

Chromium is driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so one browser loads every page and
nothing beyond the standard library is needed. Every host but 127.0.0.1 resolves to nothing, so
the test never reaches the network; the one thing the site loads from elsewhere, Mermaid (the
Material theme fetches it from unpkg.com for the architecture page's diagram), is the only
failure tolerated, and a page that shows a diagram must still render its text.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MERMAID_CDN = "https://unpkg.com/mermaid@"
PAGE_TIMEOUT_S = 20.0
SETTLE_S = 0.3  # after the load event: the theme's bundle runs its first tasks


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="no docs extra installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr}"
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _above_nine(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class Browser:
    """One headless Chromium, one tab, spoken to over the DevTools pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # The child's ends above 9, so that moving them to 3 and 4 overwrites neither.
        to_chrome_r, from_chrome_w = (_above_nine(fd) for fd in (to_chrome_r, from_chrome_w))
        args = [
            binary,
            "--headless",
            "--remote-debugging-pipe",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        # Chromium reads commands on fd 3 and writes answers on fd 4.
        moves = f"3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-"
        script = f'exec "$@" {moves}'
        self._process = subprocess.Popen(
            ["bash", "-c", script, "chromium", *args],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: bool = False
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read(time.monotonic() + PAGE_TIMEOUT_S)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            self.events.append(answer)

    def wait_for(self, method: str, deadline: float) -> None:
        while not any(event.get("method") == method for event in self.events):
            self.events.append(self._read(deadline))

    def drain(self, seconds: float) -> None:
        """Collect the events that arrive within `seconds`."""
        end = time.monotonic() + seconds
        while True:
            try:
                self.events.append(self._read(end))
            except TimeoutError:
                return

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True
        )
        return result["result"].get("value")

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_chrome], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium exited")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close")
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    binary = _chromium()
    if binary is None:
        pytest.skip(
            "chromium is not installed: .ci/run installs Debian's (apt-get install chromium)"
        )
    opened = Browser(binary, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield opened
    finally:
        opened.close()


def _errors(events: list[dict[str, Any]]) -> list[str]:
    """The console errors among a page's events: uncaught exceptions, console.error calls and
    the browser's own error entries (a resource that failed to load)."""
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text", "")
            errors.append(f"exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            errors.append(f"console.error: {args}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
    return errors


def _pages(site: Path) -> list[str]:
    return sorted(path.relative_to(site).as_posix() for path in site.rglob("*.html"))


def test_every_page_renders_without_console_errors(
    site: Path, served: str, browser: Browser
) -> None:
    pages = _pages(site)
    assert len(pages) >= 25, pages  # every page of the nav, and the 404 page
    failures: dict[str, list[str]] = {}
    diagrams = 0
    for page in pages:
        browser.events.clear()
        url = f"{served}/{page.removesuffix('index.html')}"
        navigated = browser.call("Page.navigate", {"url": url}, session=True)
        problems = []
        if "errorText" in navigated:
            problems.append(f"navigation failed: {navigated['errorText']}")
        browser.wait_for("Page.loadEventFired", time.monotonic() + PAGE_TIMEOUT_S)
        browser.drain(SETTLE_S)
        state = browser.evaluate(
            """({
                title: document.querySelector('article h1')?.textContent.trim() ?? '',
                words: (document.querySelector('article')?.innerText ?? '').split(/\\s+/).length,
                bundle: typeof document$ !== 'undefined',
            })"""
        )
        if not state["title"]:
            problems.append("no heading: the page did not render")
        if state["words"] < 20 and page != "404.html":
            problems.append(f"only {state['words']} words rendered")
        if not state["bundle"]:
            problems.append("the theme's JavaScript did not run")
        has_diagram = 'class="mermaid"' in (site / page).read_text(encoding="utf-8")
        diagrams += has_diagram
        errors = _errors(browser.events)
        tolerated = [e for e in errors if MERMAID_CDN in e] if has_diagram else []
        problems += [e for e in errors if e not in tolerated]
        if problems:
            failures[page] = problems
    assert not failures, json.dumps(failures, indent=1)
    assert diagrams >= 1, "the architecture page's Mermaid diagram is missing"
