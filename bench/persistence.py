"""What the persistence benchmarks share: arguments, rounds of the methods, the printed report.

Each database's script (pgsql_bench, mongo_bench, ...) supplies its three methods (the runner,
the driver's fastest bulk path, the naive way), how to empty the database before each one,
and how to count what got stored; this module runs them in rounds, so that a busy moment of
the machine hits them alike, and prints medians with the machine they ran on.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.feed import feed
from bench.machine import describe, table
from bridge.app import Bridge, Paths
from bridge.events import MessagePublish


def parse_args(db: str, port: int, naive_messages: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--naive-messages", type=int, default=naive_messages)
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--runs", type=int, default=5, help="rounds of the three methods; the median is shown")
    pool = parser.add_argument_group("runner pool settings (default: the bridge's defaults)")
    pool.add_argument("--batch-size", help=f"backend.{db}.pool1.batch_size")
    pool.add_argument("--batch-time", help=f"backend.{db}.pool1.batch_time, e.g. 5ms")
    pool.add_argument("--max-inflight", help=f"backend.{db}.pool1.max_inflight")
    pool.add_argument("--pool-size", help=f"backend.{db}.pool1.pool_size")
    return parser.parse_args()


def pool_settings(args: argparse.Namespace) -> dict[str, str]:
    """The pool settings given on the command line, as config values."""
    given = (
        ("batch_size", args.batch_size),
        ("batch_time", args.batch_time),
        ("max_inflight", args.max_inflight),
        ("pool_size", args.pool_size),
    )
    return {key: str(value) for key, value in given if value is not None}


def load_bridge(workdir: Path, config: str, rules: str) -> Bridge:
    """A bridge from config and rules text (its metrics listener off, its MQTT port any free one)."""
    (workdir / "rules").mkdir(exist_ok=True)
    (workdir / "rules" / "bench.conf").write_text(rules)
    (workdir / "bridge.conf").write_text(config + "metrics.listener = off\nbroker.listener.tcp = 127.0.0.1:0\n")
    return Bridge.load(Paths(workdir / "bridge.conf", workdir / "rules"))


async def through_runner(config: str, rules: str, events: Sequence[MessagePublish]) -> float:
    """Messages per second from the first event fed to the last write committed."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        bridge = load_bridge(Path(tmp), config, rules)
        await bridge.start()
        try:
            started = time.perf_counter()
            await feed(bridge, events)
            await bridge.idle()
            elapsed = time.perf_counter() - started
        finally:
            await bridge.stop()
    return len(events) / elapsed


def pool_config(db: str, settings: dict[str, str], **base: str) -> str:
    """`backend.<db>.pool1.*` lines: the base settings, then the ones from the command line."""
    return "".join(f"backend.{db}.pool1.{key} = {value}\n" for key, value in {**base, **settings}.items())


@dataclass
class Method:
    name: str
    count: int  # messages it writes
    run: Callable[[int], Awaitable[float]]  # writes the first `count` events, returns msg/s
    rates: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)  # this process's CPU per message
    stored: tuple[int, int] = (0, 0)  # messages and topics found stored after the last run

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


async def measure(
    methods: Sequence[Method],
    runs: int,
    fresh: Callable[[], Awaitable[None]],
    stored: Callable[[], Awaitable[tuple[int, int]]],
) -> list[str]:
    """Rounds of every method from an emptied database; returns what was stored wrong."""
    wrong = []
    for _ in range(runs):
        for method in methods:
            await fresh()
            cpu = time.process_time()
            method.rates.append(await method.run(method.count))
            method.cpu_us.append((time.process_time() - cpu) / method.count * 1e6)
            method.stored = await stored()
            if method.stored[0] != method.count:
                wrong.append(f"{method.name}: {method.stored[0]} messages stored, expected {method.count}")
    return wrong


def report(methods: Sequence[Method], about: Sequence[str], unit: str, ceiling: str, naive_target: int = 10) -> None:
    """Print the machine, `about` lines, the table and the runner's share of the ceiling."""
    rows = [
        (
            m.name,
            f"{m.count}",
            f"{m.median:,.0f}",
            ", ".join(f"{rate:,.0f}" for rate in m.rates),
            f"{statistics.median(m.cpu_us):.1f}",
            f"{m.stored[0]}",
            f"{m.stored[1]}",
        )
        for m in methods
    ]
    print(f"machine: {describe()}")
    for line in about:
        print(line)
    print()
    header = (
        "method",
        "messages",
        "median msg/s",
        "runs",
        "client CPU µs/msg",
        f"mqtt_msg {unit}",
        f"mqtt_topic {unit}",
    )
    print(table(rows, header))
    runner, best, naive = (m.median for m in methods)
    share, factor = runner / best, runner / naive
    print(
        f"\nrunner = {share:.0%} of the {ceiling} ceiling (target >= 50%: {'met' if share >= 0.5 else 'NOT met'}), "
        f"{factor:.1f}x the naive way (target >= {naive_target}x: {'met' if factor >= naive_target else 'NOT met'})"
    )
