"""The broker's state numbers at fleet size (bridge/brokers/embedded/census.py): how long one walk
over every session, subscription and queued message holds the event loop at once, and the longest
hold-up when the walk is taken in slices (docs/operations.md#broker-traffic-at-metrics).

    .venv/bin/python -m bench.census_walk [--sessions 15000] [--filters 67] [--queued 200000]

The sessions are stand-ins with the attributes the walk reads (connected, subscriptions, queue,
in-flight window, dropped, unloaded): the walk's cost is those reads, not the broker's other parts.
A watcher task records every gap between its turns while the sliced walk runs.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter, deque
from types import SimpleNamespace
from typing import Any

from bench.machine import describe, table
from bridge.brokers.embedded.census import SLICE, Census
from bridge.brokers.embedded.topictree import RetainedTree
from bridge.brokers.embedded.traffic import Traffic


def fleet(sessions: int, filters: int, queued: int) -> dict[str, Any]:
    """`sessions` sessions of `filters` subscriptions each; `queued` messages spread over the
    offline ones (200 each), as after an outage."""
    per_queue = 200
    messages = [SimpleNamespace(msgid=f"{n:032X}", topic=f"dev/{n % 1000}/t", payload=b"x" * 20) for n in range(queued)]
    offline = min(sessions, -(-queued // per_queue))
    states: dict[str, Any] = {}
    for number in range(sessions):
        queue = deque(messages[number * per_queue : (number + 1) * per_queue]) if number < offline else ()
        states[str(number)] = SimpleNamespace(
            connected=number >= offline,
            subscriptions={f"dev/{number}/cmd/{k}/#": None for k in range(filters)},
            outbox=queue,
            inflight={},
            dropped=0,
            unloaded=None,
        )
    return states


async def measure(states: dict[str, Any]) -> tuple[float, float, float, int]:
    census = Census(Traffic(), states, RetainedTree(), Counter())
    started = time.perf_counter()
    census.tally()  # the first one: at once, whatever the size
    at_once = time.perf_counter() - started
    gaps: list[float] = []
    done = False

    async def watch() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    watcher = asyncio.create_task(watch())
    started = time.perf_counter()
    numbers = await census.fresh()
    sliced = time.perf_counter() - started
    done = True
    await watcher
    # a broker within one slice is walked at once: the whole walk is then the hold-up
    return at_once, sliced, max(gaps, default=sliced), numbers.subscriptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=15_000)
    parser.add_argument("--filters", type=int, default=67, help="subscriptions per session")
    parser.add_argument("--queued", type=int, default=200_000, help="messages queued for offline sessions")
    args = parser.parse_args()
    states = fleet(args.sessions, args.filters, args.queued)
    at_once, sliced, longest, subscriptions = asyncio.run(measure(states))
    print(f"machine: {describe()}\n")
    print(
        f"{args.sessions:,} sessions, {subscriptions:,} subscriptions, {args.queued:,} queued messages; "
        f"slice {SLICE:,} items\n"
    )
    rows = [
        ("one walk at once (the loop held all along)", f"{at_once * 1000:.0f}"),
        ("the sliced walk, start to end", f"{sliced * 1000:.0f}"),
        ("longest hold-up of the loop during it", f"{longest * 1000:.1f}"),
    ]
    print(table(rows, ("", "ms")))


if __name__ == "__main__":
    main()
