"""What bench.mqtt_bench finds for each configuration, how it is judged (every message stored
exactly once; latency percentiles from each message's first commit) and printed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bench.machine import table
from bench.mqtt_publish import payload_fields

ROWS = ("ceiling", "bridge", "workers", "sketch", "naive")


@dataclass
class Row:
    key: str  # one of ROWS
    name: str
    messages: int
    rate: float | None = None
    cpu_us: float | None = None  # the subscriber's process tree
    broker_us: float | None = None  # Mosquitto's
    database_us: float | None = None  # the database server's (Redis, or PostgreSQL and its backends)
    machine_us: float | None = None  # every process on the machine: the share of its cores a message costs
    paced: float | None = None
    p50: float | None = None
    p99: float | None = None
    verdict: str = "-"
    exactly_once: bool = True
    note: str = ""


def verdict(payloads: list[bytes], expected: range) -> tuple[str, bool]:
    """Whether every expected sequence number is stored exactly once, in words."""
    seen = Counter(fields[1] for payload in payloads if (fields := payload_fields(payload)))
    lost = sum(1 for seq in expected if seq not in seen)
    extra = sum(count - 1 for count in seen.values()) + sum(1 for seq in seen if seq not in expected)
    if not lost and not extra:
        return "exactly once", True
    return f"{lost} lost, {extra} extra", False


def percentiles(commits: list[tuple[int, bytes]], paced: range) -> tuple[float, float] | None:
    """p50 / p99 ms from publish to the first commit of each paced message."""
    first: dict[int, float] = {}
    for at, payload in commits:
        fields = payload_fields(payload)
        if fields and fields[1] in paced:
            latency = (at - fields[0]) / 1e6
            first[fields[1]] = min(first.get(fields[1], latency), latency)
    latencies = sorted(first.values())
    if not latencies:
        return None
    return latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


def figure(value: float | None, form: str = ",.0f") -> str:
    return "-" if value is None else format(value, form)


def report(db: str, rows: list[Row]) -> None:
    sketch = next((row.rate for row in rows if row.key == "sketch"), None)
    header = (
        db,
        "messages",
        "msg/s",
        "subscriber CPU µs/msg",
        "Mosquitto CPU µs/msg",
        "database CPU µs/msg",
        "all CPU µs/msg",
        "paced at msg/s",
        "p50 ms",
        "p99 ms",
        "stored",
        "vs sketch",
    )
    print(
        table(
            [
                (
                    row.name,
                    f"{row.messages:,}",
                    figure(row.rate),
                    figure(row.cpu_us, ".1f"),
                    figure(row.broker_us, ".1f"),
                    figure(row.database_us, ".1f"),
                    figure(row.machine_us, ".1f"),
                    figure(row.paced),
                    figure(row.p50, ".1f"),
                    figure(row.p99, ".1f"),
                    row.verdict,
                    f"{row.rate / sketch:.2f}x" if row.rate and sketch else "-",
                )
                for row in rows
            ],
            header,
        )
    )
    for row in rows:
        if row.note:
            print(f"{row.name}: {row.note}")
    workers = next((row for row in rows if row.key == "workers"), None)
    if workers and workers.rate and sketch:
        ratio, p99 = workers.rate / sketch, workers.p99 or float("inf")
        goals = [f"{ratio:.2f}x the sketch (target >= 1.3x: {'met' if ratio >= 1.3 else 'NOT met'})"]
        if db == "redis":
            goals.append(
                f"{workers.rate:,.0f} msg/s (target >= 25,000: {'met' if workers.rate >= 25_000 else 'NOT met'})"
            )
        goals.append(f"p99 {p99:.1f} ms at half rate (target < 50: {'met' if p99 < 50 else 'NOT met'})")
        print(f"{workers.name}: {'; '.join(goals)}")
    print()
