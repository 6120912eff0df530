"""What the embedded broker's connections count, for `$SYS/broker/...` (systopics.py).

Apart from systopics.py so that the connections and the broker, which count, do not import
the task that publishes (it imports the broker).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Traffic:
    """What the broker's connections counted since the start."""

    packets_received: int = 0
    packets_sent: int = 0
    publish_received: int = 0
    publish_sent: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    connections: int = 0  # CONNECTs accepted (CONNACK 0)
    clients_maximum: int = 0
    clients_expired: int = 0
