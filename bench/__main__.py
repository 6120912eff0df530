"""The benchmark suite, one command: every backend through the runner against its ceiling and its
naive way, then the embedded broker against Mosquitto, then the MQTT codec; a summary table at
the end.

    .venv/bin/python -m bench [--messages 50000] [--runs 5] [--only redis,pgsql,mongo,cassa,broker,codec]

Each benchmark runs in its own process (so one's memory does not count against another's) and
starts the server it needs through scripts/ (Redis 6393, PostgreSQL 5439, FerretDB 27018,
Cassandra 9042). The full suite takes 15-25 minutes on 2 cores; `--messages 20000 --runs 3`
about a third of that. Every figure it prints is measured in this run, on this machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.broker_bench import TARGET_CPU_FACTOR, TARGET_KB_PER_CONNECTION, TARGETS
from bench.machine import describe, table

BACKENDS = ("redis", "pgsql", "mongo", "cassa")


def run(module: str, arguments: list[str], result: Path) -> dict[str, float] | None:
    print(f"\n=== python -m bench.{module} {' '.join(arguments)}", flush=True)
    done = subprocess.run([sys.executable, "-m", f"bench.{module}", *arguments, "--json", str(result)], check=False)
    if done.returncode != 0 or not result.exists():
        print(f"bench.{module} failed (exit {done.returncode})", file=sys.stderr)
        return None
    loaded: dict[str, float] = json.loads(result.read_text())
    return loaded


def verdict(value: float, target: float, higher: bool = True) -> str:
    return "met" if (value >= target if higher else value <= target) else "NOT met"


def broker_summary(broker: dict[str, float]) -> str:
    share, persisted, kib = broker["no_rules_share"], broker["persisted_share"], broker["no_rules_kb_per_connection"]
    bare, with_rules = TARGETS["no_rules"], TARGETS["persisted"]
    cpu_factor = broker["persisted_cpu_factor"]
    return (
        f"\nembedded broker against Mosquitto (QoS 1, C clients, 1 -> 1): {broker['no_rules_msgs']:,.0f} msg/s "
        f"with no rules, {share:.0%} of Mosquitto's {broker['mosquitto_msgs']:,.0f} ({verdict(share, bare)}; "
        f"target >= {bare:.0%}); {broker['persisted_msgs']:,.0f} with rules/redis.conf into Redis, "
        f"{persisted:.0%} ({verdict(persisted, with_rules)}; target >= {with_rules:.0%}), broker CPU "
        f"{cpu_factor:.2f}x Mosquitto's per message ("
        f"{verdict(cpu_factor, TARGET_CPU_FACTOR, higher=False)}; target <= {TARGET_CPU_FACTOR:g}x); "
        f"idle connections: {kib:.1f} KiB each ({verdict(kib, TARGET_KB_PER_CONNECTION, higher=False)}; target <= "
        f"{TARGET_KB_PER_CONNECTION}; Mosquitto {broker['mosquitto_kb_per_connection']:.1f}), "
        f"{broker['no_rules_connect_rate']:,.0f} connections/s (Mosquitto {broker['mosquitto_connect_rate']:,.0f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default=",".join((*BACKENDS, "broker", "codec")))
    args = parser.parse_args()
    chosen = args.only.split(",")
    rows, failed = [], []
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        for db in (b for b in BACKENDS if b in chosen):
            found = run(f"{db}_bench", ["--messages", str(args.messages), "--runs", str(args.runs)], Path(tmp) / db)
            if found is None:
                failed.append(db)
                continue
            share, factor = found["runner"] / found["ceiling"], found["runner"] / found["naive"]
            rows.append(
                (
                    db,
                    f"{found['runner']:,.0f}",
                    f"{found['ceiling']:,.0f} ({found['ceiling_name']})",
                    f"{share:.0%} ({verdict(share, 0.5)})",
                    f"{found['naive']:,.0f}",
                    f"{factor:.1f}x ({verdict(factor, 10)})",
                    f"{found['p50_ms']:.1f} / {found['p99_ms']:.1f}",
                    f"{found['peak_mib']:.0f}",
                )
            )
        broker = None
        if "broker" in chosen:
            # the broker benchmark's figures (docs/benchmarks.md#embedded-broker-against-mosquitto):
            # 20,000 messages and 10,000 idle clients per run, at most 3 runs
            broker = run("broker_bench", ["--runs", str(min(args.runs, 3))], Path(tmp) / "broker")
            if broker is None:
                failed.append("broker")
        codec = None
        if "codec" in chosen:
            codec = run("codec_bench", ["--runs", str(min(args.runs, 3))], Path(tmp) / "codec")
            if codec is None:
                failed.append("codec")
    print(f"\n=== summary\nmachine: {describe()}\n")
    header = (
        "backend",
        "runner msg/s",
        "ceiling msg/s",
        "runner/ceiling",
        "naive msg/s",
        "runner/naive",
        "p50 / p99 ms",
        "peak MiB",
    )
    print(table(rows, header))
    if broker is not None:
        print(broker_summary(broker))
    if codec is not None:
        print(
            f"\nMQTT codec (bridge/brokers/embedded/codec/), CPU us per QoS 1 PUBLISH decoded: "
            f"{codec['decode_311']:.2f} (3.1.1), "
            f"{codec['decode_5']:.2f} (5.0) (target: under 5 us)"
        )
    print(
        "\np50 / p99: from handing an event to the bridge to its write committed, fed at half the runner's throughput"
    )
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
