"""What the embedded broker counts, for `$SYS/broker/...` (systopics.py) and `/metrics`.

Two kinds of number, each with one meaning wherever it is shown:

- `Traffic`: counters the connections and the broker bump as things happen (packets, bytes,
  connections); only ever growing;
- `BrokerNumbers` (bridge/brokers/base.py), made by `count()`: the counters plus what is read
  from the broker's state when asked (clients, subscriptions, retained and stored messages).

The meanings are Mosquitto 2.0.11's (src/sys_tree.c and where it counts), so a panel built on
Mosquitto's `$SYS` reads the same from hookbridge; docs/operations.md lists them.

Apart from systopics.py so that the connections and the broker, which count, do not import
the task that publishes (it imports the broker).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.brokers.base import BrokerNumbers

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Mapping

    from bridge.brokers.embedded.router import Retained
    from bridge.brokers.embedded.sessions import SessionState
    from bridge.brokers.embedded.topictree import RetainedTree

SHARED_PREFIX = "$share/"
# The message drops a reason of `Broker.refused` stands for (the rest refuse packets, logins and
# connections): a message dropped from a session's queue, or a PUBLISH the ACL did not let in.
DROP_REASONS = ("offline_messages", "offline_bytes", "queued_bytes", "acl_publish_denied")
QUEUE_DROP_REASONS = DROP_REASONS[:3]  # what Mosquitto counts as publish/messages/dropped


@dataclass(slots=True)
class Traffic:
    """What the broker's connections counted since the start."""

    packets_received: int = 0  # MQTT packets of any type
    packets_sent: int = 0
    publish_received: int = 0  # PUBLISH packets (a resent one counts again)
    publish_sent: int = 0
    bytes_received: int = 0  # every byte read from / written to a client (MQTT framing included)
    bytes_sent: int = 0
    publish_bytes_received: int = 0  # PUBLISH payload bytes only
    publish_bytes_sent: int = 0
    sockets: int = 0  # network connections accepted (before any CONNECT)
    connections: int = 0  # CONNECTs accepted (CONNACK 0)
    clients_maximum: int = 0  # most sessions (connected or not) at once
    clients_expired: int = 0


def count(
    traffic: Traffic, states: Mapping[str, SessionState], retained: RetainedTree[Retained], refused: Counter[str]
) -> BrokerNumbers:
    """The broker's numbers now (its traffic, sessions, retained messages and refusals, passed in
    by the broker's owners: systopics.py, source.py): one walk over the sessions and their queues.

    Stored messages are counted as Mosquitto's message store holds them: each message once,
    however many sessions have it queued or in flight, and every retained message (the broker's
    own `$SYS` ones included) whether or not a session also has it queued."""
    connected = disconnected = subscriptions = shared = 0
    queued: dict[str, tuple[str, int]] = {}  # msgid -> (topic, payload bytes): queued or in flight
    for state in states.values():
        if state.connected:
            connected += 1
        else:
            disconnected += 1
        for name in state.subscriptions:
            if name.startswith(SHARED_PREFIX):
                shared += 1
            else:
                subscriptions += 1
        for messages in (state.outbox, state.inflight.values()):
            for message in messages:
                queued[message.msgid] = (message.topic, len(message.payload))
    stored, stored_bytes = len(retained), retained.payload_bytes
    for msgid, (topic, size) in queued.items():
        kept = retained.get(topic)
        if kept is None or kept.msgid != msgid:  # else already counted as retained: stored once
            stored += 1
            stored_bytes += size
    total = connected + disconnected
    traffic.clients_maximum = max(traffic.clients_maximum, total)
    return BrokerNumbers(
        clients_connected=connected,
        clients_disconnected=disconnected,
        clients_maximum=traffic.clients_maximum,
        clients_expired=traffic.clients_expired,
        subscriptions=subscriptions,
        shared_subscriptions=shared,
        retained=len(retained),
        stored_messages=stored,
        stored_bytes=stored_bytes,
        packets_received=traffic.packets_received,
        packets_sent=traffic.packets_sent,
        publish_received=traffic.publish_received,
        publish_sent=traffic.publish_sent,
        bytes_received=traffic.bytes_received,
        bytes_sent=traffic.bytes_sent,
        publish_bytes_received=traffic.publish_bytes_received,
        publish_bytes_sent=traffic.publish_bytes_sent,
        sockets=traffic.sockets,
        connections=traffic.connections,
        dropped={reason: refused.get(reason, 0) for reason in DROP_REASONS},
    )
