"""GET /metrics (Prometheus text) and GET /healthz (JSON), on a tiny asyncio HTTP server.

Each connection serves one request and closes. What one client can hold is bounded: a request
head of at most MAX_HEAD bytes (a longer one gets 431), REQUEST_TIMEOUT seconds for the whole
exchange (a slow or stalled client is dropped), and at most MAX_CONNECTIONS
connections at once (more get 503 at once, without being read). A malformed request gets 400.
None of these is an error of the bridge: they are answered and closed, never logged as one.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from bridge.errors import HookbridgeError
from bridge.redact import Redactor

log = logging.getLogger(__name__)

HealthAnswer = tuple[bool, dict[str, Any]]
# Each may be a coroutine function too: `run --workers N`'s supervisor asks its workers first.
Health = Callable[[], HealthAnswer | Awaitable[HealthAnswer]]
MetricsText = Callable[[], str | Awaitable[str]]

_T = TypeVar("_T")

MAX_HEAD = 16 * 1024  # request line and headers; a Prometheus scrape sends a few hundred bytes
MAX_CONNECTIONS = 64  # a few scrapers and health probes; more is a misbehaving client
REQUEST_TIMEOUT = 5.0
_LINGER_BYTES = 256 * 1024  # read (and drop) this much of a refused request, so the answer is not reset

_REQUEST_LINE = re.compile(r"([A-Z]+) (/\S*) HTTP/1\.[01]")


class BadRequest(HookbridgeError):
    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class StatusServer:
    def __init__(
        self,
        host: str,
        port: int,
        metrics_text: MetricsText,
        health: Health,
        redactor: Redactor | None = None,
    ) -> None:
        self.host, self.port = host, port
        self._metrics_text = metrics_text
        self._health = health
        self._redactor = redactor or Redactor()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._handlers)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics, health on /healthz", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):  # a client still sending: end it now, not in 5 s
                task.cancel()
            await asyncio.gather(*self._handlers)
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                if self.connections > MAX_CONNECTIONS:
                    await self._refuse(reader, writer, "503 Service Unavailable")
                else:
                    await self._serve(reader, writer)
        except (TimeoutError, ConnectionError):
            pass  # a stalled or vanished client: nothing to answer to
        except asyncio.CancelledError:
            pass  # stop(): nobody awaits a connection's task, so asyncio would log this as an error
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path = await self._read_head(reader)
        except BadRequest as refused:
            await self._refuse(reader, writer, refused.status)
            return
        await self._answer(writer, *await self._route(method, path))

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: str) -> None:
        await self._answer(writer, status, "text/plain", status.encode() + b"\n")
        await self._linger(reader)

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str]:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise BadRequest("431 Request Header Fields Too Large") from None
        except asyncio.IncompleteReadError:
            raise BadRequest("400 Bad Request") from None  # the client ended the request half-way
        match = _REQUEST_LINE.fullmatch(head.split(b"\r\n", 1)[0].decode("latin-1"))
        if match is None:
            raise BadRequest("400 Bad Request")
        return match[1], match[2].split("?", 1)[0]

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: str, content_type: str, body: bytes) -> None:
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()

    @staticmethod
    async def _linger(reader: asyncio.StreamReader) -> None:
        # Closing with unread input resets the connection, and the client may lose the answer.
        with contextlib.suppress(asyncio.LimitOverrunError, asyncio.IncompleteReadError):
            received = 0
            while received < _LINGER_BYTES:
                chunk = await reader.read(MAX_HEAD)
                if not chunk:
                    return
                received += len(chunk)

    async def _route(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if path == "/metrics":
            text = await _resolved(self._metrics_text())
            return "200 OK", "text/plain; version=0.0.4", self._redactor.text(text).encode()
        if path == "/healthz":
            ready, detail = await _resolved(self._health())
            status = "200 OK" if ready else "503 Service Unavailable"
            body = json.dumps(self._redactor.value(detail), indent=2).encode() + b"\n"
            return status, "application/json", body
        return "404 Not Found", "text/plain", b"try /metrics or /healthz\n"


async def _resolved(value: _T | Awaitable[_T]) -> _T:
    if inspect.isawaitable(value):
        return await value
    return value
