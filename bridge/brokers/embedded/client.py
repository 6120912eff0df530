"""What passes between the broker (broker.py, flows.py), the API and one client: `Client`, what
they see of it (a channel.Channel); the messages it publishes (`Inbound`); where it connects
from (`Peer`) and its numbers (`ClientDetails`).

Declared here so the broker depends on this and not on a channel's or a connection's insides:
every attribute is read-only (a property), so mypy refuses a `conn.<attr> = ...` outside
connection.py and channel.py; the broker changes a client only through the methods below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from bridge.brokers.embedded.codec import Connack, Connect, Will
    from bridge.brokers.embedded.ended import Ended
    from bridge.brokers.embedded.sessions import SessionState
    from bridge.brokers.embedded.stream import Kept


@dataclass(frozen=True, slots=True)
class Peer:
    """Where a client connects from: what a login (access.Login) and the logs are told."""

    address: str  # host:port, [v6]:port
    listener: str  # which listener accepted it: tcp, ssl, ws, wss
    cert_cn: str | None = None  # TLS with peer_cert_as_username: its certificate's common name


@dataclass(frozen=True, slots=True)
class ClientDetails:
    """A connected client's numbers, as the API's client details show them."""

    connected_at: float  # wall-clock time of its CONNACK
    keepalive: int  # seconds, as agreed at CONNECT
    messages_in: int  # PUBLISH packets from it
    messages_out: int  # PUBLISH packets to it
    bytes_in: int  # its MQTT bytes
    bytes_out: int


class Inbound:
    """An application message the client published, with the acknowledgement it is owed.

    A plain slotted class, not a dataclass: built for every PUBLISH (by the compiled codec),
    and a dataclass's generated `__init__` costs twice as much
    (docs/benchmarks.md#per-message-objects-built-natively)."""

    __slots__ = ("ack", "expires", "packet_id", "payload", "properties", "qos", "refused", "retain", "topic")

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Any,
        expires: float,
        ack: bytes | None = None,
        packet_id: int = 0,
        refused: bool = False,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties
        self.expires = expires
        self.ack = ack  # PUBACK (QoS 1) or PUBREC (QoS 2), sent once the message is kept
        self.packet_id = packet_id
        self.refused = refused  # denied by the ACL (or $SYS): acknowledged, never published

    def __repr__(self) -> str:
        return f"Inbound({self.topic!r}, qos={self.qos}, retain={self.retain}, packet_id={self.packet_id})"


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
