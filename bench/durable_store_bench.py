"""Which embedded engine should hold the embedded broker's durable sessions?
(docs/benchmarks.md#choosing-the-durable-store)

SQLite in WAL mode, LMDB and RocksDB (through rocksdict) on the same workload, each set up as
bench/durable_stores.py says (durable against `kill -9`, not against a power cut):

1. Append: N messages (default 200,000; 100 B random payload, topic `devices/<n>/telemetry` for
   1,000 publishers), key = 8-byte big-endian sequence, in batches of 64 with one commit per
   batch (the broker commits once per event-loop step); with each batch, one session position
   row updated per 10 messages of the batch (6 of 1,000 sessions, round robin). The messages go
   into 4 generations of N/4. This runs in a child process that is then killed with SIGKILL
   without closing anything, so every later step also checks that the engine kept every commit.
   Reported: messages/s, µs per message (wall clock, and CPU time of every thread), the p99
   and longest commit (an engine that checkpoints or flushes in the committing thread shows it
   there), and bytes handed to write()/pwrite().
2. Torn tail: 100 random bytes (--torn-bytes) are appended to the engine's log (SQLite's
   `-wal`, RocksDB's newest `*.log`, LMDB's `data.mdb`), as if the process had died in the middle
   of a write.
3. Reopen: open the store and read the newest key, which bounds restart time (and includes the
   engine's crash recovery); the newest key must be N.
4. Scan: every message after a session's position (30% of N), oldest first; the count must be
   exactly N - position.
5. Bulk expiry of the oldest half: generation 0 dropped whole (table / named database / column
   family), generation 1 removed by a range delete (`DELETE ... WHERE seq < ?`, LMDB's cursor
   deleting key by key, RocksDB's `delete_range`); each timed, the oldest key left must be N/2 + 1.
6. Refill: reopen after a clean close and append as many messages as expired (is the freed
   space reused?), then 2,000 commits of one message each (an event-loop step at low load).
7. Bytes on disk (allocated blocks, as `du`) per message after step 1 (what the killed process
   left), per remaining message after step 5 and a clean close, and per message after step 6,
   with what the engine does on its own and nothing more (no VACUUM, no manual compaction).

Each engine runs --runs times (default 3) in a fresh directory; the tables show medians.
`sqlite-thread` is SQLite with its WAL checkpoints moved to a thread, measured beside it.

    .venv/bin/python -m bench.durable_store_bench [--messages 200000] [--runs 3] [--torn-bytes 100]
        [--engines sqlite,sqlite-thread,lmdb,rocksdb] [--json FILE]

LMDB and rocksdict are optional (`pip install -e '.[bench]'`); engines not installed are skipped.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import random
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench.durable_stores import ENGINES, Row, Store
from bench.machine import describe, table

ROOT = Path(__file__).resolve().parents[1]  # where `-m bench.durable_store_bench` imports from
BATCH = 64
PUBLISHERS = 1_000
SESSIONS = 1_000
GENERATIONS = 4
SINGLE_COMMITS = 2_000


def workload(first: int, last: int, per_generation: int) -> list[tuple[int, list[Row], list[tuple[int, int]]]]:
    """(generation, rows, session positions) per commit for sequences first..last; a batch never
    spans two generations."""
    rng = random.Random(16)
    payloads = [rng.randbytes(100) for _ in range(4096)]  # random, so no engine gains by compressing
    commits, session, start = [], 0, first
    while start <= last:
        generation = (start - 1) // per_generation
        end = min(start + BATCH, last + 1, (generation + 1) * per_generation + 1)
        rows = [
            (seq, f"devices/{seq % PUBLISHERS}/telemetry", payloads[seq % len(payloads)]) for seq in range(start, end)
        ]
        positions = []
        for _ in range(len(rows) // 10):
            positions.append((session, end - 1))
            session = (session + 1) % SESSIONS
        commits.append((generation, rows, positions))
        start = end
    return commits


def generation_size(messages: int) -> int:
    return -(-messages // GENERATIONS)


def append(store: Store, commits: list[tuple[int, list[Row], list[tuple[int, int]]]]) -> list[float]:
    """Commit each batch; return each commit's seconds (an engine that flushes or checkpoints in
    the committing thread shows it here, as a pause of the broker's event loop)."""
    times = []
    for generation, rows, positions in commits:
        started = time.perf_counter()
        store.append(generation, rows, positions)
        times.append(time.perf_counter() - started)
    return times


def open_store(engine: str, path: Path) -> Store:
    return ENGINES[engine][0](path)


def child_append(engine: str, path: Path, messages: int) -> None:
    """Append the workload, report the time on stdout, then wait to be killed (nothing closed)."""
    commits = workload(1, messages, generation_size(messages))
    store = open_store(engine, path)
    started, cpu, written = time.perf_counter(), time.process_time(), bytes_written()
    commit_times = sorted(append(store, commits))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    written = bytes_written() - written
    p99, longest = commit_times[len(commit_times) * 99 // 100], commit_times[-1]
    figures = {"seconds": seconds, "cpu": cpu, "written": written, "p99": p99, "max": longest}
    print(json.dumps(figures), flush=True)
    sys.stdin.read()


def bytes_written() -> int:
    """What this process (every thread: RocksDB's flushes too) has handed to write() and pwrite()."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.iterdir() if f.is_file())


def tear_tail(engine: str, path: Path, size: int) -> str:
    """Append random bytes to the file a write in progress would have been extending."""
    if engine.startswith("sqlite"):
        target = path / "store.db-wal"
    elif engine == "lmdb":
        target = path / "data.mdb"
    else:
        target = max(path.glob("*.log"), key=lambda f: int(f.stem))
    with target.open("ab") as file:
        file.write(os.urandom(size))
    return target.name


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def killed_append(engine: str, path: Path, messages: int) -> dict[str, float]:
    """The append in a child process, then SIGKILL: the child's figures."""
    command = [sys.executable, "-m", "bench.durable_store_bench", "--child", engine, str(path), str(messages)]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout is not None
    line = child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait()
    if not line:
        raise RuntimeError(f"{engine}: the append process died (exit {child.returncode})")
    figures: dict[str, float] = json.loads(line)
    return figures


def refill(engine: str, path: Path, messages: int, per_generation: int) -> tuple[float, float]:
    """Append as many messages as expired (is the freed space reused, or do the files grow?), then
    SINGLE_COMMITS commits of one message each, as an event-loop step holds at low load: seconds
    and bytes written per single commit."""
    store = open_store(engine, path)
    last = messages + 2 * per_generation
    append(store, workload(messages + 1, last, per_generation))
    singles = [
        (generation, row)
        for generation, rows, _ in workload(last + 1, last + SINGLE_COMMITS, per_generation)
        for row in rows
    ]
    started, written = time.perf_counter(), bytes_written()
    for generation, row in singles:
        store.append(generation, [row], [(0, row[0])])
    seconds, written = time.perf_counter() - started, bytes_written() - written
    store.close()
    return seconds / len(singles), written / len(singles)


def one_run(engine: str, messages: int, workdir: Path, torn: int) -> tuple[dict[str, float], str]:
    path = workdir / engine
    path.mkdir()
    child_figures = killed_append(engine, path, messages)
    appended, written = child_figures["seconds"], child_figures["written"]
    after_append = disk_bytes(path)
    tear_tail(engine, path, torn)

    started = time.perf_counter()
    store = open_store(engine, path)
    newest = store.newest()
    reopen = time.perf_counter() - started
    check(engine, "newest key after kill -9 and a torn tail", newest, messages)

    position = messages * 3 // 10
    started = time.perf_counter()
    scanned = store.scan(position)
    scan = time.perf_counter() - started
    check(engine, "messages scanned after the position", scanned, messages - position)

    per_generation = generation_size(messages)
    drop = timed(lambda: store.drop_generation(0))
    range_delete = timed(lambda: store.delete_below(1, 2 * per_generation + 1))
    check(engine, "oldest key after expiry", store.oldest(), 2 * per_generation + 1)
    store.close()
    after_expiry = disk_bytes(path)
    files = files_left(sorted(path.iterdir()))

    single_commit, single_written = refill(engine, path, messages, per_generation)
    figures = {
        "append_msgs": messages / appended,
        "append_us": appended / messages * 1e6,
        "append_cpu_us": child_figures["cpu"] / messages * 1e6,
        "scan_msgs": scanned / scan,
        "drop_ms": drop * 1e3,
        "range_delete_ms": range_delete * 1e3,
        "bytes_appended": after_append / messages,
        "bytes_expired": after_expiry / (messages - 2 * per_generation),
        "bytes_refilled": disk_bytes(path) / messages,
        "commit_p99_ms": child_figures["p99"] * 1e3,
        "commit_max_ms": child_figures["max"] * 1e3,
        "single_commit_us": single_commit * 1e6,
        "written_per_msg": written / messages,
        "written_per_single": single_written,
        "reopen_ms": reopen * 1e3,
    }
    return figures, files


def check(engine: str, what: str, found: int, expected: int) -> None:
    if found != expected:
        raise RuntimeError(f"{engine}: {what}: {found}, expected {expected}")


def files_left(files: list[Path]) -> str:
    """Files grouped by name with digits masked (RocksDB numbers its SSTs, logs and manifests)."""
    groups: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for file in files:
        name = re.sub(r"\d+", "N", file.name)
        groups[name] += 1
        sizes[name] += file.stat().st_blocks * 512
    return ", ".join(
        f"{f'{count} x ' if count > 1 else ''}{name} ({sizes[name] / 1e6:.1f} MB)" for name, count in groups.items()
    )


def version(engine: str) -> str:
    if engine.startswith("sqlite"):
        return f"SQLite {sqlite3.sqlite_version}"
    if engine == "lmdb":
        import lmdb

        return f"py-lmdb {importlib.metadata.version('lmdb')} (LMDB {'.'.join(map(str, lmdb.version()))})"
    return f"rocksdict {importlib.metadata.version('rocksdict')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--torn-bytes", type=int, default=100, help="random bytes appended to the log after the kill")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_append(args.child[0], Path(args.child[1]), int(args.child[2]))
        return 0
    wanted = args.engines.split(",")
    missing = [ENGINES[e][1] for e in wanted if importlib.util.find_spec(ENGINES[e][1]) is None]
    engines = [e for e in wanted if importlib.util.find_spec(ENGINES[e][1]) is not None]
    print(f"machine: {describe()}")
    print(f"engines: {'; '.join(dict.fromkeys(version(e) for e in engines))}")
    if missing:
        print(f"not installed, skipped: {', '.join(missing)} (pip install -e '.[bench]')")
    results: dict[str, dict[str, float]] = {}
    leaves: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="durable-store-bench-") as tmp:
        for engine in engines:
            runs = []
            for run in range(args.runs):
                workdir = Path(tmp) / f"{engine}-{run}"
                workdir.mkdir()
                figures, files = one_run(engine, args.messages, workdir, args.torn_bytes)
                runs.append(figures)
                leaves[engine] = files
            results[engine] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(report(results, leaves, args.messages, args.runs, args.torn_bytes))
    if args.json:
        args.json.write_text(json.dumps(results))
    return 0


def report(results: dict[str, dict[str, float]], leaves: dict[str, str], messages: int, runs: int, torn: int) -> str:
    quarter = generation_size(messages)
    time_header = (
        "engine",
        "append msg/s",
        "us/msg",
        "CPU us/msg",
        f"commit of {BATCH} p99 / max ms",
        "1-msg commit us",
        "scan msg/s",
        f"drop gen ({quarter:,}) ms",
        f"range delete ({quarter:,}) ms",
        "reopen ms",
    )
    time_rows: list[tuple[str, ...]] = [
        (
            ENGINES[engine][0].name,
            f"{f['append_msgs']:,.0f}",
            f"{f['append_us']:.1f}",
            f"{f['append_cpu_us']:.1f}",
            f"{f['commit_p99_ms']:.2f} / {f['commit_max_ms']:.1f}",
            f"{f['single_commit_us']:.1f}",
            f"{f['scan_msgs']:,.0f}",
            f"{f['drop_ms']:.1f}",
            f"{f['range_delete_ms']:.1f}",
            f"{f['reopen_ms']:.1f}",
        )
        for engine, f in results.items()
    ]
    space_header = (
        "engine",
        "written B/msg",
        "written B/1-msg commit",
        "disk B/msg appended",
        "after expiry",
        "refilled",
    )
    space_rows: list[tuple[str, ...]] = [
        (
            ENGINES[engine][0].name,
            f"{f['written_per_msg']:.0f}",
            f"{f['written_per_single']:,.0f}",
            f"{f['bytes_appended']:.0f}",
            f"{f['bytes_expired']:.0f}",
            f"{f['bytes_refilled']:.0f}",
        )
        for engine, f in results.items()
    ]
    lines = [
        f"\n{messages:,} messages (100 B random payload, 1,000 topics), batches of {BATCH} with one commit each, "
        f"{GENERATIONS} generations; append in a process killed with SIGKILL, then {torn:,} random bytes "
        f"appended to the log; median of {runs} runs\n",
        table(time_rows, time_header),
        "\nwritten: bytes handed to write()/pwrite() by the process (every thread) per message; disk: allocated "
        "bytes per message stored, after the append (what the killed process left), after expiring the oldest "
        "half (per message left), and after appending as many again (per message stored)\n",
        table(space_rows, space_header),
        "\nfiles left after expiry and a clean close:",
        *(f"- {ENGINES[engine][0].name}: {files}" for engine, files in leaves.items()),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
