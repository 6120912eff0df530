"""What the persistence benchmarks share: arguments, the server, rounds of the methods, the report.

Each database's script (pgsql_bench, mongo_bench, ...) supplies its bridge config and rule, its
two reference methods (the driver's fastest bulk path, the naive way), how to empty the database
before each one and how to count what got stored, and calls `compare`; `bench_main` is its
`__main__`. The runner's method, the rounds (so that a busy moment of the machine hits every
method alike), the latency run and the printed medians with the machine are this module's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from bench.feed import feed, make_events
from bench.machine import describe, table
from bench.services import start_server
from bridge.app import Bridge, Paths
from bridge.events import MessagePublish


def parse_args(db: str, port: int, naive_messages: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--naive-messages", type=int, default=naive_messages)
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--runs", type=int, default=5, help="rounds of the three methods; the median is shown")
    parser.add_argument("--json", help="also write the results to this file (the bench suite reads it)")
    pool = parser.add_argument_group("runner pool settings (default: the bridge's defaults)")
    pool.add_argument("--batch-size", help=f"backend.{db}.pool1.batch_size")
    pool.add_argument("--batch-time", help=f"backend.{db}.pool1.batch_time, e.g. 5ms")
    pool.add_argument("--max-inflight", help=f"backend.{db}.pool1.max_inflight")
    pool.add_argument("--pool-size", help=f"backend.{db}.pool1.pool_size")
    return parser.parse_args()


def bench_main(
    db: str, port: int, naive_messages: int, script: str, main: Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
) -> NoReturn:
    """A persistence benchmark's `__main__`: its arguments, its server (scripts/<script>), its exit code."""
    arguments = parse_args(db, port, naive_messages)
    start_server(script, arguments.port)
    sys.exit(asyncio.run(main(arguments)))


def events_for(args: argparse.Namespace, topics: int) -> list[MessagePublish]:
    """The generated publishes every method of one run writes (the first --messages of them)."""
    return make_events(max(args.messages, args.naive_messages), args.payload, topics)


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


def rss_bytes() -> int:
    """This process's resident memory now."""
    with open("/proc/self/status") as status:
        return int(re.search(r"VmRSS:\s+(\d+) kB", status.read()).group(1)) * 1024  # type: ignore[union-attr]


PEAKS: list[float] = []  # MiB: the peak resident memory of each runner run


async def _sample_peak(peak: list[int]) -> None:
    while True:
        peak[0] = max(peak[0], rss_bytes())
        await asyncio.sleep(0.02)


async def through_runner(config: str, rules: str, events: Sequence[MessagePublish]) -> float:
    """Messages per second from the first event fed to the last write committed (peak memory to PEAKS)."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        bridge = load_bridge(Path(tmp), config, rules)
        await bridge.start()
        peak = [rss_bytes()]
        sampler = asyncio.create_task(_sample_peak(peak))
        try:
            started = time.perf_counter()
            await feed(bridge, events)
            await bridge.idle()
            elapsed = time.perf_counter() - started
        finally:
            sampler.cancel()
            await bridge.stop()
    PEAKS.append(peak[0] / 2**20)
    return len(events) / elapsed


async def runner_latency(config: str, rules: str, events: Sequence[MessagePublish], rate: float) -> tuple[float, float]:
    """p50 and p99 milliseconds from handing an event to the bridge to its write committed,
    with events fed at a steady `rate` (half the measured throughput: latency, not queueing)."""
    sent: dict[str, float] = {}
    done: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        bridge = load_bridge(Path(tmp), config, rules)
        await bridge.start()
        try:
            for runner in bridge.runners.values():
                runner.commit_hooks.append(lambda job, _: done.setdefault(job.event.msgid, time.perf_counter()))
            started = time.perf_counter()
            for index, event in enumerate(events):
                delay = started + index / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent[event.msgid] = time.perf_counter()
                await bridge.dispatcher(event)
            await bridge.idle()
        finally:
            await bridge.stop()
    latencies = sorted((done[msgid] - at) * 1000 for msgid, at in sent.items())
    return latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


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


CEILING_WRITES_TOPICS = (
    "the ceiling also inserts the distinct topics into mqtt_topic, as the runner does; the naive way does not"
)


@dataclass
class Database:
    """What one database's benchmark supplies to `compare`."""

    config: str  # the bridge's pool lines
    settings: dict[str, str]  # the pool settings in them from the command line
    rule: str  # the hook line the runner runs
    topics: int  # of the generated events
    expired_time: int  # the rule's
    server: str  # what it ran against, for the report
    fresh: Callable[[], Awaitable[None]]  # empty the database
    stored: Callable[[], Awaitable[tuple[int, int]]]  # messages and topics stored
    unit: str = "row"  # what `stored` counts first, for a wrong count: row, document, message


async def compare(
    args: argparse.Namespace,
    db: Database,
    events: Sequence[MessagePublish],
    ceiling: Method,
    naive: Method,
    ceiling_name: str,
    notes: Sequence[str] = (),
    naive_target: int = 10,
) -> int:
    """The runner against `ceiling` and `naive` in rounds, its latency at half its throughput, the
    report (`notes`: what differs between the methods); 1 if a method stored a wrong count, else 0."""
    runner = Method(
        "hookbridge runner (on_message_publish)",
        args.messages,
        lambda n: through_runner(db.config, db.rule, events[:n]),
    )
    methods = [runner, ceiling, naive]
    wrong = await measure(methods, args.runs, db.fresh, db.stored)
    await db.fresh()
    latency = await runner_latency(db.config, db.rule, events[: min(args.messages, 20_000)], runner.median / 2)
    await db.fresh()
    report(
        methods,
        [
            f"server: {db.server}",
            f"payload {args.payload} B, {db.topics} topics, expired_time {db.expired_time}, {args.runs} runs each",
            f"runner pool settings: {', '.join(f'{k} {v}' for k, v in db.settings.items()) or 'defaults'}",
            *notes,
        ],
        ceiling=ceiling_name,
        naive_target=naive_target,
        latency=latency,
        json_path=args.json,
    )
    for problem in wrong:
        print(f"WRONG {db.unit.upper()} COUNT: {problem}", file=sys.stderr)
    return 1 if wrong else 0


def report(
    methods: Sequence[Method],
    about: Sequence[str],
    ceiling: str,
    naive_target: int = 10,
    latency: tuple[float, float] | None = None,
    json_path: str | None = None,
) -> None:
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
    header = ("method", "messages", "median msg/s", "runs", "client CPU µs/msg", "stored", "topics")
    print(table(rows, header))
    runner, best, naive = (m.median for m in methods)
    share, factor = runner / best, runner / naive
    print(
        f"\nrunner = {share:.0%} of the {ceiling} ceiling (target >= 50%: {'met' if share >= 0.5 else 'NOT met'}), "
        f"{factor:.1f}x the naive way (target >= {naive_target}x: {'met' if factor >= naive_target else 'NOT met'})"
    )
    peak = max(PEAKS) if PEAKS else 0.0
    if latency is not None:
        p50, p99 = latency
        print(f"runner latency at {runner / 2:,.0f} msg/s (half its throughput): p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print(f"peak resident memory of the benchmark process during runner runs: {peak:.0f} MiB")
    if json_path:
        result = {
            "runner": runner,
            "ceiling": best,
            "naive": naive,
            "p50_ms": latency[0] if latency else None,
            "p99_ms": latency[1] if latency else None,
            "peak_mib": peak,
            "ceiling_name": ceiling,
        }
        Path(json_path).write_text(json.dumps(result))
