"""What the embedded broker counts, for `$SYS/broker/...` (systopics.py) and `/metrics`.

Two kinds of number, each with one meaning wherever it is shown:

- `Traffic`: counters the connections and the broker bump as things happen (packets, bytes,
  connections); only ever growing;
- `BrokerNumbers` (bridge/brokers/base.py), made by census.py: the counters plus what is read
  from the broker's state (clients, subscriptions, retained and stored messages), in slices.

The meanings are Mosquitto 2.0.11's (src/sys_tree.c and where it counts), so a panel built on
Mosquitto's `$SYS` reads the same from hookbridge; docs/operations.md lists them.

Apart from systopics.py so that the connections and the broker, which count, do not import
the task that publishes (it imports the broker).
"""

from __future__ import annotations

from dataclasses import dataclass

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
