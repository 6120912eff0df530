"""`Client`: what the broker (broker.py, flows.py) and the API see of one connected client (a
channel.Channel, with the small values it hands out: channel.Peer, channel.ClientDetails).

Declared here so the broker depends on this and not on a channel's or a connection's insides:
every attribute is read-only (a property), so mypy refuses a `conn.<attr> = ...` outside
connection.py and channel.py; the broker changes a client only through the methods below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bridge.brokers.embedded.channel import ClientDetails, Inbound, Peer
    from bridge.brokers.embedded.codec import Connack, Connect, Will
    from bridge.brokers.embedded.ended import Ended
    from bridge.brokers.embedded.sessions import SessionState
    from bridge.brokers.embedded.stream import Kept


class Client(Protocol):
    """One client connection, as the broker uses it."""

    @property
    def peer(self) -> Peer: ...
    @property
    def state(self) -> SessionState | None: ...  # its session once CONNACKed
    @property
    def will(self) -> Will | None: ...
    @property
    def reason(self) -> str | None: ...  # why it ended; None while open
    @property
    def done(self) -> Ended: ...  # set once its teardown is over (a takeover waits on it)

    def check_deadline(self, now: float, connect_timeout: float) -> float | None: ...
    def fail_connect(self, code: int) -> None: ...
    def attach(self, state: SessionState, packet: Connect, connack: Connack, keepalive: float) -> float | None: ...
    def send(self, packet: object) -> None: ...
    def pump(self) -> None: ...
    async def accepted(self, item: Inbound, kept: Kept) -> None: ...
    def close(self, reason: str, code: int | None = None) -> None: ...
    def abandon(self) -> None: ...
    def details(self) -> ClientDetails: ...
