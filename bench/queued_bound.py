"""One bound for all queued messages (`broker.max_queued_bytes`), measured
(docs/benchmarks.md#one-bound-for-all-queued-messages-embedded-broker).

1. Memory: `python -m bridge run` (no rules, durable sessions off unless --durable) with
   `broker.max_queued_bytes = --bound`; 10,000 persistent sessions (clean session 0, QoS 1, a
   topic each) subscribe and go offline; one publisher then sends each of them distinct messages
   in turn (--payload bytes each) until `--over` times the bound has been queued, so the sessions
   fill up to the bound and then lose their oldest messages. Printed: the broker's RSS at start,
   with the idle sessions (-> the overhead per session), and its peak while queued messages grow
   to the bound and past it, against the bound; the drops /metrics counted.
2. The cost of choosing the largest queue (queuedbytes.QueuedBytes), in this process: 15,000
   sessions, enqueues below the bound (a running total only), at the bound (each enqueue drops
   the oldest message of the largest queue: heap push and pop), and one rebuild of the heap.

    .venv/bin/python -m bench.queued_bound [--sessions 10000] [--bound 1GB] [--payload 1000]
                                           [--over 1.5] [--durable] [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench.broker_bench import raise_fd_limit
from bench.broker_servers import HOST, Launch, Server, free_port
from bench.machine import describe, table
from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    Connack,
    Connect,
    Decoder,
    Disconnect,
    Puback,
    Publish,
    Suback,
    Subscribe,
    encode,
)
from bridge.brokers.embedded.codec import Subscription as Sub
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.queuedbytes import QueuedBytes
from bridge.brokers.embedded.sessions import MESSAGE_OVERHEAD, Outgoing, SessionState
from bridge.brokers.embedded.stream import EventStream
from bridge.conf import parsers

WINDOW = 2000  # the publisher's QoS 1 messages in flight
SAMPLE_EVERY = 20_000  # messages between two RSS samples
SETTLE = 1.0


def launch(workdir: Path, bound: int, durable: bool) -> Launch:
    (workdir / "rules").mkdir(parents=True, exist_ok=True)
    port, metrics_port = free_port(), free_port()
    config = [
        f"broker.listener.tcp = {HOST}:{port}",
        f"metrics.listener = {HOST}:{metrics_port}",
        f"spool.dir = {workdir / 'spool'}",
        f"broker.max_queued_bytes = {bound}",
    ]
    if durable:
        config += ["broker.durable_sessions = on", f"broker.durable_dir = {workdir / 'durable'}"]
    (workdir / "bridge.conf").write_text("\n".join(config) + "\n")
    command = [sys.executable, "-m", "bridge", "run", "-c", str(workdir / "bridge.conf"), "-r", str(workdir / "rules")]
    return Launch("hookbridge", command, workdir, port, "bridge.log", metrics_port)


def metric(launched: Launch, name: str, label: str = "") -> float:
    with urllib.request.urlopen(f"http://{HOST}:{launched.metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(rf"^{name}\{{[^}}]*{label}[^}}]*\}} (\S+)$", text, re.M)
    return float(found[1]) if found else 0.0


async def _exchange(port: int, clientid: str, packets: list[Any], until: type) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    decoder = Decoder(level=MQTT_3_1_1, role="client")
    writer.write(b"".join(encode(p, MQTT_3_1_1) for p in packets))
    got: list[Any] = []
    while not any(isinstance(p, until) for p in got):
        data = await reader.read(65536)
        if not data:
            raise RuntimeError(f"{clientid}: closed after {got}")
        got.extend(decoder.feed(data))
    writer.write(encode(Disconnect(), MQTT_3_1_1))
    await writer.drain()
    writer.close()
    await reader.read()  # the broker closes: the session is offline


async def make_sessions(port: int, count: int, parallel: int = 100) -> None:
    """`count` persistent sessions, each subscribed (QoS 1) to its own topic, then offline."""
    pending = iter(range(count))

    async def worker() -> None:
        for n in pending:
            clientid = f"qb{n:06d}"
            connect = Connect(clientid, MQTT_3_1_1, clean_start=False, keepalive=0)
            await _exchange(port, clientid, [connect, Subscribe(1, [Sub(f"qb/{n:06d}", 1)])], Suback)

    await asyncio.gather(*(worker() for _ in range(parallel)))


async def publish(server: Server, sessions: int, messages: int, payload: int, fits: int) -> tuple[int, int, float]:
    """`messages` QoS 1 messages, to the sessions in turn, each distinct; returns the RSS once the
    first `fits` messages (what the bound holds) were acknowledged, the peak RSS seen (sampled every
    SAMPLE_EVERY messages) and the messages per second."""
    reader, writer = await asyncio.open_connection(HOST, server.port)
    decoder = Decoder(level=MQTT_3_1_1, role="client")
    writer.write(encode(Connect("qb-publisher", MQTT_3_1_1, keepalive=0), MQTT_3_1_1))
    inflight = asyncio.Semaphore(WINDOW)
    acked = 0
    done = asyncio.Event()
    filler = b"." * payload

    async def read_acks() -> None:
        nonlocal acked
        while acked < messages:
            data = await reader.read(1 << 16)
            if not data:
                raise RuntimeError("the broker closed the publisher's connection")
            for packet in decoder.feed(data):
                if isinstance(packet, Puback):
                    acked += 1
                    inflight.release()
                elif not isinstance(packet, Connack):
                    raise RuntimeError(f"unexpected {packet!r}")
        done.set()

    acks = asyncio.get_running_loop().create_task(read_acks())
    peak = at_bound = server.rss()
    started = time.perf_counter()
    for n in range(messages):
        await inflight.acquire()
        head = b"%09d:" % n
        packet = Publish(f"qb/{n % sessions:06d}", head + filler[len(head) :], qos=1, packet_id=n % 65535 + 1)
        writer.write(encode(packet, MQTT_3_1_1))
        if n % 256 == 0:
            await writer.drain()
        if n % SAMPLE_EVERY == 0:
            peak = max(peak, server.rss())
        if n == fits + WINDOW:  # the first `fits` are acknowledged: queued
            at_bound = server.rss()
    await done.wait()
    await acks
    rate = messages / (time.perf_counter() - started)
    peak = max(peak, server.rss())
    writer.close()
    return at_bound, peak, rate


def memory(args: argparse.Namespace, results: dict[str, float]) -> None:
    size = len("qb/000000") + args.payload + MESSAGE_OVERHEAD  # as a queued message is counted
    messages = int(args.bound * args.over) // size
    raise_fd_limit(200)
    with TemporaryDirectory(prefix="queued-bound-") as tmp:
        launched = launch(Path(tmp), args.bound, args.durable)
        with launched.run() as server:
            time.sleep(SETTLE)
            base = server.rss()
            started = time.perf_counter()
            asyncio.run(make_sessions(server.port, args.sessions))
            made = time.perf_counter() - started
            time.sleep(SETTLE)
            idle = server.rss()
            fits = args.bound // size
            at_bound, peak, rate = asyncio.run(publish(server, args.sessions, messages, args.payload, fits))
            time.sleep(SETTLE)
            end = server.rss()
            dropped = metric(launched, "hookbridge_broker_refused_total", 'reason="queued_bytes"')
            total_dropped = metric(launched, "hookbridge_broker_dropped_messages")
    per_session = (idle - base) / args.sessions
    over_sessions = peak - idle
    mib = 1 << 20
    print(
        f"\n{args.sessions:,} offline sessions (QoS 1, a topic each; made in {made:.1f} s), then {messages:,} "
        f"distinct messages of {args.payload} B to them in turn ({rate:,.0f} msg/s): {messages * size / mib:,.0f} MiB "
        f"counted ({size} B each: topic + payload + {MESSAGE_OVERHEAD}), {args.over}x broker.max_queued_bytes = "
        f"{args.bound / mib:,.0f} MiB{'; durable sessions on' if args.durable else ''}\n"
    )
    rows: list[tuple[str, ...]] = [
        ("RSS at start", f"{base / mib:,.0f}"),
        (f"RSS with {args.sessions:,} idle sessions", f"{idle / mib:,.0f}"),
        ("  overhead per session", f"{per_session / 1024:.1f} KiB"),
        ("RSS when the queues reached the bound", f"{at_bound / mib:,.0f}"),
        (f"RSS peak, to {args.over}x the bound published", f"{peak / mib:,.0f}"),
        ("RSS at the end", f"{end / mib:,.0f}"),
        ("peak - RSS with idle sessions", f"{over_sessions / mib:,.0f}"),
        ("  per byte of the bound", f"{over_sessions / args.bound:.2f}"),
        ("messages dropped (queued_bytes)", f"{dropped:,.0f} (dropped_messages {total_dropped:,.0f})"),
        (
            "messages kept (published - dropped)",
            f"{messages - dropped:,.0f} = {(messages - dropped) * size / mib:,.0f} MiB",
        ),
    ]
    print(table(rows, ("", "MiB")))
    print(
        f"\nRSS stays within start + {per_session / 1024:.1f} KiB per session + "
        f"{over_sessions / args.bound:.2f} x broker.max_queued_bytes"
    )
    results.update(
        rss_base=base,
        rss_idle_sessions=idle,
        rss_at_bound=at_bound,
        rss_peak=peak,
        rss_end=end,
        overhead_per_session=per_session,
        peak_over_bound=over_sessions / args.bound,
        dropped=dropped,
        messages=messages,
        rate=rate,
    )


async def _never_posted(event: object) -> None:
    raise AssertionError(f"queueing posted an event: {event!r}")


def choice_cost(sessions: int, results: dict[str, float], repeats: int = 3) -> None:
    """In this process: what one enqueue costs with `sessions` sessions, with no broker-wide bound
    (the code before it), under the bound, and at it (each enqueue then drops the oldest message
    of the largest queue); and one rebuild of the heap. The best of `repeats` runs of each."""
    limits = Limits(max_offline_messages=0, max_offline_bytes=1 << 40)
    per_session = 10
    payload = b"x" * 100
    size = len("qb/000000") + len(payload) + MESSAGE_OVERHEAD

    def fleet(bounded: bool) -> tuple[list[SessionState], QueuedBytes, Counter[str]]:
        refused: Counter[str] = Counter()
        states: dict[str, SessionState] = {}
        queued = QueuedBytes(sessions * per_session * size, states)
        stream = EventStream(_never_posted, "bench")  # queueing posts no event
        for n in range(sessions):
            states[f"c{n}"] = SessionState(
                f"c{n}",
                expiry=60,
                username=None,
                stream=stream,
                limits=limits,
                refused=refused,
                queued=queued if bounded else None,
            )
        return list(states.values()), queued, refused

    def fill(order: list[SessionState], count: int) -> float:
        started = time.perf_counter()
        for n in range(count):
            order[n % sessions].enqueue(Outgoing("m", "qb/000000", payload, 1, False, "p", ("qb/000000",)))
        return (time.perf_counter() - started) / count

    fits = sessions * per_session  # messages the bound holds
    unbounded, own, under, at, rebuild = [], [], [], [], []
    logging.getLogger("bridge.brokers.embedded").setLevel(logging.ERROR)  # the drop warnings
    for _ in range(repeats):
        order, queued, refused = fleet(False)
        unbounded.append(fill(order, fits))
        # every enqueue now drops by a session's own bound (the mechanism the broker-wide one reuses)
        object.__setattr__(limits, "max_offline_messages", per_session)
        own.append(fill(order, fits))
        object.__setattr__(limits, "max_offline_messages", 0)
        order, queued, refused = fleet(True)
        under.append(fill(order, fits))  # up to the bound, not past it
        assert refused["queued_bytes"] == 0
        assert not queued.live
        started = time.perf_counter()
        queued._build()
        rebuild.append(time.perf_counter() - started)
        queued._release()
        at.append(fill(order, fits))  # every enqueue now drops one message of the largest queue
        assert refused["queued_bytes"] == fits
    print(
        f"\nChoosing the victim (queuedbytes.QueuedBytes), {sessions:,} sessions, in this process, best of {repeats}:\n"
    )
    print(
        table(
            [
                ("enqueue, no broker-wide bound (queued=None)", f"{min(unbounded) * 1e6:.2f} us"),
                ("enqueue + a drop by the session's own bound", f"{min(own) * 1e6:.2f} us"),
                ("enqueue under the bound (a running total)", f"{min(under) * 1e6:.2f} us"),
                ("enqueue at the bound (+ drop the oldest of the largest queue)", f"{min(at) * 1e6:.2f} us"),
                ("one rebuild of the heap (O(sessions))", f"{min(rebuild) * 1e3:.2f} ms"),
            ],
            ("", "time"),
        )
    )
    results.update(
        enqueue_unbounded_us=min(unbounded) * 1e6,
        enqueue_own_drop_us=min(own) * 1e6,
        enqueue_under_us=min(under) * 1e6,
        enqueue_at_bound_us=min(at) * 1e6,
        rebuild_ms=min(rebuild) * 1e3,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--bound", type=parsers.size_in(1 << 20, 1 << 40), default=1 << 30)
    parser.add_argument("--payload", type=int, default=1000)
    parser.add_argument("--over", type=float, default=1.5, help="bytes published, as a multiple of the bound")
    parser.add_argument("--durable", action="store_true")
    parser.add_argument("--quick", action="store_true", help="200 sessions, a 16MB bound (smoke test)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.bound = 200, 16 << 20
    print(f"machine: {describe()}")
    results: dict[str, float] = {}
    memory(args, results)
    choice_cost(15_000 if not args.quick else 1_000, results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
