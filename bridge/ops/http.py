"""The bridge's HTTP listener (`metrics.listener`) on aiohttp.web: GET /metrics (Prometheus text,
through prometheus_client: bridge/ops/metrics.py), GET /healthz (JSON), and the management API under
/api/v1/ when it is enabled (bridge/api/).

aiohttp parses the requests and answers them. In front of each connection a small guard keeps the
bounds this listener has always had, which aiohttp does not give by itself:

- a request head (request line and headers) of at most MAX_HEAD bytes: a longer one gets 431 at
  once, read no further than a bound (a client sending without end is cut off);
- a request line that is not `METHOD /path HTTP/1.x` (garbage, HTTP/0.9, HTTP/2, TLS sent to a
  plain listener, lower-case methods) or a head the client ended half-way gets 400;
- REQUEST_TIMEOUT seconds for each connection outside a handler (a slow or stalled client is
  dropped; a handler reading a body bounds its own read by the same time);
- at most MAX_CONNECTIONS connections at once, and at most PER_ADDRESS of them from one address;
- past either bound, a connection is still read, but only a probe (GET /healthz or /metrics) is
  served on it: PROBE_RESERVE such connections at once, each new one ending the oldest that has not
  sent its whole head yet. So a client holding many half-sent requests cannot make /healthz answer
  503 (an orchestrator would restart the bridge for it); anything else past the bounds gets 503.

Each connection serves one request and closes (`Connection: close`). None of these refusals is an
error of the bridge: they are answered and closed, never logged as one.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from bridge.ops.redact import Redactor

log = logging.getLogger(__name__)

HealthAnswer = tuple[bool, dict[str, Any]]
# Each may be a coroutine function too: `run --workers N`'s supervisor asks its workers first.
Health = Callable[[], HealthAnswer | Awaitable[HealthAnswer]]
MetricsText = Callable[[], str | Awaitable[str]]
# Adds routes (the API) to the application before it starts.
Routes = Callable[[web.Application], None]

_T = TypeVar("_T")

MAX_HEAD = 16 * 1024  # request line and headers; a Prometheus scrape sends a few hundred bytes
MAX_CONNECTIONS = 64  # a few scrapers, health probes and API clients; more is a misbehaving client
PER_ADDRESS = 16  # one address's share of MAX_CONNECTIONS (a browser opens 6 per host)
PROBE_RESERVE = 16  # connections past the bounds, for /healthz and /metrics only
PROBE_PATHS = frozenset({"/healthz", "/metrics"})
REQUEST_TIMEOUT = 5.0
_LINGER_BYTES = 256 * 1024  # read (and drop) this much of a refused request, so the answer is not reset

_REQUEST_LINE = re.compile(rb"([A-Z]+) (/\S*) HTTP/1\.[01]")
_END_OF_HEAD = b"\r\n\r\n"


class StatusServer:
    def __init__(
        self,
        host: str,
        port: int,
        metrics_text: MetricsText,
        health: Health,
        redactor: Redactor | None = None,
        *,
        routes: Routes | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_body: int = 1024 * 1024,
    ) -> None:
        self.host, self.port = host, port
        self._metrics_text = metrics_text
        self._health = health
        self._redactor = redactor or Redactor()
        self._routes = routes
        self._ssl = ssl_context
        self._max_body = max_body
        self.app = web.Application()  # made again at start()
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._guards: dict[asyncio.Transport, _Guard] = {}  # in the order they connected
        self._per_address: dict[str, int] = {}  # connections open now by peer address (all of them)
        self._general = 0  # connections open now within the bounds (not probe-only)
        # probe-only connections not refused, oldest first (a dict for its order): the reserve
        self._reserve: dict[_Guard, None] = {}

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._guards)

    async def start(self) -> None:
        app = self.app = web.Application(client_max_size=self._max_body, middlewares=[self._one_request])
        app.router.add_get("/metrics", self._metrics, allow_head=False)
        app.router.add_get("/healthz", self._healthz, allow_head=False)
        if self._routes is not None:
            self._routes(app)
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            max_line_size=MAX_HEAD,
            max_field_size=MAX_HEAD,
            lingering_time=1.0,
        )
        await self._runner.setup()
        handlers = self._runner.server
        assert handlers is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Guard(self, handlers), self.host, self.port, ssl=self._ssl, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        scheme = "https" if self._ssl else "http"
        log.info("metrics on %s://%s:%d/metrics, health on /healthz", scheme, self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for transport in list(self._guards):  # a client still sending: end it now, not in 5 s
                transport.abort()
            await self._server.wait_closed()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _one_request(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        guard = self._guards.get(cast(asyncio.Transport, request.transport))
        if guard is not None:
            guard.handling += 1
        try:
            response = await handler(request)
        except web.HTTPException as refused:
            refused.force_close()
            raise
        finally:
            if guard is not None:
                guard.handling -= 1
        response.force_close()
        return response

    async def _metrics(self, _request: web.Request) -> web.Response:
        text = await _resolved(self._metrics_text())
        body = self._redactor.text(text).encode()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})

    async def _healthz(self, _request: web.Request) -> web.Response:
        ready, detail = await _resolved(self._health())
        body = json.dumps(self._redactor.value(detail), indent=2) + "\n"
        return web.Response(text=body, status=200 if ready else 503, content_type="application/json")

    def _admit(self, guard: _Guard) -> bool:
        """Count a new connection; True when it is past a bound and may only be a probe (module
        docstring). A full reserve makes room by ending its oldest connection still sending its head,
        or, when there is none, refuses this one."""
        assert guard._transport is not None
        from_there = self._per_address.get(guard.address, 0)
        self._guards[guard._transport] = guard
        self._per_address[guard.address] = from_there + 1
        if self._general < MAX_CONNECTIONS and from_there < PER_ADDRESS:
            self._general += 1
            return False
        if len(self._reserve) >= PROBE_RESERVE:
            stalled = next((other for other in self._reserve if other.waiting_for_head), None)
            if stalled is None:
                guard._refuse(503, "Service Unavailable")
                return True
            stalled.ended_for_a_probe()  # leaves the reserve (its _refuse)
        self._reserve[guard] = None
        return True

    def _left_the_reserve(self, guard: _Guard) -> None:
        self._reserve.pop(guard, None)

    def _forget(self, guard: _Guard, transport: asyncio.Transport) -> None:
        if self._guards.pop(transport, None) is None:
            return
        if guard.probe_only:
            self._reserve.pop(guard, None)
        else:
            self._general -= 1
        address = guard.address
        left = self._per_address.get(address, 0) - 1
        if left > 0:
            self._per_address[address] = left
        else:
            self._per_address.pop(address, None)


def _is_probe(method: bytes, target: bytes) -> bool:
    return method == b"GET" and target.split(b"?", 1)[0].decode("latin-1") in PROBE_PATHS


class _Guard(asyncio.Protocol):
    """One connection: holds its request head until it is whole and well-formed (module docstring),
    then hands the connection to aiohttp's handler; or answers a refusal itself and closes."""

    def __init__(self, owner: StatusServer, handlers: web.Server) -> None:
        self._owner = owner
        self._handlers = handlers
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._head = bytearray()
        self.refused = False
        self._lingered = 0
        self._deadline: asyncio.TimerHandle | None = None
        self.handling = 0  # requests of this connection inside a handler now (the middleware counts)
        self.address = ""  # the peer's address: PER_ADDRESS counts by it
        self.probe_only = False  # past a bound: served only if it asks for /healthz or /metrics

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = self._transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self._deadline = asyncio.get_running_loop().call_later(REQUEST_TIMEOUT, self._expire)
        self.probe_only = self._owner._admit(self)

    def ended_for_a_probe(self) -> None:
        """The reserve is full and a newer connection needs this one's place: it has not sent its
        whole head in all that time, so it is the one a flood holds."""
        self._refuse(503, "Service Unavailable")
        assert self._transport is not None
        self._transport.close()

    @property
    def waiting_for_head(self) -> bool:
        return self._inner is None and not self.refused

    def _expire(self) -> None:
        assert self._transport is not None
        if self.handling:  # a handler bounds its own work; look again later
            self._deadline = asyncio.get_running_loop().call_later(REQUEST_TIMEOUT, self._expire)
            return
        self._transport.close()

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)
        elif self.refused:
            self._linger(len(data))
        else:
            self._head += data
            end = self._head.find(_END_OF_HEAD)
            if end < 0:
                if len(self._head) > MAX_HEAD:
                    self._refuse(431, "Request Header Fields Too Large")
                return
            if end + len(_END_OF_HEAD) > MAX_HEAD:
                self._refuse(431, "Request Header Fields Too Large")
            else:
                line = _REQUEST_LINE.fullmatch(bytes(self._head.split(b"\r\n", 1)[0]))
                if line is None:
                    self._refuse(400, "Bad Request")
                elif self.probe_only and not _is_probe(line.group(1), line.group(2)):
                    self._refuse(503, "Service Unavailable")
                else:
                    self._start_inner()

    def _start_inner(self) -> None:
        assert self._transport is not None
        self._inner = self._handlers()
        self._inner.connection_made(self._transport)
        head, self._head = bytes(self._head), bytearray()
        self._inner.data_received(head)

    def eof_received(self) -> bool:
        if self._inner is not None:
            self._inner.eof_received()
            return True  # the request is whole: keep the socket open for its answer
        if not self.refused:
            self._refuse(400, "Bad Request")  # the client ended the request half-way (or sent nothing)
        return False  # asyncio closes the socket once the answer is written

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        if self._transport is not None:
            self._owner._forget(self, self._transport)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def _refuse(self, status: int, reason: str) -> None:
        assert self._transport is not None
        self.refused = True
        self._owner._left_the_reserve(self)  # a refused connection holds no probe's place
        self._head = bytearray()
        body = f"{status} {reason}\n".encode()
        self._transport.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        if self._transport.can_write_eof():
            self._transport.write_eof()  # the client's read of the answer ends here

    def _linger(self, received: int) -> None:
        # Closing with unread input resets the connection, and the client may lose the answer:
        # read (and drop) a bounded amount first, then close.
        assert self._transport is not None
        self._lingered += received
        if self._lingered >= _LINGER_BYTES:
            self._transport.close()


async def _resolved(value: _T | Awaitable[_T]) -> _T:
    if inspect.isawaitable(value):
        return await value
    return value
