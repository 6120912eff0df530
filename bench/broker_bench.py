"""Throughput of the embedded broker, with and without persistence rules, against plain amqtt.

QoS 1, one publisher to one subscriber, 100-byte payloads; both paho clients run in a separate
process so they do not share the broker's interpreter. Three brokers, measured in one run:

- amqtt 0.12.1 as it comes (the base library, for reference);
- hookbridge's embedded broker with a no-op sink (the broker alone, hooks firing);
- the whole bridge with the shipped rules/redis.conf writing to Redis (persistence on);
- the same bridge acknowledging on receipt instead of once the message is kept (committed or
  spooled, SPEC 6.3): the cost of that guarantee, measured in the same run.

    .venv/bin/python -m bench.broker_bench [--messages 20000] [--runs 3] [--redis-port 6393]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.machine import describe, table
from bench.persistence import rss_bytes

ROOT = Path(__file__).resolve().parents[1]


def _clients(port: int, count: int, out: Any) -> None:
    import paho.mqtt.client as mqtt

    done, subscribed = threading.Event(), threading.Event()
    received = [0]

    def on_message(*_: object) -> None:
        received[0] += 1
        if received[0] == count:
            done.set()

    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-sub", protocol=mqtt.MQTTv311)
    sub.on_message = on_message
    sub.on_subscribe = lambda *_: subscribed.set()
    sub.connect("127.0.0.1", port)
    sub.loop_start()
    sub.subscribe("bench/t", 1)
    subscribed.wait(10)
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-pub", protocol=mqtt.MQTTv311)
    pub.max_inflight_messages_set(100)
    pub.max_queued_messages_set(0)
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    payload = b"x" * 100
    started = time.perf_counter()
    for _ in range(count):
        pub.publish("bench/t", payload, 1)
    complete = done.wait(600)
    elapsed = time.perf_counter() - started
    for client in (pub, sub):
        client.disconnect()
        client.loop_stop()
    out.put((elapsed, complete, received[0]))


async def _drive(port: int, count: int) -> float:
    context = mp.get_context("spawn")
    out = context.Queue()
    process = context.Process(target=_clients, args=(port, count, out))
    process.start()
    while out.empty():
        if not process.is_alive() and out.empty():
            raise RuntimeError("benchmark clients died")
        await asyncio.sleep(0.05)
    elapsed, complete, received = out.get()
    process.join()
    if not complete:
        raise RuntimeError(f"only {received} of {count} messages arrived")
    return count / elapsed


Setup = Callable[[], Awaitable[tuple[int, Callable[[], Awaitable[None]]]]]


async def plain_amqtt() -> tuple[int, Callable[[], Awaitable[None]]]:
    from amqtt.broker import Broker

    broker = Broker(
        {
            "listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:18830"}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        }
    )
    await broker.start()
    return 18830, broker.shutdown


async def embedded_noop() -> tuple[int, Callable[[], Awaitable[None]]]:
    from bridge.brokers.embedded import EmbeddedBroker
    from bridge.msgid import MsgIdGenerator

    async def sink(_: object) -> None:
        return None

    broker = EmbeddedBroker("127.0.0.1:0", node="bench", msgids=MsgIdGenerator("bench"))
    await broker.start(sink)
    return broker.port, broker.stop


def bridge_with_rules(redis_port: int, workdir: Path, ack_when_kept: bool = True) -> Setup:
    async def setup() -> tuple[int, Callable[[], Awaitable[None]]]:
        from bridge.app import Bridge, Paths

        shutil.rmtree(workdir, ignore_errors=True)
        (workdir / "rules").mkdir(parents=True)
        shutil.copy(ROOT / "rules" / "redis.conf", workdir / "rules")
        (workdir / "bridge.conf").write_text(
            f"broker.listener.tcp = 127.0.0.1:0\nmetrics.listener = off\nspool.dir = {workdir / 'spool'}\n"
            f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
        )
        bridge = Bridge.load(Paths(workdir / "bridge.conf", workdir / "rules"))
        # Off: PUBACK once the bridge has the event, as before SPEC 6.3 (a kill -9 may lose it).
        bridge.broker.acks_after_commit = ack_when_kept
        await bridge.start()

        async def stop() -> None:
            await bridge.idle()
            await bridge.stop()

        return bridge.broker.port, stop  # type: ignore[attr-defined]

    return setup


async def measure(setup: Setup, count: int, peaks: list[float]) -> float:
    port, stop = await setup()
    peak = [rss_bytes()]
    sampler = asyncio.create_task(_sample(peak))
    try:
        return await _drive(port, count)
    finally:
        sampler.cancel()
        await stop()
        peaks.append(peak[0] / 2**20)


async def _sample(peak: list[int]) -> None:
    while True:
        peak[0] = max(peak[0], rss_bytes())
        await asyncio.sleep(0.02)


async def main(args: argparse.Namespace) -> dict[str, float]:
    configurations: list[tuple[str, Setup]] = [
        ("amqtt 0.12.1 alone (base library)", plain_amqtt),
        ("embedded broker, hooks to a no-op sink", embedded_noop),
        ("embedded broker + rules/redis.conf into Redis", bridge_with_rules(args.redis_port, Path(args.workdir))),
        (
            "the same, PUBACK on receipt (not kept)",
            bridge_with_rules(args.redis_port, Path(args.workdir), ack_when_kept=False),
        ),
    ]
    rates: dict[str, list[float]] = {name: [] for name, _ in configurations}
    peaks: dict[str, list[float]] = {name: [] for name, _ in configurations}
    for _ in range(args.runs):  # rounds of all four, so a busy moment of the machine hits them alike
        for name, setup in configurations:
            rates[name].append(await measure(setup, args.messages, peaks[name]))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    rows = [
        (name, f"{medians[name]:,.0f}", ", ".join(f"{r:,.0f}" for r in rates[name]), f"{max(peaks[name]):.0f}")
        for name, _ in configurations
    ]
    print(f"machine: {describe()}")
    print(f"QoS 1, 1 publisher -> 1 subscriber, 100 B payloads, {args.messages} messages per run, {args.runs} runs\n")
    print(table(rows, ("broker", "median msg/s", "runs", "peak RSS MiB (broker process)")))
    noop, persisted = medians[configurations[1][0]], medians[configurations[2][0]]
    on_receipt = medians[configurations[3][0]]
    cost = 1 - persisted / noop
    verdict = "met" if cost <= 0.2 else "NOT met"
    print(f"\npersistence costs {cost:.0%} of the embedded broker's throughput (target <= 20%: {verdict})")
    print(f"acknowledging once kept (SPEC 6.3) costs {1 - persisted / on_receipt:.0%} against acknowledging on receipt")
    return {
        "noop": noop,
        "persisted": persisted,
        "amqtt": medians[configurations[0][0]],
        "cost": cost,
        "peak_mib": max(peaks[configurations[2][0]]),
        "on_receipt": on_receipt,
        "ack_cost": 1 - persisted / on_receipt,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--redis-port", type=int, default=6393)
    parser.add_argument("--workdir", default=".run/bench-broker")
    parser.add_argument("--json", help="also write the results to this file (the bench suite reads it)")
    arguments = parser.parse_args()
    subprocess.run(["bash", "scripts/redis.sh", str(arguments.redis_port)], check=True, capture_output=True)
    results = asyncio.run(main(arguments))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(results))
