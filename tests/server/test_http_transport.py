"""HttpServer over real loopback sockets, spoken to byte for byte: keep-alive and pipelining,
bodies (length, chunked, compressed, too large), Expect: 100-continue, malformed requests,
streamed answers, clients that leave, and a stop with an answer under way."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
import uvloop

from server.frontend.http.connection import MAX_HEAD_BYTES
from server.frontend.http.messages import (
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    Request,
    Response,
    Router,
    Streamed,
    json_response,
)
from server.frontend.http.transport import HttpServer

LIMIT_BYTES = 1024
TOO_LARGE = "too large"


async def _echo(request: Request) -> Response:
    return json_response(
        {
            "method": request.method,
            "path": request.path,
            "model": request.match_info.get("model"),
            "body": request.body.decode(),
            "header": request.headers.get("x-Test"),
        }
    )


async def _slow(request: Request) -> Response:
    await asyncio.sleep(float(request.body or b"0.2"))
    return Response(200, b"slow", "text/plain")


async def _events(request: Request) -> Streamed:
    async def chunks() -> AsyncIterator[bytes]:
        for word in (b"one", b"", b"two"):
            yield word

    return Streamed(200, "text/event-stream", chunks())


async def _fails(request: Request) -> Response:
    raise RuntimeError("boom")


def _router() -> Router:
    router = Router()
    router.add("GET", "/v2/models/{model}", _echo)
    router.add("POST", "/v2/models/{model}/infer", _echo)
    router.add("POST", "/slow", _slow)
    router.add("GET", "/events", _events)
    router.add("GET", "/fails", _fails)
    return router


async def _serve() -> tuple[HttpServer, int]:
    server = HttpServer(_router(), LIMIT_BYTES, TOO_LARGE)
    return server, await server.start("127.0.0.1", 0)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-cased names) and body (chunks joined)."""
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    headers = {}
    while (line := await reader.readline()) != b"\r\n":
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int((await reader.readline()).strip(), 16):
            body += await reader.readexactly(size)
            await reader.readline()
        await reader.readline()
        return status, headers, body
    return status, headers, await reader.readexactly(int(headers.get("content-length", "0")))


def _request(method: str, path: str, body: bytes = b"", *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", *headers]
    if body and not any(h.lower().startswith("transfer-encoding") for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    server, port = await _serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        _request("POST", "/slow", b"0.1")
        + _request("GET", "/v2/models/m%20one", b"", "X-Test: yes")
        + _request("POST", "/v2/models/m/infer", b"hello")
    )
    answers = [await _read_response(reader) for _ in range(3)]
    assert answers[0][2] == b"slow"
    second = json.loads(answers[1][2])
    assert (second["model"], second["header"], second["method"]) == ("m one", "yes", "GET")
    assert json.loads(answers[2][2])["body"] == "hello"
    assert all(status == 200 and "date" in headers for status, headers, _ in answers)
    writer.close()
    await server.stop()


async def test_chunked_and_compressed_bodies_arrive_whole() -> None:
    server, port = await _serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    chunked = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    writer.write(_request("POST", "/v2/models/m/infer", chunked, "Transfer-Encoding: chunked"))
    assert json.loads((await _read_response(reader))[2])["body"] == "abcde"
    for encoding, packed in (("gzip", gzip.compress(b"zipped")), ("deflate", zlib.compress(b"z"))):
        header = f"Content-Encoding: {encoding}"
        writer.write(_request("POST", "/v2/models/m/infer", packed, header))
        status, _, body = await _read_response(reader)
        assert status == 200 and json.loads(body)["body"] in ("zipped", "z")
    writer.write(_request("POST", "/v2/models/m/infer", b"plain", "Content-Encoding: br"))
    status, _, body = await _read_response(reader)
    assert status == 400 and "not supported" in json.loads(body)["error"]
    writer.close()
    await server.stop()


async def test_a_body_past_the_limit_is_refused_and_the_connection_goes_on() -> None:
    server, port = await _serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for body, headers in (
        (b"x" * (LIMIT_BYTES + 1), ()),
        (gzip.compress(b"x" * (LIMIT_BYTES * 64)), ("Content-Encoding: gzip",)),
        (
            b"%x\r\n%s\r\n0\r\n\r\n" % (LIMIT_BYTES + 1, b"y" * (LIMIT_BYTES + 1)),
            ("Transfer-Encoding: chunked",),
        ),
    ):
        writer.write(_request("POST", "/v2/models/m/infer", body, *headers))
        status, _, answer = await _read_response(reader)
        assert (status, json.loads(answer)) == (400, {"error": TOO_LARGE})
    writer.write(_request("POST", "/v2/models/m/infer", b"fits"))
    assert json.loads((await _read_response(reader))[2])["body"] == "fits"
    writer.close()
    await server.stop()


async def test_expect_100_continue_is_answered_before_the_body() -> None:
    server, port = await _serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
    writer.write(head.encode())
    assert await reader.readline() == b"HTTP/1.1 100 Continue\r\n"
    assert await reader.readline() == b"\r\n"
    writer.write(b"body")
    assert json.loads((await _read_response(reader))[2])["body"] == "body"
    writer.close()
    await server.stop()


async def test_unknown_paths_methods_and_malformed_requests_get_json_errors() -> None:
    server, port = await _serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("GET", "/nowhere") + _request("DELETE", "/v2/models/m"))
    writer.write(_request("GET", "/fails"))
    missing, wrong, fails = [await _read_response(reader) for _ in range(3)]
    assert missing[0] == 404 and "/nowhere" in json.loads(missing[2])["error"]
    assert wrong[0] == 405
    assert (fails[0], json.loads(fails[2])) == (500, {"error": "internal error: boom"})
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        _request("GET", "/v2/models/m", b"", *[f"X-Pad-{i}: {'p' * 1000}" for i in range(70)])
    )
    status, headers, body = await _read_response(reader)
    assert (status, headers["connection"]) == (400, "close")
    assert f"exceed {MAX_HEAD_BYTES} bytes" in json.loads(body)["error"]
    assert await reader.read() == b""
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    status, headers, body = await _read_response(reader)
    assert status == 400 and headers["connection"] == "close"
    assert "bad request" in json.loads(body)["error"]
    assert await reader.read() == b""  # and the connection is closed
    writer.close()
    await server.stop()


async def test_an_upgrade_is_not_taken_and_its_answer_closes_the_connection() -> None:
    server, port = await _serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    upgrade = _request("GET", "/v2/models/m", b"", "Connection: Upgrade", "Upgrade: h2c")
    writer.write(upgrade + _request("GET", "/v2/models/unanswered"))
    status, headers, body = await _read_response(reader)
    assert (status, headers["connection"], json.loads(body)["model"]) == (200, "close", "m")
    assert await reader.read() == b""
    writer.close()
    await server.stop()


async def test_a_streamed_answer_is_chunked_and_http_1_0_closes_after_its_answer() -> None:
    server, port = await _serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("GET", "/events"))
    status, headers, body = await _read_response(reader)
    assert (status, headers["content-type"], body) == (200, "text/event-stream", b"onetwo")
    writer.write(b"GET /v2/models/m HTTP/1.0\r\n\r\n")
    status, headers, _ = await _read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await reader.read() == b""
    writer.close()
    await server.stop()


async def test_a_connection_past_its_age_is_closed_after_its_next_answer() -> None:
    server = HttpServer(_router(), LIMIT_BYTES, TOO_LARGE, max_connection_age_s=0.2)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("GET", "/v2/models/young"))
    assert "connection" not in (await _read_response(reader))[1]
    await asyncio.sleep(0.3)
    writer.write(_request("GET", "/v2/models/old"))
    status, headers, body = await _read_response(reader)
    assert (status, headers["connection"], json.loads(body)["model"]) == (200, "close", "old")
    assert await reader.read() == b""
    writer.close()
    await server.stop()


async def test_a_request_whose_bytes_stop_coming_is_dropped_and_a_slow_answer_is_not() -> None:
    """Half a request and then nothing (slowloris): its connection is closed once no byte has
    come for `stalled_read_s`; a request being answered, however long, is left alone, and so is
    one whose bytes keep coming."""
    server = HttpServer(_router(), LIMIT_BYTES, TOO_LARGE, stalled_read_s=0.3)
    port = await server.start("127.0.0.1", 0)
    stalled_reader, stalled = await asyncio.open_connection("127.0.0.1", port)
    stalled.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12")
    slow_reader, slow = await asyncio.open_connection("127.0.0.1", port)
    slow.write(_request("POST", "/slow", b"1.0"))  # answered after 1 s
    trickle_reader, trickle = await asyncio.open_connection("127.0.0.1", port)
    trickle.write(b"POST /v2/models/t/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n")
    for byte in b"abcdef":  # a byte every 0.2 s: slow, never stalled
        await asyncio.sleep(0.2)
        trickle.write(bytes([byte]))
    assert await asyncio.wait_for(stalled_reader.read(), 2.0) == b""
    assert (await _read_response(slow_reader))[2] == b"slow"
    assert json.loads((await _read_response(trickle_reader))[2])["body"] == "abcdef"
    for writer in (stalled, slow, trickle):
        writer.close()
    await server.stop()


async def test_a_client_that_leaves_mid_answer_harms_no_other() -> None:
    server, port = await _serve()
    _, leaving = await asyncio.open_connection("127.0.0.1", port)
    leaving.write(_request("POST", "/slow", b"0.2"))
    await asyncio.sleep(0.05)
    leaving.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("POST", "/slow", b"0.3"))
    assert (await _read_response(reader))[2] == b"slow"
    writer.close()
    await server.stop()


async def test_stop_finishes_the_answer_under_way_and_closes_idle_connections() -> None:
    server, port = await _serve()
    idle_reader, idle = await asyncio.open_connection("127.0.0.1", port)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("POST", "/slow", b"0.3"))
    await asyncio.sleep(0.1)
    await server.stop()
    status, headers, body = await _read_response(reader)
    assert (status, body, headers["connection"]) == (200, b"slow", "close")
    assert await idle_reader.read() == b""
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    for stream in (idle, writer):
        stream.close()


@pytest.mark.parametrize(
    "scenario",
    [
        test_pipelined_requests_are_answered_in_order_on_one_connection,
        test_a_body_past_the_limit_is_refused_and_the_connection_goes_on,
    ],
)
def test_the_same_on_uvloop(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    uvloop.run(scenario())  # the server's loop


def test_the_router_answers_the_same_whether_a_path_is_new_or_asked_again() -> None:
    router = _router()
    for _ in range(2):  # the second time from what it kept
        found = router.resolve("GET", "/v2/models/m%2Fone")
        assert not isinstance(found, int)
        assert found[0] is not None and dict(found[1]) == {"model": "m/one"}
        assert router.resolve("DELETE", "/v2/models/m") == METHOD_NOT_ALLOWED
        assert router.resolve("GET", "/v2/nothing/here") == NOT_FOUND
    # A route added later is found for a path that was not found before it.
    router.add("GET", "/v2/nothing/{what}", _echo)
    found = router.resolve("GET", "/v2/nothing/here")
    assert not isinstance(found, int) and dict(found[1]) == {"what": "here"}
    # Many distinct paths (a scan, or many models) are each answered right, the first again too.
    for index in range(3000):
        found = router.resolve("POST", f"/v2/models/m{index}/infer")
        assert not isinstance(found, int) and found[1]["model"] == f"m{index}"
    found = router.resolve("POST", "/v2/models/m0/infer")
    assert not isinstance(found, int) and found[1]["model"] == "m0"
