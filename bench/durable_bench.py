"""Durable sessions of the embedded broker, in one run: docs/benchmarks.md#durable-sessions.

Three brokers, each a fresh process per run on a free port: Mosquitto with `persistence true`
(the baseline; it writes its persistence file only at its autosave, every 1,800 s by default,
and when it stops, so no disk write is in its throughput), the embedded broker with durable
sessions off (persistent sessions in memory only) and on (`broker.durable_sessions = on`).

1. Throughput: QoS 1, 100 B payloads, Mosquitto's C clients, as bench.broker_bench measures it
   (its publish_through), with persistent subscribers: `mosquitto_sub -c` (clean session 0, a
   client id each), online while `mosquitto_pub -l -M 1000` publishes; 1 -> 1 and 1 -> 100.
   msg/s = messages published / time until the last subscriber has all of them. In rounds, so
   that a busy moment of the machine hits every broker alike; the median is shown. Goal: durable
   on costs at most 30% against off.
2. Bytes on disk per stored message, 1 -> 1 and 1 -> 100 (bench.durable_disk).
3. Restart time with 1 M stored messages in 10,000 sessions (bench.durable_disk).

    .venv/bin/python -m bench.durable_bench [--quick] [--only throughput,disk,restart] [--qos 1|2] [--json FILE]

The full run takes about ten minutes on 2 cores (filling the store for the restart is most of
it); --quick is a small run of every part, for the smoke test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench.broker_bench import INFLIGHT, PAYLOAD, publish_through
from bench.durable_disk import Disk, Restart, brokers, measure_disk, measure_restart, stores
from bench.machine import describe, table

QOS2_INFLIGHT = 20
COST_GOAL = 0.30  # docs/benchmarks.md#durable-sessions: durable on costs at most 30% of the throughput with it off
SECTIONS = ("throughput", "disk", "restart")
FULL = {
    "messages": 20_000,
    "fanout_messages": 2_000,
    "subscribers": 100,
    "runs": 3,
    "disk_messages": 20_000,
    "sessions": 10_000,
    "stored": 1_000_000,
}
QUICK = {
    "messages": 1_000,
    "fanout_messages": 100,
    "subscribers": 10,
    "runs": 1,
    "disk_messages": 500,
    "sessions": 100,
    "stored": 2_000,
}
MOSQUITTO_NOTE = (
    "Mosquitto writes its persistence file only at its autosave (1,800 s by default) and when it stops: "
    "its figures include no disk write per message, and a kill -9 loses everything since the last save."
)

Results = dict[str, float]


def throughput(args: argparse.Namespace, workdir: Path, results: Results) -> None:
    fanouts = [(1, args.messages), (args.subscribers, args.fanout_messages)]
    rates: dict[tuple[str, int], list[float]] = {}
    # QoS 2: Mosquitto takes a 3.1.1 publisher's QoS 2 messages 20 at a time (max_inflight_messages):
    # past it, most of 1,000 unacknowledged ones were lost (100 of 5,000 arrived), so every broker gets 20
    inflight = INFLIGHT if args.qos == 1 else QOS2_INFLIGHT
    for run in range(args.runs):
        for subscribers, messages in fanouts:
            for broker in brokers():
                with broker.launch(workdir / f"{broker.key}-{subscribers}-{run}").run() as server:
                    rate = publish_through(
                        server,
                        messages,
                        workdir,
                        subscribers=subscribers,
                        persistent=True,
                        qos=args.qos,
                        inflight=inflight,
                    )
                rates.setdefault((broker.key, subscribers), []).append(rate)
    print(
        f"\nQoS {args.qos}, mosquitto_pub -l -M {inflight} -> mosquitto_sub -c (clean session 0, online while the "
        f"publisher runs), {len(PAYLOAD)} B payloads, median of {args.runs} runs\n"
    )
    out: list[tuple[str, ...]] = []
    verdicts: list[str] = []
    for subscribers, messages in fanouts:
        off = statistics.median(rates["off", subscribers])
        for broker in brokers():
            runs = rates[broker.key, subscribers]
            median = statistics.median(runs)
            results[f"{broker.key}_{subscribers}_msgs"] = median
            out.append(
                (
                    broker.name + (" *" if broker.key == "mosquitto" else ""),
                    f"1 -> {subscribers}",
                    str(messages),
                    f"{median:,.0f}",
                    f"{median * subscribers:,.0f}",
                    f"{median / off:.0%}",
                    ", ".join(f"{rate:,.0f}" for rate in runs),
                )
            )
        share = results[f"on_{subscribers}_msgs"] / off
        results[f"on_share_{subscribers}"] = share
        verdict = "met" if 1 - share <= COST_GOAL else "NOT met"
        verdicts.append(f"1 -> {subscribers}: {share:.0%} of off, costs {1 - share:.0%} ({verdict})")
    header = ("broker", "fan-out", "messages", "median msg/s", "deliveries/s", "of durable off", "runs")
    print(table(out, header))
    print(f"\ndurable sessions on against off (goal: costs at most {COST_GOAL:.0%}): {'; '.join(verdicts)}")
    print(f"* {MOSQUITTO_NOTE}")


def disk(args: argparse.Namespace, workdir: Path, results: Results) -> None:
    out: list[tuple[str, ...]] = []
    for subscribers in (1, args.subscribers):
        for store in stores():
            found = measure_disk(store, workdir / f"disk-{store.key}-{subscribers}", subscribers, args.disk_messages)
            results.update(_flat(f"disk_{store.key}_{subscribers}", found))
            out.append((store.name, f"1 -> {subscribers}", *_disk_cells(found)))
    print(
        f"\nBytes on disk per stored message: {args.disk_messages} messages of {len(PAYLOAD)} B (QoS 1, each "
        "acknowledged) to sessions that are offline (clean session 0); Mosquitto: mosquitto.db, the embedded "
        "broker: durable_dir (durable.db and its WAL)\n"
    )
    header = ("broker", "fan-out", "stored", "bytes running", "bytes/msg running", "after stop", "bytes/msg after stop")
    print(table(out, header))


def _disk_cells(found: Disk) -> tuple[str, ...]:
    return (
        f"{found.stored:,}",
        f"{found.running:,}",
        f"{found.running / found.stored:,.0f}",
        f"{found.stopped:,}",
        f"{found.stopped / found.stored:,.0f}",
    )


def restart(args: argparse.Namespace, workdir: Path, results: Results) -> None:
    per_session = args.stored // args.sessions
    out: list[tuple[str, ...]] = []
    found: dict[str, Restart] = {}
    for store in stores():
        found[store.key] = measured = measure_restart(
            store, workdir / f"restart-{store.key}", args.sessions, args.stored
        )
        results.update(_flat(f"restart_{store.key}", measured))
        out.append((store.name, "first start, empty", "-", f"{measured.empty_start:.2f} (present 0)", "-", "-"))
        for after, times in (("SIGTERM", measured.graceful), ("kill -9", measured.killed)):
            cells = (times.accepting, times.connack, times.first, times.last)
            out.append((store.name, f"after {after}", *(f"{value:.2f}" for value in cells)))
    print(
        f"\nRestart with {args.stored:,} stored messages ({len(PAYLOAD)} B) in {args.sessions:,} offline sessions "
        f"({per_session} each): seconds from the process start to the listener accepting, one session's CONNACK "
        f"(session present 1), its first message, all {per_session} of its messages\n"
    )
    header = ("broker", "start", "listener", "CONNACK", "first message", f"all {per_session}")
    print(table(out, header))
    for store in stores():
        measured = found[store.key]
        print(
            f"{store.name}: {measured.stored:,} stored (filled at {measured.fill_rate:,.0f} msg/s) in "
            f"{measured.size / (1 << 20):,.1f} MiB on disk ({measured.size / measured.stored:,.0f} B per message) "
            f"after the graceful stop, which took {measured.stop:.2f} s; "
            f"{measured.rss / (1 << 20):,.0f} MiB resident after the restart"
        )
    print(f"Mosquitto after kill -9: its file from the graceful stop before. {MOSQUITTO_NOTE}")


def _flat(prefix: str, found: Disk | Restart) -> Results:
    flat: Results = {}
    for name, value in vars(found).items():
        if isinstance(value, int | float):
            flat[f"{prefix}_{name}"] = value
        else:
            flat.update({f"{prefix}_{name}_{part}": seconds for part, seconds in vars(value).items()})
    return flat


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes: every part in about a minute")
    sizes = parser.add_argument_group("sizes (default: the issue's; --quick: small ones)")
    sizes.add_argument("--messages", type=int, help="messages per 1 -> 1 throughput run")
    sizes.add_argument("--fanout-messages", type=int, help="messages per 1 -> N throughput run")
    sizes.add_argument("--subscribers", type=int, help="N, the subscribers of the fan-out runs and of the disk test")
    sizes.add_argument("--runs", type=int, help="throughput runs of each broker; the median is shown")
    sizes.add_argument("--disk-messages", type=int, help="messages stored for the bytes per message")
    sizes.add_argument("--sessions", type=int, help="offline sessions for the restart")
    sizes.add_argument("--stored", type=int, help="messages stored for the restart, spread over the sessions")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated: " + ", ".join(SECTIONS))
    parser.add_argument(
        "--qos",
        type=int,
        choices=(1, 2),
        default=1,
        help="QoS of the throughput runs (2: a QoS 2 delivery to a "
        "durable session waits for the commit of its packet id, bridge/brokers/embedded/aftercommit.py)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if unknown := set(args.only.split(",")) - set(SECTIONS):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    if args.sessions < 2 or args.stored < args.sessions:
        parser.error("--sessions must be at least 2 and --stored at least --sessions")
    return args


def main() -> None:
    args = parse_args()
    results: Results = {}
    print(f"machine: {describe()}")
    with tempfile.TemporaryDirectory(prefix="bench-durable-") as tmp:
        for section, measure in (("throughput", throughput), ("disk", disk), ("restart", restart)):
            if section in args.only.split(","):
                measure(args, Path(tmp), results)
    if args.json:
        Path(args.json).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
