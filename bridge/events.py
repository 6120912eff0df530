"""The event model: one frozen type per hookpoint, and the placeholder table.

Every broker source (embedded, EMQX, generic MQTT) turns what it sees into these
events; the rule engine, the renderer, the backends and the docs all read the
same table of which placeholders each hookpoint offers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar, dataclass_transform

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def event_class(cls: type[_T]) -> type[_T]:
    """A frozen, slotted dataclass to the type checker, which holds every assignment to an event.

    At run time a frozen dataclass pays a generic object.__setattr__ call per field in __init__:
    a message.publish event was 3x dearer to build that way than with plain slot stores (timeit,
    docs/benchmarks.md#results), on the path every message takes. So the class is built unfrozen, hashable as a
    frozen one is."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


# The MQTT protocol level of the client an event is about: 3 (MQTT 3.1), 4 (3.1.1) or 5 (5.0).
# Sources that cannot tell (a message seen through a subscription) leave 3.1.1's.
DEFAULT_PROTO_VER = 4

# MQTT 5.0 user properties, in the order the publisher sent them; a name may repeat.
UserProperties = tuple[tuple[str, str], ...]


class Hookpoint(StrEnum):
    CLIENT_CONNECTED = "client.connected"
    CLIENT_DISCONNECTED = "client.disconnected"
    SESSION_SUBSCRIBED = "session.subscribed"
    SESSION_UNSUBSCRIBED = "session.unsubscribed"
    MESSAGE_PUBLISH = "message.publish"
    MESSAGE_DELIVERED = "message.delivered"
    MESSAGE_ACKED = "message.acked"


@event_class
class ClientConnected:
    clientid: str
    username: str | None
    node: str
    peername: str
    timestamp: float  # Unix seconds, when the broker saw it
    clean_session: bool = True
    proto_ver: int = DEFAULT_PROTO_VER
    hookpoint = Hookpoint.CLIENT_CONNECTED


@event_class
class ClientDisconnected:
    clientid: str
    username: str | None
    node: str
    peername: str
    reason: str
    timestamp: float
    proto_ver: int = DEFAULT_PROTO_VER
    hookpoint = Hookpoint.CLIENT_DISCONNECTED


@event_class
class SessionSubscribed:
    clientid: str
    username: str | None
    node: str
    topic: str  # the subscription's topic filter
    qos: int
    timestamp: float
    # False when a resumed session already had this subscription: fetch and
    # retain lookup run only for new ones.
    is_new: bool = True
    # Offline delivery needs a persistent session (clean session false).
    persistent: bool = False
    # Messages with an id >= this one were routed to the subscription live by
    # the broker, so a fetch must stop before it (no message reaches it twice).
    live_from_msgid: str | None = None
    # Topics whose retained message the broker itself already sent for this
    # subscription; retain lookup skips them.
    retained_sent: frozenset[str] = frozenset()
    # False when the subscriber asked for no retained messages now (5.0 retain handling 2, or 1
    # for a subscription it already had); retain lookup then sends none either.
    send_retained: bool = True
    proto_ver: int = DEFAULT_PROTO_VER
    hookpoint = Hookpoint.SESSION_SUBSCRIBED


@event_class
class SessionUnsubscribed:
    clientid: str
    username: str | None
    node: str
    topic: str
    timestamp: float
    proto_ver: int = DEFAULT_PROTO_VER
    hookpoint = Hookpoint.SESSION_UNSUBSCRIBED


@event_class
class MessagePublish:
    msgid: str
    clientid: str  # the publisher
    username: str | None
    topic: str
    qos: int
    payload: bytes
    retain: bool
    node: str
    peername: str
    timestamp: float
    proto_ver: int = DEFAULT_PROTO_VER  # the publisher's
    user_properties: UserProperties = ()
    # MQTT 5.0 message expiry interval in seconds; None: the message does not expire. Every
    # backend stores it (`kept_for`) and fetch never delivers a message past it.
    expiry: int | None = None
    hookpoint = Hookpoint.MESSAGE_PUBLISH

    def kept_for(self, expired_time: int | None) -> int | None:
        """Seconds a stored copy stays deliverable: the rule's `expired_time`, shortened by the
        message's own expiry (MQTT 5); None when neither sets an end."""
        if self.expiry is None:
            return expired_time or None
        own = max(1, self.expiry)
        return min(expired_time, own) if expired_time else own


@event_class
class _Receipt:
    """What message.delivered and message.acked share: one message, seen by one receiver."""

    msgid: str
    clientid: str  # the receiver
    username: str | None
    from_clientid: str
    topic: str
    qos: int
    payload: bytes
    retain: bool
    node: str
    timestamp: float
    # The receiver's subscription filters this delivery was for (pubsub
    # offsets are kept per filter). External sources that cannot tell give ().
    filters: tuple[str, ...] = field(default=())
    proto_ver: int = DEFAULT_PROTO_VER  # the receiver's
    # The message's, as its publisher sent them (MQTT 5.0 forwards them unchanged).
    user_properties: UserProperties = ()


@event_class
class MessageDelivered(_Receipt):
    hookpoint = Hookpoint.MESSAGE_DELIVERED


@event_class
class MessageAcked(_Receipt):
    hookpoint = Hookpoint.MESSAGE_ACKED


Event = (
    ClientConnected
    | ClientDisconnected
    | SessionSubscribed
    | SessionUnsubscribed
    | MessagePublish
    | MessageDelivered
    | MessageAcked
)


def ordering_key(event: Event) -> str:
    """What an event's order is kept within: a publisher's topic for a message, a client
    for everything else. The runner's lanes and a backend's own concurrency (Cassandra) both use it."""
    if isinstance(event, MessagePublish):
        return f"{event.clientid}\x00{event.topic}"
    return event.clientid  # session, client, delivered and acked events: per client


EVENT_TYPES: dict[Hookpoint, type[Any]] = {
    Hookpoint.CLIENT_CONNECTED: ClientConnected,
    Hookpoint.CLIENT_DISCONNECTED: ClientDisconnected,
    Hookpoint.SESSION_SUBSCRIBED: SessionSubscribed,
    Hookpoint.SESSION_UNSUBSCRIBED: SessionUnsubscribed,
    Hookpoint.MESSAGE_PUBLISH: MessagePublish,
    Hookpoint.MESSAGE_DELIVERED: MessageDelivered,
    Hookpoint.MESSAGE_ACKED: MessageAcked,
}

_COMMON = ("clientid", "username", "node", "timestamp", "proto_ver")
_MESSAGE = (*_COMMON, "msgid", "topic", "qos", "payload", "retain")
_MESSAGE_HOOKS = (Hookpoint.MESSAGE_PUBLISH, Hookpoint.MESSAGE_DELIVERED, Hookpoint.MESSAGE_ACKED)

# The placeholder table: which `${name}` each hookpoint offers.
PLACEHOLDERS: dict[Hookpoint, tuple[str, ...]] = {
    Hookpoint.CLIENT_CONNECTED: (*_COMMON, "peername"),
    Hookpoint.CLIENT_DISCONNECTED: (*_COMMON, "peername", "reason"),
    Hookpoint.SESSION_SUBSCRIBED: (*_COMMON, "topic", "qos"),
    Hookpoint.SESSION_UNSUBSCRIBED: (*_COMMON, "topic"),
    Hookpoint.MESSAGE_PUBLISH: (*_MESSAGE, "peername"),
    Hookpoint.MESSAGE_DELIVERED: (*_MESSAGE, "from_clientid"),
    Hookpoint.MESSAGE_ACKED: (*_MESSAGE, "from_clientid"),
}

# Placeholders written `${<family>.<key>}`, and how the docs and errors spell the key.
# `${payload.a.b}`: field b of object a of a JSON payload. `${user_property.<name>}`: the value
# of the message's first MQTT 5.0 user property with that name (dots belong to the name).
KEYED: dict[str, str] = {"payload": "<field>", "user_property": "<name>"}
KEYED_PLACEHOLDERS: dict[Hookpoint, tuple[str, ...]] = {
    hookpoint: tuple(KEYED) if hookpoint in _MESSAGE_HOOKS else () for hookpoint in Hookpoint
}


def offered_placeholders(hookpoint: Hookpoint) -> list[str]:
    """Every placeholder a hookpoint offers, as written in a rule (for errors and docs)."""
    plain = [f"${{{name}}}" for name in PLACEHOLDERS[hookpoint]]
    return plain + [f"${{{family}.{KEYED[family]}}}" for family in KEYED_PLACEHOLDERS[hookpoint]]


def placeholder_allowed(hookpoint: Hookpoint, name: str) -> bool:
    """True when `${name}` (or `${payload.x.y}`, `${user_property.x}`) can be used on this hookpoint."""
    family, dot, key = name.partition(".")
    if dot:
        return family in KEYED_PLACEHOLDERS[hookpoint] and all(key.split("."))
    return name in PLACEHOLDERS[hookpoint]


def first_user_property(event: Event, name: str) -> str | None:
    """The value of the event's first user property called `name`; None when it has none."""
    properties: UserProperties = getattr(event, "user_properties", ())
    for key, value in properties:
        if key == name:
            return value
    return None


def parse_json_payload(payload: bytes) -> Any:
    """The payload as JSON, or None when it is not JSON (never raises): whatever the parser
    raises, a bad payload only makes its own placeholders null. RecursionError (deep nesting
    such as 5 KB of `[`) is not a ValueError, and it once failed the batch of other messages."""
    try:
        return json.loads(payload)
    except Exception:  # see above: any failure of the parser means "not JSON"
        return None


def placeholder_value(event: Event, name: str, payload_json: Any = None) -> Any:
    """The value of `${name}` for this event.

    Returns str / int / bytes / None; `${payload.a.b}` is looked up in the JSON
    payload (pass it in when already parsed) and is None when missing, as is a
    `${user_property.x}` the message does not carry.
    """
    if name == "timestamp":
        return int(event.timestamp * 1000)
    if name == "retain":
        return "true" if getattr(event, "retain", False) else "false"
    if name == "username":
        return getattr(event, "username", None) or ""
    if name.startswith("payload."):
        doc = payload_json if payload_json is not None else parse_json_payload(getattr(event, "payload", b""))
        for part in name.split(".")[1:]:
            if isinstance(doc, dict) and part in doc:
                doc = doc[part]
            else:
                return None
        return doc
    if name.startswith("user_property."):
        return first_user_property(event, name[len("user_property.") :])
    return getattr(event, name)


def event_topic(event: Event) -> str | None:
    """The topic rules filter on: message topic, or the subscription filter."""
    return getattr(event, "topic", None)
