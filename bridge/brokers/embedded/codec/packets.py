"""The MQTT control packets of 3.1.1 and 5.0 as light objects (slotted dataclasses).

One class per packet type serves both versions: fields that exist only in 5.0 (reason codes,
properties) keep their defaults for 3.1.1 and are not encoded there. Packet identifiers are 0
where a packet has none (PUBLISH at QoS 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from bridge.brokers.embedded.codec.kinds import PacketType
from bridge.brokers.embedded.codec.properties import EMPTY, Properties

MQTT_3_1, MQTT_3_1_1, MQTT_5 = 3, 4, 5
"""Protocol levels as CONNECT carries them."""


@dataclass(slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = EMPTY


@dataclass(slots=True)
class Connect:
    TYPE: ClassVar[PacketType] = PacketType.CONNECT
    client_id: str
    protocol_level: int = MQTT_3_1_1
    clean_start: bool = True
    """Clean Session in 3.1.1."""
    keepalive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = EMPTY


@dataclass(slots=True)
class Connack:
    TYPE: ClassVar[PacketType] = PacketType.CONNACK
    session_present: bool = False
    reason_code: int = 0
    """A ReasonCode in 5.0, a ConnectReturnCode in 3.1.1."""
    properties: Properties = EMPTY


@dataclass(slots=True)
class Publish:
    TYPE: ClassVar[PacketType] = PacketType.PUBLISH
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int = 0
    properties: Properties = EMPTY


@dataclass(slots=True)
class _Acknowledgement:
    """The fields of the four QoS acknowledgements (PUBACK, PUBREC, PUBREL, PUBCOMP); each is a
    class of its own, so two with the same fields but of different types are not equal."""

    TYPE: ClassVar[PacketType]
    packet_id: int
    reason_code: int = 0
    properties: Properties = EMPTY


@dataclass(slots=True)
class Puback(_Acknowledgement):
    TYPE: ClassVar[PacketType] = PacketType.PUBACK


@dataclass(slots=True)
class Pubrec(_Acknowledgement):
    TYPE: ClassVar[PacketType] = PacketType.PUBREC


@dataclass(slots=True)
class Pubrel(_Acknowledgement):
    TYPE: ClassVar[PacketType] = PacketType.PUBREL


@dataclass(slots=True)
class Pubcomp(_Acknowledgement):
    TYPE: ClassVar[PacketType] = PacketType.PUBCOMP


@dataclass(slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE with its options (the options past QoS are 5.0 only)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    TYPE: ClassVar[PacketType] = PacketType.SUBSCRIBE
    packet_id: int
    subscriptions: list[Subscription]
    properties: Properties = EMPTY


@dataclass(slots=True)
class Suback:
    TYPE: ClassVar[PacketType] = PacketType.SUBACK
    packet_id: int
    reason_codes: list[int]
    """Granted QoS or a failure code per filter (3.1.1: 0, 1, 2 or 0x80)."""
    properties: Properties = EMPTY


@dataclass(slots=True)
class Unsubscribe:
    TYPE: ClassVar[PacketType] = PacketType.UNSUBSCRIBE
    packet_id: int
    topic_filters: list[str]
    properties: Properties = EMPTY


@dataclass(slots=True)
class Unsuback:
    TYPE: ClassVar[PacketType] = PacketType.UNSUBACK
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    """5.0 only: 3.1.1's UNSUBACK carries just the packet identifier."""
    properties: Properties = EMPTY


@dataclass(slots=True)
class Pingreq:
    TYPE: ClassVar[PacketType] = PacketType.PINGREQ


@dataclass(slots=True)
class Pingresp:
    TYPE: ClassVar[PacketType] = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    TYPE: ClassVar[PacketType] = PacketType.DISCONNECT
    reason_code: int = 0
    properties: Properties = EMPTY


@dataclass(slots=True)
class Auth:
    """MQTT 5.0 enhanced authentication."""

    TYPE: ClassVar[PacketType] = PacketType.AUTH
    reason_code: int = 0
    properties: Properties = EMPTY


Packet = (
    Connect
    | Connack
    | Publish
    | Puback
    | Pubrec
    | Pubrel
    | Pubcomp
    | Subscribe
    | Suback
    | Unsubscribe
    | Unsuback
    | Pingreq
    | Pingresp
    | Disconnect
    | Auth
)
Ack = Puback | Pubrec | Pubrel | Pubcomp
