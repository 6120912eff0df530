"""The /metrics and /healthz server at the byte level: hostile and broken requests get an answer
and a close, never a traceback, and what one client can hold is bounded."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bridge.ops import http
from bridge.ops.http import MAX_CONNECTIONS, MAX_HEAD, PER_ADDRESS, StatusServer
from bridge.ops.redact import Redactor
from support.bridges import eventually

OK_METRICS = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
OK_HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def health() -> tuple[bool, dict[str, Any]]:
    return True, {"pools": {"redis.pool1": {"up": True, "error": "redis://app:pw-in-url@10.0.0.9:6379 refused"}}}


@pytest.fixture
async def server(caplog: pytest.LogCaptureFixture) -> AsyncIterator[StatusServer]:
    status = StatusServer("127.0.0.1", 0, lambda: "hookbridge_up 1\n", health, Redactor(["s3cr3t"]))
    await status.start()
    caplog.set_level(logging.DEBUG)
    yield status
    await status.stop()
    # asyncio reports an exception escaping a connection handler at ERROR, with its traceback
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert problems == [], [r.getMessage() for r in problems]


async def exchange(port: int, data: bytes, *, half_close: bool = True) -> bytes:
    """Send raw bytes, then read the whole answer until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    if half_close:
        writer.write_eof()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


def status_of(answer: bytes) -> int:
    # aiohttp answers a request it cannot parse as HTTP/1.0 (which closes after the answer)
    assert answer.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), answer[:100]
    return int(answer[9:12])


async def test_a_header_over_the_limit_gets_431_and_a_close(server: StatusServer) -> None:
    request = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (64 * 1024 + 10) + b"\r\n\r\n"
    assert status_of(await exchange(server.port, request, half_close=False)) == 431
    assert status_of(await exchange(server.port, OK_METRICS)) == 200


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET /metrics\r\n\r\n",  # HTTP/0.9
        b"GET /metrics HTTP/2.0\r\n\r\n",
        b"get /metrics HTTP/1.1\r\n\r\n",
        b"GET  /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1 extra\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS ClientHello's first bytes
        bytes(range(256)) + b"\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n",  # truncated: the client stops before the blank line
        b"\x00\xff" * 100,  # binary garbage, then the client ends
        b"",
        b"GET /metrics HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host (RFC 9112 3.2: 400)
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    ],
)
async def test_malformed_requests_get_400(server: StatusServer, request_bytes: bytes) -> None:
    answer = await exchange(server.port, request_bytes)
    assert status_of(answer) == 400
    assert b"Connection: close" in answer or answer.startswith(b"HTTP/1.0 ")
    assert status_of(await exchange(server.port, OK_HEALTHZ)) == 200


async def test_a_request_that_never_ends_is_dropped(server: StatusServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "REQUEST_TIMEOUT", 0.2)
    answer = await exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n", half_close=False)
    assert answer == b""  # closed by the server, not by this client
    assert server.connections == 0


async def test_a_client_sending_without_end_is_cut_off_after_a_bounded_read(server: StatusServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    writer.write(b"GET /metrics HTTP/1.1\r\nX-Endless: " + b"b" * (8 * 1024 * 1024))
    head = await asyncio.wait_for(reader.read(12), 10)
    assert head == b"HTTP/1.1 431"
    # the server stops reading after a bound: most of the 8 MB is never taken
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(writer.drain(), 10)
    writer.close()


async def hold(port: int, count: int, source: str = "127.0.0.1") -> list[tuple[Any, Any]]:
    """`count` connections from `source` (any 127.x address is this machine's) that send nothing yet."""
    return [await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)) for _ in range(count)]


async def test_connections_over_the_limit_get_503_and_the_endpoint_answers_after(server: StatusServer) -> None:
    # MAX_CONNECTIONS from several addresses, each within its PER_ADDRESS share
    sources = [f"127.0.0.{2 + n}" for n in range(MAX_CONNECTIONS // PER_ADDRESS)]
    held = [pair for source in sources for pair in await hold(server.port, PER_ADDRESS, source)]

    async def open_now() -> int:
        return server.connections

    await eventually(open_now, lambda n: n == MAX_CONNECTIONS)  # each held connection waits for its request
    # past the bound only a probe is served
    assert status_of(await exchange(server.port, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")) == 503
    assert status_of(await exchange(server.port, OK_METRICS)) == 200
    assert status_of(await exchange(server.port, OK_HEALTHZ)) == 200
    for reader, writer in held:
        writer.write(OK_METRICS)
        assert status_of(await asyncio.wait_for(reader.read(), 10)) == 200
        writer.close()
    assert status_of(await exchange(server.port, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")) == 404


async def test_one_client_holding_many_half_sent_requests_cannot_make_healthz_503(server: StatusServer) -> None:
    """The finding: ~70 half-sent requests from one client made /healthz answer 503 18 times in 20."""
    half_sent = b"GET /api/v1/clients HTTP/1.1\r\nHost: x\r\n"
    held = await hold(server.port, 70)
    for _reader, writer in held:
        writer.write(half_sent)
        await writer.drain()
    answers = [status_of(await exchange(server.port, OK_HEALTHZ)) for _ in range(20)]
    assert answers == [200] * 20
    # from another address the API's share is untouched: a non-probe request is served (404 here)
    other = await asyncio.open_connection("127.0.0.1", server.port, local_addr=("127.0.0.9", 0))
    other[1].write(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(await asyncio.wait_for(other[0].read(), 10)) == 404
    other[1].close()
    for _reader, writer in held:
        writer.close()

    async def open_now() -> int:
        return server.connections

    await eventually(open_now, lambda n: n == 0)
    # every place is given back: the flooder's address has its whole share again
    assert status_of(await exchange(server.port, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")) == 404
    assert (server._general, server._reserve, server._per_address) == (0, {}, {})


async def test_one_address_gets_only_its_share_of_the_connections(server: StatusServer) -> None:
    held = await hold(server.port, PER_ADDRESS, "127.0.0.2")

    async def open_now() -> int:
        return server.connections

    await eventually(open_now, lambda n: n == PER_ADDRESS)
    extra = await exchange_from(server.port, "127.0.0.2", b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(extra) == 503  # past its share: only a probe
    assert status_of(await exchange_from(server.port, "127.0.0.2", OK_HEALTHZ)) == 200
    assert status_of(await exchange_from(server.port, "127.0.0.3", b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")) == 404
    for _reader, writer in held:
        writer.close()


async def exchange_from(port: int, source: str, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(data)
    writer.write_eof()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


async def test_routes_and_the_healthz_error_never_shows_a_password(server: StatusServer) -> None:
    answer = await exchange(server.port, b"GET /healthz?verbose HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(answer) == 200
    assert b"redis://app:***@10.0.0.9:6379 refused" in answer
    assert b"pw-in-url" not in answer
    assert status_of(await exchange(server.port, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) == 405
    assert status_of(await exchange(server.port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) == 405
    assert status_of(await exchange(server.port, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")) == 404
    metrics = await exchange(server.port, OK_METRICS)
    assert b"Content-Type: text/plain; version=0.0.4" in metrics and metrics.endswith(b"hookbridge_up 1\n")
    assert MAX_HEAD < 64 * 1024


def test_the_same_bounds_under_uvloop() -> None:
    """`hookbridge run` uses uvloop, whose transports are not asyncio.Transport subclasses."""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> list[int]:
        status = StatusServer("127.0.0.1", 0, lambda: "hookbridge_up 1\n", health, Redactor())
        await status.start()
        try:
            big = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEAD + 10) + b"\r\n\r\n"
            answers = [
                await exchange(status.port, OK_METRICS),
                await exchange(status.port, b"GARBAGE\r\n\r\n"),
                await exchange(status.port, big, half_close=False),
                await exchange(status.port, b""),
                await exchange(status.port, OK_HEALTHZ),
            ]
            return [status_of(answer) for answer in answers]
        finally:
            await status.stop()

    assert uvloop.run(scenario()) == [200, 400, 431, 400, 200]
