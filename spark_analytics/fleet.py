"""A synthetic fleet, written through the bridge's own writers (for the tests and the benchmark).

Devices connect to one of a few nodes, publish at mixed rates (every 5 s to every 5 min) on
`fleet/<region>/<device>/<metric>` with a QoS mix and retained status messages, and disconnect;
a share of them flap (short sessions, reconnecting every few minutes), and some sessions end
without a logged disconnect (a node that died). Subscriber apps get every QoS>0 message of their
region delivered and acked a few milliseconds later. Events come out in time order (one lazy
generator per device, merged), so memory stays flat however long the window.

    .venv/bin/python -m spark_analytics.fleet -c bridge.conf --pool pgsql.pool1 --devices 1000 --hours 2

The events go into a Bridge built from the config plus a rule set binding on_event_log to every
hookpoint, on_message_publish, on_message_fetch (offsets) and on_message_acked: the same code path
as events from a broker, without one (like bench/feed.py).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bridge.app import Bridge, Paths
from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    Event,
    MessageAcked,
    MessageDelivered,
    MessagePublish,
    SessionSubscribed,
)
from bridge.msgid import node_bits

REGIONS = ("north", "south", "east", "west")
METRICS = ("temp", "hum", "status")
PERIODS = ((5, 0.1), (30, 0.3), (60, 0.4), (300, 0.2))  # (seconds between publishes, share of devices)
QOS = ((0, 0.4), (1, 0.55), (2, 0.05))
REASONS = (("normal", 0.7), ("keepalive_timeout", 0.2), ("closed", 0.1))

# (hookpoint, function) bound by the fleet's rule set, in this order per hookpoint.
BINDINGS = (
    ("client.connected", "on_event_log"),
    ("client.disconnected", "on_event_log"),
    ("session.subscribed", "on_message_fetch"),
    ("message.publish", "on_event_log"),
    ("message.publish", "on_message_publish"),
    ("message.delivered", "on_event_log"),
    ("message.acked", "on_event_log"),
    ("message.acked", "on_message_acked"),
)


@dataclass(frozen=True)
class Fleet:
    devices: int = 100
    start: float = 0.0  # Unix seconds; 0: `hours` before now
    hours: float = 1.0
    flapping: float = 0.05  # share of devices that flap
    lost_disconnects: float = 0.02  # share of sessions whose disconnect is never logged
    apps: int = 2  # subscriber apps, one per region (cycling)
    nodes: int = 3
    seed: int = 7
    period_scale: float = 1.0  # multiplies every publish period (fewer messages per device)

    @property
    def begin(self) -> float:
        return self.start or time.time() - self.hours * 3600

    @property
    def end(self) -> float:
        return self.begin + self.hours * 3600


def _pick(rng: random.Random, weighted: tuple[tuple[object, float], ...]) -> object:
    return rng.choices([v for v, _ in weighted], [w for _, w in weighted])[0]


def _msgid(at: float, node: int, seq: int) -> str:
    return f"{(int(at * 1_000_000) << 64) | (node << 16) | (seq & 0xFFFF):032X}"


def device(fleet: Fleet, n: int) -> Iterator[tuple[float, int, Event]]:
    """One device's events in time order, as (timestamp, tiebreak, event)."""
    rng = random.Random(fleet.seed * 1_000_003 + n)
    clientid = f"dev-{n:06d}"
    region = REGIONS[n % len(REGIONS)]
    node = f"node{n % fleet.nodes + 1}@10.0.0.{n % fleet.nodes + 1}"
    peer = f"10.1.{n // 250 % 250}.{n % 250}:{40000 + n % 20000}"
    flaps = rng.random() < fleet.flapping
    period = float(_pick(rng, PERIODS)) * fleet.period_scale  # type: ignore[arg-type]
    ident = node_bits(clientid, 0)
    seq = 0
    at = fleet.begin + rng.uniform(0, 600 if not flaps else 60)
    while at < fleet.end:
        yield at, n, ClientConnected(clientid, None, node, peer, at)
        length = rng.uniform(60, 600) if flaps else rng.expovariate(1 / (fleet.hours * 3600 * 0.7))
        ends = at + length
        publish_at = at + rng.uniform(0.5, period)
        while publish_at < min(ends, fleet.end):
            metric = METRICS[seq % len(METRICS)]
            qos = int(_pick(rng, QOS))  # type: ignore[call-overload]
            payload = b"x" * rng.randint(20, 200)
            msgid = _msgid(publish_at, ident, seq)
            seq += 1
            topic = f"fleet/{region}/{clientid}/{metric}"
            yield (
                publish_at,
                n,
                MessagePublish(msgid, clientid, None, topic, qos, payload, metric == "status", node, peer, publish_at),
            )
            if qos > 0 and REGIONS.index(region) < fleet.apps:
                app = f"app-{region}"
                delivered = publish_at + rng.uniform(0.001, 0.02)
                acked = delivered + rng.uniform(0.001, 0.05)
                receipt = (msgid, app, None, clientid, topic, qos, payload, False, node)
                yield delivered, n, MessageDelivered(*receipt, delivered, (f"fleet/{region}/#",))
                yield acked, n, MessageAcked(*receipt, acked, (f"fleet/{region}/#",))
            publish_at += period * rng.uniform(0.8, 1.2)
        if ends >= fleet.end:
            return
        if rng.random() >= fleet.lost_disconnects:
            reason = str(_pick(rng, REASONS))
            yield ends, n, ClientDisconnected(clientid, None, node, peer, reason, ends)
        at = ends + (rng.uniform(5, 120) if flaps else rng.uniform(30, 1800))


def apps(fleet: Fleet) -> Iterator[tuple[float, int, Event]]:
    """The subscriber apps: connected for the whole window, one pubsub subscription each."""
    for k, region in enumerate(REGIONS[: fleet.apps]):
        at = fleet.begin
        clientid = f"app-{region}"
        yield at, -1 - k, ClientConnected(clientid, None, "node1@10.0.0.1", f"10.9.0.{k}:1883", at)
        yield at, -1 - k, SessionSubscribed(clientid, None, "node1@10.0.0.1", f"fleet/{region}/#", 1, at, True, True)


def events(fleet: Fleet) -> Iterator[Event]:
    """Every event of the fleet, merged in time order."""
    streams = [apps(fleet), *(device(fleet, n) for n in range(fleet.devices))]
    for _at, _n, event in heapq.merge(*streams, key=lambda item: (item[0], item[1])):
        yield event


async def fill(bridge: Bridge, fleet: Fleet, report_every: int = 0) -> int:
    """Feed the fleet's events to a running bridge and wait until all are written; returns the count."""
    count = 0
    started = time.monotonic()
    for event in events(fleet):
        await bridge.dispatcher(event)
        count += 1
        if count % 100 == 0:
            await asyncio.sleep(0)  # let the runners write while we generate (as bench/feed.py)
        if report_every and count % report_every == 0:
            rate = count / (time.monotonic() - started)
            print(f"  {count:,} events fed ({rate:,.0f}/s)", file=sys.stderr, flush=True)
    await bridge.idle()
    return count


def rules_text(pool_id: str, log_pool: str | None = None, ack_pool: str | None = None) -> str:
    """The rule lines binding BINDINGS on one pool; on_event_log on `log_pool`, on_message_acked on
    `ack_pool` if given (pools on the same database).

    Separate pools are much faster at volume (measured: 1.4k events/s on one PostgreSQL pool, 38k/s
    with the event log on its own pool and no acks): a runner merges consecutive jobs of one function
    into one statement, and a publish bound to both on_event_log and on_message_publish gives jobs
    that alternate in a batch, so neither merges; an ack is one UPDATE of its own.
    """
    db = pool_id.split(".", 1)[0]
    lines: list[str] = []
    seen: dict[str, int] = {}
    chosen = {"on_event_log": log_pool, "on_message_acked": ack_pool}
    for hookpoint, function in BINDINGS:
        target = (chosen.get(function) or pool_id).split(".", 1)[1]
        seen[hookpoint] = seen.get(hookpoint, 0) + 1
        topic = "" if hookpoint.startswith("client.") else '"topic": "#", '
        action = f'{{{topic}"action": {{"function": "{function}"}}, "pool": "{target}"}}'
        lines.append(f"backend.{db}.hook.{hookpoint}.{seen[hookpoint]} = {action}")
    return "\n".join(lines) + "\n"


async def fill_from_config(
    config: Path,
    pool_id: str,
    fleet: Fleet,
    report_every: int = 0,
    log_pool: str | None = None,
    ack_pool: str | None = None,
) -> int:
    with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        rules = Path(tmp) / "rules"
        rules.mkdir()
        (rules / "fleet.conf").write_text(rules_text(pool_id, log_pool, ack_pool))
        (Path(tmp) / "templates").mkdir()
        bridge = Bridge.load(Paths(config, rules))
        await bridge.start()
        try:
            return await fill(bridge, fleet, report_every)
        finally:
            await bridge.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_analytics.fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--config", required=True, help="bridge config with the pool (broker listener off)")
    parser.add_argument("--pool", required=True, help="<db>.<pool> to fill")
    parser.add_argument("--log-pool", help="<db>.<pool> for on_event_log (same database; faster at volume)")
    parser.add_argument("--ack-pool", help="<db>.<pool> for on_message_acked (same database; faster at volume)")
    parser.add_argument("--apps", type=int, default=2, help="subscriber apps (one region each, 0-4)")
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--flapping", type=float, default=0.05)
    parser.add_argument("--start", type=float, default=0.0, help="Unix seconds of the first event (default: hours ago)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--period-scale", type=float, default=1.0, help="multiply publish periods (fewer messages)")
    args = parser.parse_args(argv)
    fleet = Fleet(
        devices=args.devices, hours=args.hours, flapping=args.flapping, start=args.start, seed=args.seed, apps=args.apps
    )
    started = time.monotonic()
    count = asyncio.run(fill_from_config(Path(args.config), args.pool, fleet, 100_000, args.log_pool, args.ack_pool))
    elapsed = time.monotonic() - started
    print(f"{count:,} events written through {args.pool} in {elapsed:.1f}s ({count / elapsed:,.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
