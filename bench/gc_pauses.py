"""Garbage collection pauses at a fleet's size: the longest time Python's cyclic collector stops
the process while the embedded broker holds 100,000 and 1,000,000 subscriptions
(docs/benchmarks.md#garbage-collection-pauses).

    .venv/bin/python -m bench.gc_pauses [--sizes 100000,1000000] [--messages 2000000]

For each size, two runs, each in its own process (a fresh heap):

- `python`: CPython's collector as it comes (thresholds 700, 10, 10), what main did;
- `freeze`: what `hookbridge run` does (bridge/ops/gcfreeze.py): the youngest generation
  collected every `gc.young_threshold` (10,000) allocations, start-up frozen, then the
  survivors of any full collection that took `gc.freeze_after` (50 ms) or longer.

Each run builds the sessions (4 filters each, as tests/integration/test_api_at_size.py: three of
the session's own and one shared by all) through the broker's own structures (the session table,
the router's topic trees), as a durable restore or a fleet's SUBSCRIBEs do, then makes message
traffic: `--messages` messages, the last 50,000 of them kept alive (in flight, queued), so the
collector runs as under load. Every collection's pause is timed from the collector's own
callbacks (gc.callbacks: start and stop). Printed: the objects the collector tracks, the
longest pause while building and under traffic, the full collections, one explicit full
collection at the end; for `freeze`, the objects left behind when every session goes again
(reference cycles among frozen objects, which freezing would keep: 0 is what it must be).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, cast

from bench.machine import describe, table

FILTERS = ("cmd/#", "cfg", "fw/+/state", "$share/g/all/#")  # per session: dev/<id>/<filter>, the last shared
KEPT_ALIVE = 50_000  # messages alive at once under traffic (in flight, queued)
FREEZE_AFTER = 0.05  # gc.freeze_after's default
YOUNG_THRESHOLD = 10_000  # gc.young_threshold's default


class Pauses:
    """Every collection's pause, by generation, from the collector's callbacks."""

    def __init__(self) -> None:
        self.longest = {0: 0.0, 1: 0.0, 2: 0.0}
        self.full = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        generation = info["generation"]
        self.longest[generation] = max(self.longest[generation], took)
        self.full += generation == 2

    def reset(self) -> None:
        self.longest = {0: 0.0, 1: 0.0, 2: 0.0}
        self.full = 0


def one_run(subscriptions: int, policy: str, messages: int) -> dict[str, float]:
    from bridge.brokers.embedded.broker import Broker
    from bridge.brokers.embedded.limits import Limits
    from bridge.brokers.embedded.router import Message
    from bridge.brokers.embedded.sessions import Subscription
    from bridge.msgid import MsgIdGenerator
    from bridge.ops.gcfreeze import SlowCollectionFreezer, freeze_startup, set_young_threshold

    msgids = MsgIdGenerator("bench")
    broker = Broker(node="bench", msgids=msgids, sink=cast(Any, None), limits=Limits())
    freezer = SlowCollectionFreezer(FREEZE_AFTER)
    if policy == "freeze":  # as `hookbridge run` after start-up (bridge/cli.py)
        set_young_threshold(YOUNG_THRESHOLD)
        freeze_startup()
        freezer.install()
    pauses = Pauses()
    gc.callbacks.append(pauses)

    started = time.perf_counter()
    for n in range(subscriptions // len(FILTERS)):
        clientid = f"dev-{n:07d}"
        state = broker.restored_session(clientid, 3600, None, None, 4)
        for topic_filter in FILTERS:
            full = topic_filter if topic_filter.startswith("$share/") else f"dev/{clientid}/{topic_filter}"
            broker.router.subscribe(state, Subscription(full, 1, ""))
    built = time.perf_counter() - started
    tracked = len(gc.get_objects()) + gc.get_freeze_count()
    build = dict(pauses.longest)
    build_full = pauses.full
    pauses.reset()

    alive: deque[Message] = deque(maxlen=KEPT_ALIVE)
    started = time.perf_counter()
    for n in range(messages):
        clientid = f"dev-{n % 1000:07d}"
        alive.append(Message(msgids.next(), f"dev/{clientid}/state", b"payload", 1, False, clientid))
    traffic_seconds = time.perf_counter() - started
    traffic = dict(pauses.longest)
    traffic_full = pauses.full
    gc.callbacks.remove(pauses)

    started = time.perf_counter()
    gc.collect()
    explicit = time.perf_counter() - started

    left = 0
    if policy == "freeze":  # what freezing would keep: cycles among frozen objects, once they go
        freezer.uninstall()
        alive.clear()
        for clientid in list(broker.states):
            state = broker.states[clientid]
            broker.router.unsubscribe_all(state)
            state.discard()
            del broker.states[clientid]
        gc.unfreeze()
        left = gc.collect()
    return {
        "subscriptions": subscriptions,
        "tracked": tracked,
        "build_s": built,
        "build_longest_full_ms": build[2] * 1000,
        "build_longest_young_ms": max(build[0], build[1]) * 1000,
        "build_full": build_full,
        "traffic_msgs_per_s": messages / traffic_seconds,
        "traffic_longest_full_ms": traffic[2] * 1000,
        "traffic_longest_young_ms": max(traffic[0], traffic[1]) * 1000,
        "traffic_full": traffic_full,
        "explicit_full_ms": explicit * 1000,
        "freezes": freezer.freezes,
        "cycles_left": left,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="subscriptions, comma-separated")
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size ...
    parser.add_argument("--policy", choices=("python", "freeze"), help=argparse.SUPPRESS)  # ... one policy
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one_run(args.one, args.policy, args.messages)))
        return 0

    print(f"machine: {describe()}", flush=True)
    results: list[dict[str, Any]] = []
    for size in (int(each) for each in args.sizes.split(",")):
        for policy in ("python", "freeze"):
            command = [sys.executable, "-m", "bench.gc_pauses", "--one", str(size), "--policy", policy]
            done = subprocess.run([*command, "--messages", str(args.messages)], capture_output=True, text=True)
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return 1
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            results.append({"policy": policy, **figures})
            print(f"{size:,} subscriptions, {policy}: {figures}", flush=True)
    rows = [
        (
            f"{r['subscriptions']:,}",
            r["policy"],
            f"{r['tracked']:,}",
            f"{r['build_longest_full_ms']:,.0f} ({r['build_full']})",
            f"{r['traffic_longest_full_ms']:,.0f} ({r['traffic_full']})",
            f"{max(r['build_longest_young_ms'], r['traffic_longest_young_ms']):,.0f}",
            f"{r['explicit_full_ms']:,.0f}",
            f"{r['traffic_msgs_per_s']:,.0f}",
            str(r["cycles_left"]) if r["policy"] == "freeze" else "",
        )
        for r in results
    ]
    print(
        table(
            rows,
            (
                "subscriptions",
                "policy",
                "tracked objects",
                "longest full pause building, ms (full collections)",
                "longest full pause under traffic, ms (full collections)",
                "longest young pause, ms",
                "gc.collect() at the end, ms",
                "traffic msg/s",
                "cycles left",
            ),
        )
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
