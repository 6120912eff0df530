"""Where the embedded broker listens: MQTT over TCP, TLS, WebSocket and WebSocket over TLS.

`broker.listener.tcp` is always open; `broker.listener.ssl`, `.ws` and `.wss` are opened when
set (docs/security.md). Every listener serves the same core `Connection`, told which listener accepted
it (`Login.listener`): TLS is asyncio's, WebSocket the `websocket` module's framing.

Who may connect without a user name is decided here too, because it depends on where the
broker listens: `broker.allow_anonymous` defaults to on only when every listener binds a
loopback address, and a listener that faces a network with nothing to authenticate its
clients (no password file, no users in a database, no client certificate as user name) stops
the start, as `hookbridge check` reports, unless anonymous access was asked for. The TLS files
are loaded by `check` exactly as `run` loads them (`server_context`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.brokers.embedded import tcp
from bridge.brokers.embedded.connection import Connection, Core
from bridge.brokers.embedded.websocket import WebSocketProtocol
from bridge.conf.hosts import is_loopback
from bridge.conf.tls import load_problem, reason

NAMES = ("tcp", "ssl", "ws", "wss")
_TLS = ("ssl", "wss")
# The settings that authenticate a client by name and password (the auth package's keys).
_AUTH_KEYS = ("broker.auth.password_file", "broker.auth.backend")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # tcp, ssl, ws or wss
    host: str
    port: int
    certfile: str = ""
    keyfile: str = ""
    cafile: str = ""
    verify_peer: bool = False
    peer_cert_as_username: bool = False  # the client certificate's CN is the user name
    transport: str = "broker"  # tcp: the broker's own transport (tcp.py) or the event loop's ("loop")

    @property
    def tls(self) -> bool:
        return self.name in _TLS

    @property
    def websocket(self) -> bool:
        return self.name in ("ws", "wss")

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def configured(settings: Mapping[str, Any]) -> list[Listener]:
    """Every listener the settings open, `tcp` first."""
    found = []
    for name in NAMES:
        key = f"broker.listener.{name}"
        if settings.get(key) is None:
            continue
        host, port = settings[key]
        if name in _TLS:
            found.append(
                Listener(
                    name,
                    host,
                    port,
                    certfile=settings[f"{key}.certfile"],
                    keyfile=settings[f"{key}.keyfile"],
                    cafile=settings[f"{key}.cafile"],
                    verify_peer=settings[f"{key}.verify_peer"],
                    peer_cert_as_username=settings[f"{key}.peer_cert_as_username"] == "cn",
                )
            )
        else:
            found.append(Listener(name, host, port))
    return found


def anonymous_default(settings: Mapping[str, Any]) -> bool:
    """`broker.allow_anonymous` when not set: on only if every listener is on loopback."""
    return all(is_loopback(listener.host) for listener in configured(settings))


def server_context(listener: Listener) -> ssl.SSLContext:
    """The TLS settings of a listener (OSError / ssl.SSLError / ValueError on a bad file)."""
    context = _verifying_context(listener)
    context.load_cert_chain(listener.certfile, listener.keyfile or None, password=_no_passphrase)
    context.verify_mode = ssl.CERT_REQUIRED if listener.verify_peer else ssl.CERT_NONE
    return context


def _verifying_context(listener: Listener) -> ssl.SSLContext:
    """A server context trusting `cafile` (or the system's CAs) for client certificates."""
    return ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=listener.cafile or None)


def _no_passphrase() -> str:
    raise ValueError("the key is protected by a passphrase; give an unencrypted key")


def listener_problems(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for every listener `run` could not open, or should not open as set."""
    if settings["broker.mode"] != "embedded":
        return []
    problems: list[tuple[str, str]] = []
    listeners = configured(settings)
    for listener in listeners:
        if listener.tls:
            problems.extend(_tls_problems(listener))
    if problems:
        return problems
    asked = settings.get("broker.allow_anonymous")  # None: not set
    allow = anonymous_default(settings) if asked is None else asked
    passwords = any(settings.get(key) for key in _AUTH_KEYS)
    if asked is False and not passwords and not any(listener.peer_cert_as_username for listener in listeners):
        return [
            (
                "broker.allow_anonymous",
                "broker.allow_anonymous = off and nothing authenticates clients, so every CONNECT "
                "would be refused: set broker.auth.password_file or broker.auth.backend (docs/security.md)",
            )
        ]
    for listener in listeners:
        if allow or passwords or listener.peer_cert_as_username or is_loopback(listener.host):
            continue
        problems.append(
            (
                f"broker.listener.{listener.name}",
                f"broker.listener.{listener.name} = {listener.address} can be reached from the network "
                "and nothing authenticates its clients: set broker.auth.password_file or "
                "broker.auth.backend"
                + (f", or broker.listener.{listener.name}.peer_cert_as_username = cn" if listener.tls else "")
                + ", or broker.allow_anonymous = on to let anyone in (docs/security.md)",
            )
        )
    return problems


def _tls_problems(listener: Listener) -> list[tuple[str, str]]:
    key = f"broker.listener.{listener.name}"
    if not listener.certfile:
        return [(key, f"{key} needs {key}.certfile (and {key}.keyfile): the server's certificate")]
    problems = []
    if listener.peer_cert_as_username and not listener.verify_peer:
        problems.append(
            (
                f"{key}.peer_cert_as_username",
                f"{key}.peer_cert_as_username = cn needs {key}.verify_peer = on "
                "(a certificate nobody verified proves no name)",
            )
        )
    try:
        _verifying_context(listener)
    except (OSError, ssl.SSLError) as exc:
        return [*problems, (f"{key}.cafile", f"{key}.cafile: cannot load {listener.cafile}: {reason(exc)}")]
    try:
        server_context(listener)
    except (OSError, ssl.SSLError, ValueError) as exc:
        where, message = load_problem(exc, f"{key}.", listener.certfile, listener.keyfile)
        problems.append((where, f"{where}: {message}"))
    return problems


def peer_common_name(transport: Any) -> str | None:
    """The common name of the client certificate a TLS handshake verified, if any."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return None


class CertConnection(Connection):
    """A connection whose client certificate's CN is offered to the gate as the user name."""

    __slots__ = ()

    def certificate_name(self, transport: Any) -> str | None:
        return peer_common_name(transport)


def protocol_factory(listener: Listener, broker: Core) -> Callable[[], asyncio.Protocol]:
    kind = CertConnection if listener.peer_cert_as_username else Connection
    if not listener.websocket:
        return lambda: kind(broker, listener.name)
    max_size = broker.limits.max_packet_size
    return lambda: WebSocketProtocol(kind(broker, listener.name), max_size)


async def serve(listener: Listener, broker: Core) -> asyncio.Server | tcp.Server:
    """Bind and serve one listener (the TLS handshake bounded by the connect timeout). Plain
    MQTT over TCP gets the broker's own transport (tcp.py), the others the loop's."""
    if listener.name == "tcp" and listener.transport == "broker" and tcp.available():
        return await tcp.serve(protocol_factory(listener, broker), listener.host or None, listener.port, backlog=1024)
    loop = asyncio.get_running_loop()
    context = server_context(listener) if listener.tls else None
    return await loop.create_server(
        protocol_factory(listener, broker),
        listener.host or None,
        listener.port,
        ssl=context,
        ssl_handshake_timeout=broker.limits.connect_timeout if context is not None else None,
        backlog=1024,
    )
