"""GET /metrics (Prometheus text) and GET /healthz (JSON), on a tiny asyncio HTTP server."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, dict[str, Any]]]


class StatusServer:
    def __init__(self, host: str, port: int, metrics_text: Callable[[], str], health: Health) -> None:
        self.host, self.port = host, port
        self._metrics_text = metrics_text
        self._health = health
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics, health on /healthz", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            method, path, _ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            status, content_type, body = self._route(method, path.split("?", 1)[0])
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ValueError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _route(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if path == "/metrics":
            return "200 OK", "text/plain; version=0.0.4", self._metrics_text().encode()
        if path == "/healthz":
            ready, detail = self._health()
            status = "200 OK" if ready else "503 Service Unavailable"
            return status, "application/json", json.dumps(detail, indent=2).encode() + b"\n"
        return "404 Not Found", "text/plain", b"try /metrics or /healthz\n"
