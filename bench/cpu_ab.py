"""Broker CPU per message, this checkout against another revision, alternating:
docs/benchmarks.md#broker-cpu-per-message-against-a-revision.

    .venv/bin/python -m bench.cpu_ab [--against REV | --dirs BEFORE AFTER] [--rounds 4] [--runs 3] [--messages 50000]
                                     [--no-rules] [--json F]

How much a change saves is smaller than what a busy machine moves a rate by, and the broker's
CPU time per message (user + system of its process tree, /proc/<pid>/stat, over a fixed number
of messages) moves less, but the state of the machine still drifts between two invocations of a
benchmark minutes apart (on this 2-core machine the same code measured 34 and 40 µs per message
in two runs of bench.broker_bench). So both sides run in the same invocation, in rounds, the
order alternating: `REV` is checked out into a temporary git worktree, and each round starts its
bridge and this checkout's (`python -m bridge run` from each directory, the same virtualenv),
with the shipped rules/redis.conf into a Redis this script starts (or no rules: `--no-rules`),
and sends `--runs` x `--messages` QoS 1 messages through each, 1 -> 1, as bench.broker_bench does
(Mosquitto's C clients, up to 1,000 in flight). Every message must arrive or the run fails.
Printed: each side's runs and median, and the change. No Mosquitto row: this compares the bridge
with itself (bench.broker_bench has Mosquitto beside it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.broker_bench import publish_through
from bench.broker_servers import ROOT, free_port, hookbridge_launch
from bench.machine import describe, table


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """`revision` checked out in a temporary git worktree, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="cpu-ab-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(path), revision], cwd=ROOT, check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)


@contextlib.contextmanager
def redis_server(wanted: bool) -> Iterator[int | None]:
    if not wanted:
        yield None
        return
    port = free_port()
    subprocess.run(["bash", "scripts/redis.sh", str(port)], check=True, capture_output=True, cwd=ROOT)
    try:
        yield port
    finally:
        subprocess.run(["bash", "scripts/redis.sh", str(port), "stop"], capture_output=True, cwd=ROOT)


def one_side(source: Path, workdir: Path, redis_port: int | None, runs: int, messages: int) -> list[float]:
    """CPU µs per message of `runs` runs through a fresh bridge of the checkout at `source`."""
    if redis_port is not None:
        subprocess.run(["redis-cli", "-p", str(redis_port), "flushall"], check=True, capture_output=True)
    cpu: list[float] = []
    with hookbridge_launch(workdir / "bridge", redis_port=redis_port, source=source).run() as server:
        publish_through(server, 2_000, workdir)  # warm-up: imports, first connections, the Redis pool
        for _ in range(runs):
            publish_through(server, messages, workdir, cpu_us=cpu)
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", default="HEAD~1", help="the git revision to compare this checkout with")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="runs per side and round")
    parser.add_argument("--messages", type=int, default=50_000, help="messages per run")
    parser.add_argument("--no-rules", action="store_true", help="no rules (the broker alone)")
    parser.add_argument("--json", type=Path, help="also write the runs to this file")
    parser.add_argument(
        "--dirs",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="compare these two trees instead of a revision with this checkout (e.g. two copies built in"
        " place with mypyc: docs/development.md#measuring-it)",
    )
    args = parser.parse_args()
    if args.dirs:
        revision, after = str(args.dirs[0]), args.dirs[1]
    else:
        revision, after = _short(args.against), ROOT
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    with (
        contextlib.nullcontext(args.dirs[0]) if args.dirs else worktree(revision) as before,
        redis_server(not args.no_rules) as redis_port,
        tempfile.TemporaryDirectory() as tmp,
    ):
        sides = {"before": before, "after": after}
        for round_number in range(args.rounds):
            order = ("after", "before") if round_number % 2 else ("before", "after")
            for side in order:
                workdir = Path(tmp) / f"{side}-{round_number}"
                workdir.mkdir()
                cpu[side] += one_side(sides[side], workdir, redis_port, args.runs, args.messages)
    medians = {side: statistics.median(values) for side, values in cpu.items()}
    change = medians["after"] / medians["before"] - 1
    print(f"machine: {describe()}")
    rules = "no rules" if args.no_rules else "rules/redis.conf into Redis"
    print(
        f"\nbroker CPU us per message, QoS 1 1 -> 1, {rules}, {args.messages} messages per run; "
        f"{args.rounds} rounds of {args.runs} runs per side, alternating\n"
    )
    runs = {side: ", ".join(f"{v:.1f}" for v in values) for side, values in cpu.items()}
    rows = [
        (f"before: {revision}", f"{medians['before']:.1f}", "", runs["before"]),
        (
            f"after: {args.dirs[1] if args.dirs else 'this checkout'}",
            f"{medians['after']:.1f}",
            f"{change:+.1%}",
            runs["after"],
        ),
    ]
    print(table(rows, ("bridge", "median us/msg", "change", "runs")))
    if args.json is not None:
        args.json.write_text(json.dumps({"against": revision, "cpu_us": cpu, "medians": medians, "change": change}))


def _short(revision: str) -> str:
    command = ["git", "rev-parse", "--short", revision]
    done = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    return done.stdout.strip()


if __name__ == "__main__":
    main()
