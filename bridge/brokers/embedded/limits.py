"""What the embedded broker holds per client, bounded (docs/brokers.md#limits).

One frozen value built from the `broker.*` settings (settings.py holds their ranges
and documentation); the broker core reads it, never the config. Every refusal a limit causes is
counted under one of the `REFUSALS` names, exported at /metrics as
`hookbridge_broker_refused_total{reason="..."}`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any, Protocol

from bridge.brokers.embedded.codec import Bounds

# Why the broker refused or closed something, as /metrics labels them.
REFUSALS = (
    "packet_too_large",  # a packet over max_packet_size (counted, connection closed)
    "max_connections",  # a connection over max_connections (closed before CONNECT is read)
    "connect_timeout",  # no CONNECT within connect_timeout
    "keepalive_timeout",  # no complete packet within 1.5x the keepalive
    "malformed",  # a packet that breaks the protocol (malformed or protocol error)
    "user_properties",  # a packet with more than max_user_properties (closed, 5.0: 0x95)
    "clientid_too_long",  # a client id over max_clientid_len (CONNACK 2 / 0x85)
    "topic_levels",  # a topic or filter with more than max_topic_levels levels
    "max_subscriptions",  # a SUBSCRIBE filter over max_subscriptions (SUBACK 0x80 / 0x97)
    "subscribe_entries",  # a SUBSCRIBE / UNSUBSCRIBE with more than max_subscribe_entries filters (closed)
    "subscribe_filters",  # a distinct filter of one SUBSCRIBE past max_subscribe_filters (SUBACK 0x80 / 0x97)
    "receive_maximum",  # a 5.0 client over the broker's receive maximum (DISCONNECT 0x93)
    "offline_messages",  # a queued message dropped: the session held max_offline_messages
    "offline_bytes",  # a queued message dropped: the session held max_offline_bytes
    "queued_bytes",  # a queued message dropped: all sessions together held max_queued_bytes
    "durable_unreadable",  # a CONNECT to a durable session the damaged store cannot read (0x88 / 3)
    # who may connect, publish and subscribe (access.py, docs/security.md)
    "login_bad_credentials",
    "login_not_authorized",
    "login_backend_down",
    "login_busy",
    "acl_publish_denied",
    "acl_subscribe_denied",
)


class Settings(Protocol):
    """What `from_config` reads: `bridge.conf.config.Config`, or any mapping of setting names."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Limits:
    max_packet_size: int = 1 << 20
    """Bytes of one packet, header included, in both directions (5.0 tells clients in CONNACK)."""
    max_connections: int = 0
    """Clients connected at once; 0: no limit of its own. The setting's 0 (its default) is
    resolved when the broker is made: as many as the open-file hard limit holds
    (openfiles.connections_for)."""
    connect_timeout: float = 10.0
    """Seconds a new connection has to complete its CONNECT."""
    max_inflight: int = 32
    """Outgoing QoS 1/2 messages unacknowledged per session (fewer when a 5.0 client announces
    a lower Receive Maximum). The Receive Maximum the broker announces for a client's own
    publishes is channel.RECEIVE_MAXIMUM."""
    max_offline_messages: int = 100_000
    """Messages queued per session; 0: no count limit (max_offline_bytes still bounds it)."""
    max_offline_bytes: int = 64 << 20
    """Bytes queued per session: topic + payload + about 200 bytes of bookkeeping per message
    (sessions.MESSAGE_OVERHEAD); the newest message is always kept."""
    max_queued_bytes: int = 4 << 30
    """Bytes queued in all sessions together, counted as max_offline_bytes counts them; past it
    the oldest messages of the largest queues are dropped (queuedbytes.QueuedBytes), down to empty
    queues if need be. In-flight messages are not counted (at most max_inflight per session)."""
    max_subscriptions: int = 1000
    """Topic filters per session; 0: no limit."""
    max_subscribe_filters: int = 1000
    """Distinct topic filters handled in one SUBSCRIBE (a filter repeated in the packet counts
    once); the ones past it are refused (SUBACK 0x80 / 0x97); 0: no limit."""
    max_subscribe_entries: int = 10_000
    """Topic filters in one SUBSCRIBE or UNSUBSCRIBE, repeats included; refused while decoding at
    the one past it (codec/bounds.py); 0: no limit but max_packet_size."""
    max_topic_levels: int = 64
    """Levels of a topic name or filter ("a/b/c" has 3)."""
    max_clientid_len: int = 256
    """Bytes of a client id (UTF-8)."""
    max_user_properties: int = 1024
    """MQTT 5 user properties in one packet (a will's counted apart); 0: no count limit."""
    max_output_bytes: int = 4 << 20
    """Bytes written to a connection and not yet taken by the client before delivery to it
    pauses (its messages wait in the session queue, bounded by the offline limits)."""
    persistent_session_expiry: float = 0.0
    """Seconds a 3.1.1 session with clean session 0 outlives its connection; 0: for ever (3.1.1
    has no expiry of its own; Mosquitto's persistent_client_expiration). 5.0 clients say theirs."""
    server_keep_alive: int = 0
    """Seconds; 0: the client's own keepalive is used. Above 0, 5.0 clients asking for more
    (or for none) get this value in CONNACK (Server Keep Alive) and it is enforced."""

    @classmethod
    def from_config(cls, config: Settings) -> Limits:
        """The limits the `broker.<field>` settings give: every field has a setting of its name.

        Typed by what it reads, so the broker does not import the config package (the app
        imports both)."""
        return cls(**{field.name: config[f"broker.{field.name}"] for field in fields(cls)})


@functools.lru_cache(maxsize=4)
def decoder_bounds(limits: Limits) -> Bounds:
    """What a connection's decoder checks while it reads a packet (codec/bounds.py), from the
    broker's limits: one (frozen) object for every connection under the same limits, not 56 bytes each."""
    return Bounds(
        user_properties=limits.max_user_properties,
        topic_levels=limits.max_topic_levels,
        entries=limits.max_subscribe_entries,
    )
