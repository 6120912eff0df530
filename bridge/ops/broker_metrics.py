"""The embedded broker's traffic and state at /metrics, in Prometheus' conventions.

The numbers are the ones `$SYS/broker/...` shows (bridge/brokers/embedded/traffic.py says what
each counts), read once per scrape: counters end in `_total`, sizes are in bytes, and a number
split by a label (sessions by state, subscriptions by kind, drops by reason) adds up to something
meaningful. docs/operations.md#broker-traffic-at-metrics lists them beside EMQX's names;
deploy/grafana/hookbridge.json is a dashboard built on them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bridge.brokers.base import BrokerNumbers, BrokerSource
from bridge.brokers.embedded.traffic import DROP_REASONS
from bridge.ops.metrics import Metrics

# name, kind, help, what it reads from BrokerNumbers: one number (unlabelled) or {label value: number}
_Read = Callable[[BrokerNumbers], float | Mapping[str, float]]
FAMILIES: tuple[tuple[str, str, str, str, _Read], ...] = (
    ("hookbridge_broker_connections", "gauge", "", "Clients connected now", lambda n: n.clients_connected),
    (
        "hookbridge_broker_sessions",
        "gauge",
        "state",
        "Sessions, connected or kept without a connection (persistent)",
        lambda n: {"connected": n.clients_connected, "disconnected": n.clients_disconnected},
    ),
    (
        "hookbridge_broker_subscriptions",
        "gauge",
        "kind",
        "Subscriptions of every session, plain or to a shared group ($share/...)",
        lambda n: {"plain": n.subscriptions, "shared": n.shared_subscriptions},
    ),
    (
        "hookbridge_broker_retained_messages",
        "gauge",
        "",
        "Retained messages, the broker's own $SYS ones included",
        lambda n: n.retained,
    ),
    (
        "hookbridge_broker_stored_messages",
        "gauge",
        "",
        "Messages the broker holds (retained, queued, in flight), each once",
        lambda n: n.stored_messages,
    ),
    (
        "hookbridge_broker_stored_bytes",
        "gauge",
        "",
        "Payload bytes of the messages the broker holds",
        lambda n: n.stored_bytes,
    ),
    (
        "hookbridge_broker_sockets_opened_total",
        "counter",
        "",
        "Network connections accepted (refused ones too)",
        lambda n: n.sockets,
    ),
    (
        "hookbridge_broker_connects_total",
        "counter",
        "",
        "CONNECTs accepted (CONNACK 0)",
        lambda n: n.connections,
    ),
    (
        "hookbridge_broker_sessions_expired_total",
        "counter",
        "",
        "Persistent sessions ended by their expiry",
        lambda n: n.clients_expired,
    ),
    (
        "hookbridge_broker_received_packets_total",
        "counter",
        "",
        "MQTT packets of any type received",
        lambda n: n.packets_received,
    ),
    ("hookbridge_broker_sent_packets_total", "counter", "", "MQTT packets of any type sent", lambda n: n.packets_sent),
    (
        "hookbridge_broker_received_messages_total",
        "counter",
        "",
        "PUBLISH packets received",
        lambda n: n.publish_received,
    ),
    (
        "hookbridge_broker_sent_messages_total",
        "counter",
        "",
        "PUBLISH packets sent (a message resent after a reconnect counts again)",
        lambda n: n.publish_sent,
    ),
    (
        "hookbridge_broker_received_bytes_total",
        "counter",
        "",
        "Bytes read from clients, MQTT framing included",
        lambda n: n.bytes_received,
    ),
    (
        "hookbridge_broker_sent_bytes_total",
        "counter",
        "",
        "Bytes written to clients, MQTT framing included",
        lambda n: n.bytes_sent,
    ),
    (
        "hookbridge_broker_received_payload_bytes_total",
        "counter",
        "",
        "Payload bytes of the PUBLISH packets received",
        lambda n: n.publish_bytes_received,
    ),
    (
        "hookbridge_broker_sent_payload_bytes_total",
        "counter",
        "",
        "Payload bytes of the PUBLISH packets sent",
        lambda n: n.publish_bytes_sent,
    ),
    (
        "hookbridge_broker_dropped_messages_total",
        "counter",
        "reason",
        "Messages dropped, by reason: a session's queue over max_offline_messages or max_offline_bytes,"
        " all queues over max_queued_bytes, or a PUBLISH the ACL refused",
        lambda n: {reason: n.dropped.get(reason, 0) for reason in DROP_REASONS},
    ),
)


class BrokerMetrics:
    """The families above for one broker source, from one snapshot of its numbers per scrape."""

    def __init__(self, source: BrokerSource) -> None:
        self.source = source
        self.numbers: BrokerNumbers | None = None

    async def take_fresh(self) -> None:
        """Before a scrape: the numbers walked from the state now (census.py), so that the sync
        `refresh` right after reads them rather than the walk before."""
        self.numbers = await self.source.fresh_numbers()

    def refresh(self) -> None:
        self.numbers = self.source.numbers()

    def reader(self, read: _Read) -> Callable[[], Mapping[str, float]]:
        def samples() -> Mapping[str, float]:
            if self.numbers is None:  # not started yet, or stopped: no sample
                return {}
            value = read(self.numbers)
            return value if isinstance(value, Mapping) else {"": value}

        return samples

    def register(self, metrics: Metrics) -> None:
        metrics.before_scrape_awaited(self.take_fresh)
        metrics.before_scrape(self.refresh)
        for name, kind, label, help_text, read in FAMILIES:
            if kind == "counter":
                metrics.counter(name, help_text, self.reader(read), label=label)
            else:
                metrics.gauge(name, help_text, self.reader(read), label=label)
