"""The embedded broker against Mosquitto, in one run: docs/benchmarks.md#embedded-broker-against-mosquitto.

Throughput: QoS 1, 100 B payloads, one publisher to one subscriber, both Mosquitto's own C
clients. `mosquitto_sub -q 1 -C N+1` subscribes first (to the benchmark topic and to a topic
holding one retained message: its arrival says the subscription is in place, and it is the +1);
then `mosquitto_pub -l -q 1 -M 1000` publishes N lines from its stdin, up to 1,000 unacknowledged
at a time, so acknowledgement latency is not the limit. msg/s = N / the time from the first line
handed to the publisher (once it has connected) to the subscriber's exit. Three brokers, each a
fresh process per run, in rounds so that a busy moment of the machine hits them alike:

- Mosquitto (its own temporary config on a free port; it queues up to 100,000 messages per
  client like the embedded broker, since its default of 1,000 loses messages in this test);
- the embedded broker with no rules (`hookbridge run` with an empty rules directory);
- the embedded broker with the shipped rules/redis.conf into a Redis this script starts through
  scripts/redis.sh on a free port (acknowledgement once kept, docs/architecture.md#acknowledged-means-kept, as shipped).

Idle connections: N raw MQTT 3.1.1 clients (CONNECT without keepalive, wait for CONNACK), opened
from this process with up to --window handshakes at a time: the connect rate, and the resident
memory per connection, i.e. the broker's process tree RSS after minus before, divided by N.
The window stays within the brokers' listen backlog (100, asyncio's default and Mosquitto's): a
larger one overflows it, and a dropped SYN costs the client a second before it retries.

Broker CPU per message: user + system time of the broker's process tree (/proc/<pid>/stat) over
the same span as the rate, divided by N; a busy machine disturbs it less than the rate.
`--python PATH` runs the bridge with that interpreter's installed hookbridge (the compiled wheel:
docs/development.md#the-compiled-build); `HOOKBRIDGE_NO_EXTENSIONS=1` then runs its .py files.

    .venv/bin/python -m bench.broker_bench [--messages 20000] [--clients 10000] [--runs 3] [--skip-idle] [--python PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import selectors
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.broker_servers import (
    CONNACK_ACCEPTED,
    HOST,
    ROOT,
    Server,
    bridge_build,
    connect_packet,
    free_port,
    hookbridge,
    mosquitto,
    use_installed_bridge,
)
from bench.broker_servers import mosquitto_version as version
from bench.machine import describe, table
from bench.mqtt_subscribers import cpu_seconds

TOPIC, READY = "bench/t", "bench/ready"
PAYLOAD = b"x" * 100
INFLIGHT = 1000
# mosquitto_pub -l reads its stdin only once connected; this leaves it the time to connect, so
# the timing starts at its first publish, not at its process start.
PUBLISHER_CONNECT = 0.5
# Idle clients' RSS is read once their handshakes are over and the broker has settled.
SETTLE = 1.0
STALL = 20.0  # seconds without a message arriving before a throughput run counts as failed
# share of Mosquitto's msg/s (docs/benchmarks.md#embedded-broker-against-mosquitto)
TARGETS = {"no_rules": 1.2, "persisted": 0.8}
# broker CPU per message with rules/redis.conf, at most this times Mosquitto's (no persistence)
TARGET_CPU_FACTOR = 2.0
TARGET_KB_PER_CONNECTION = 1.5

Start = Callable[[Path], AbstractContextManager[Server]]


@dataclass
class Row:
    key: str
    name: str
    start: Start


def publish_through(
    server: Server,
    messages: int,
    workdir: Path,
    *,
    subscribers: int = 1,
    persistent: bool = False,
    cpu_us: list[float] | None = None,
    qos: int = 1,
    inflight: int = INFLIGHT,
) -> float:
    """One run: messages per second from mosquitto_pub to `subscribers` mosquitto_sub clients
    through `server` at `qos` (`persistent`: clean session 0, each with a client id of its own). The time
    ends when the last subscriber has all its messages. `cpu_us` gets the broker's CPU time per
    message over the same span (user + system of its process tree, /proc/<pid>/stat)."""
    port = str(server.port)
    subprocess.run(["mosquitto_pub", "-p", port, "-q", "1", "-r", "-t", READY, "-m", "ready"], check=True, timeout=30)
    subs: list[tuple[subprocess.Popen[bytes], Path]] = []
    pub: subprocess.Popen[bytes] | None = None
    try:
        for number in range(subscribers):
            received = workdir / f"received-{number}"
            subs.append((_subscriber(port, f"bench-sub-{number}", messages + 1, persistent, received, qos), received))
        for sub, received in subs:
            _wait_for_output(sub, received)
        pub_command = ["mosquitto_pub", "-p", port, "-q", str(qos), "-i", "bench-pub", "-t", TOPIC, "-l"]
        pub = subprocess.Popen([*pub_command, "-M", str(inflight)], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
        time.sleep(PUBLISHER_CONNECT)
        assert pub.stdin is not None
        feed = threading.Thread(target=_write_and_close, args=(pub.stdin, (PAYLOAD + b"\n") * messages))
        watchdog = threading.Thread(target=_watchdog, args=(pub, subs))
        started, cpu_before = time.perf_counter(), cpu_seconds(server.process.pid)
        feed.start()
        watchdog.start()
        for sub, _ in subs:
            sub.wait()  # no timeout: Popen.wait(timeout) polls, up to 50 ms late
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(server.process.pid) - cpu_before
        feed.join()
        watchdog.join()
        pub.wait(60)
    finally:
        for process in [*(sub for sub, _ in subs), pub]:
            if process is not None:
                process.kill()
                process.wait()
    for _, received in subs:
        lines = received.read_bytes().splitlines()
        arrived = sum(line == PAYLOAD for line in lines)
        if arrived != messages or len(lines) != messages + 1:
            raise RuntimeError(f"{server.name}: {arrived} of {messages} messages arrived ({len(lines)} lines)")
    if cpu_us is not None:
        cpu_us.append(cpu / messages * 1e6)
    return messages / elapsed


def _subscriber(
    port: str, client_id: str, count: int, persistent: bool, received: Path, qos: int = 1
) -> subprocess.Popen[bytes]:
    """mosquitto_sub of TOPIC and READY (whose retained message says it is subscribed), writing
    each payload to `received` and leaving after `count` messages."""
    command = ["mosquitto_sub", "-p", port, "-q", str(qos), "-i", client_id, "-t", TOPIC, "-t", READY]
    command += ["-C", str(count)]
    with received.open("wb") as sink:
        return subprocess.Popen([*command, *(["-c"] if persistent else [])], stdout=sink, stderr=subprocess.DEVNULL)


def _wait_for_output(sub: subprocess.Popen[bytes], received: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while received.stat().st_size == 0:
        if sub.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("mosquitto_sub did not receive the retained message (is it subscribed?)")
        time.sleep(0.01)


def _write_and_close(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError):  # a publisher that died: the watchdog reports it
        stream.write(data)
        stream.close()


def _watchdog(pub: subprocess.Popen[bytes], subs: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
    """Kill the subscribers, which ends the timed wait, if the publisher fails or no message
    arrives for STALL seconds (a broker that lost some: the run then reports how many)."""
    size, last_change = -1, time.monotonic()
    while any(sub.poll() is None for sub, _ in subs):
        if pub.poll() not in (None, 0) or time.monotonic() - last_change > STALL:
            for sub, _ in subs:
                sub.kill()
            return
        if (now := sum(received.stat().st_size for _, received in subs)) != size:
            size, last_change = now, time.monotonic()
        time.sleep(0.5)


async def open_idle_clients(port: int, count: int, window: int) -> tuple[list[socket.socket], float]:
    """`count` connected MQTT clients that then say nothing, and the connections per second."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(window)

    async def one(number: int) -> socket.socket:
        async with gate:
            sock = socket.socket()
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, (HOST, port))
                await loop.sock_sendall(sock, connect_packet(f"idle-{number:06d}"))
                connack = b""
                while len(connack) < len(CONNACK_ACCEPTED):
                    chunk = await loop.sock_recv(sock, len(CONNACK_ACCEPTED) - len(connack))
                    if not chunk:
                        break
                    connack += chunk
                if connack != CONNACK_ACCEPTED:
                    raise RuntimeError(f"client {number}: CONNACK {connack!r}")
            except BaseException:
                sock.close()
                raise
            return sock

    started = time.perf_counter()
    tasks = [asyncio.create_task(one(number)) for number in range(count)]
    done = await asyncio.gather(*tasks, return_exceptions=True)
    elapsed = time.perf_counter() - started
    clients = [sock for sock in done if isinstance(sock, socket.socket)]
    failures = [error for error in done if isinstance(error, BaseException)]
    if failures:
        for sock in clients:
            sock.close()
        raise RuntimeError(f"{len(failures)} of {count} connections failed, the first: {failures[0]!r}")
    return clients, count / elapsed


def still_open(clients: list[socket.socket]) -> int:
    """How many of the idle connections the broker has neither closed nor written to."""
    with selectors.DefaultSelector() as selector:
        for sock in clients:
            selector.register(sock, selectors.EVENT_READ)
        return len(clients) - len(selector.select(timeout=0))


def idle_connections(server: Server, count: int, window: int) -> tuple[float, float]:
    """One run: (connections per second, resident bytes per connection) for `server`."""
    time.sleep(SETTLE)
    before = server.rss()
    clients, rate = asyncio.run(open_idle_clients(server.port, count, window))
    try:
        time.sleep(SETTLE)
        after = server.rss()
        if (open_now := still_open(clients)) != count:
            raise RuntimeError(f"{server.name} closed {count - open_now} of {count} idle connections")
    finally:
        for sock in clients:
            sock.close()
    return rate, (after - before) / count


def raise_fd_limit(clients: int) -> None:
    """Enough file descriptors for this process's clients, and for the brokers it starts (they
    inherit the limit): a socket per client on both sides, plus a margin for the rest."""
    needed = clients + 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SystemExit(f"--clients {clients} needs {needed} file descriptors; the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def limit_setting(clients: int) -> int | None:
    """broker.max_connections above the idle clients, where this version of the bridge has it."""
    from bridge.conf.schema import global_settings

    # Builds before the broker's limits have no such setting, and no limit to raise.
    return clients + 100 if "broker.max_connections" in global_settings() else None


def rows(args: argparse.Namespace, redis_port: int) -> list[Row]:
    limit = limit_setting(args.clients)
    return [
        Row("mosquitto", f"Mosquitto {version()}", mosquitto),
        Row("no_rules", "embedded broker, no rules", lambda d: hookbridge(d, max_connections=limit)),
        Row(
            "persisted",
            "embedded broker + rules/redis.conf into Redis",
            lambda d: hookbridge(d, redis_port=redis_port, max_connections=limit),
        ),
    ]


def measure(args: argparse.Namespace, workdir: Path, redis_port: int) -> dict[str, float]:
    configurations = rows(args, redis_port)
    rates: dict[str, list[float]] = {row.key: [] for row in configurations}
    cpu: dict[str, list[float]] = {row.key: [] for row in configurations}
    for run in range(args.runs):  # rounds of all three, so a busy moment of the machine hits them alike
        for row in configurations:
            if row.key == "persisted":
                subprocess.run(["redis-cli", "-p", str(redis_port), "flushall"], check=True, capture_output=True)
            with row.start(workdir / f"{row.key}-{run}") as server:
                rates[row.key].append(publish_through(server, args.messages, workdir, cpu_us=cpu[row.key]))
    connections: dict[str, list[tuple[float, float]]] = {"mosquitto": [], "no_rules": []}
    for run in range(0 if args.skip_idle else args.runs):
        for row in (r for r in configurations if r.key in connections):
            with row.start(workdir / f"{row.key}-idle-{run}") as server:
                connections[row.key].append(idle_connections(server, args.clients, args.window))
    return report(args, configurations, rates, connections, cpu)


def report(
    args: argparse.Namespace,
    configurations: list[Row],
    rates: dict[str, list[float]],
    connections: dict[str, list[tuple[float, float]]],
    cpu: dict[str, list[float]],
) -> dict[str, float]:
    medians = {key: statistics.median(values) for key, values in rates.items()}
    results = {f"{key}_msgs": value for key, value in medians.items()}
    rows_out: list[tuple[str, ...]] = []
    for row in configurations:
        share = medians[row.key] / medians["mosquitto"]
        results[f"{row.key}_share"] = share
        target = (
            f" (target >= {TARGETS[row.key]:.0%}: {_verdict(share >= TARGETS[row.key])})" if row.key in TARGETS else ""
        )
        runs = ", ".join(f"{r:,.0f}" for r in rates[row.key])
        results[f"{row.key}_cpu_us"] = cpu_us = statistics.median(cpu[row.key])
        cpu_text = f"{cpu_us:.1f}"
        if row.key == "persisted":
            factor = cpu_us / statistics.median(cpu["mosquitto"])
            met = _verdict(factor <= TARGET_CPU_FACTOR)
            cpu_text += f" ({factor:.2f}x Mosquitto's; target <= {TARGET_CPU_FACTOR:g}x: {met})"
            results["persisted_cpu_factor"] = factor
        rows_out.append((row.name, f"{medians[row.key]:,.0f}", f"{share:.0%}{target}", cpu_text, runs))
    print(f"machine: {describe()}")
    print(f"hookbridge: {bridge_build()}")
    print(
        f"\nQoS 1, mosquitto_pub -l -M {INFLIGHT} -> mosquitto_sub, 1 -> 1, {len(PAYLOAD)} B payloads, "
        f"{args.messages} messages per run, median of {args.runs} runs\n"
    )
    print(table(rows_out, ("broker", "median msg/s", "of Mosquitto", "broker CPU us/msg", "runs")))
    if args.skip_idle:
        return results
    conn_rows: list[tuple[str, ...]] = []
    for row in (r for r in configurations if r.key in connections):
        rate = statistics.median(rate for rate, _ in connections[row.key])
        kb = statistics.median(size for _, size in connections[row.key]) / 1024
        results[f"{row.key}_connect_rate"], results[f"{row.key}_kb_per_connection"] = rate, kb
        target = f" (target <= {TARGET_KB_PER_CONNECTION}: {_verdict(kb <= TARGET_KB_PER_CONNECTION)})"
        conn_rows.append((row.name, f"{rate:,.0f}", f"{kb:.1f}{target if row.key != 'mosquitto' else ''}"))
    print(
        f"\n{args.clients} idle MQTT 3.1.1 clients (no keepalive), up to {args.window} handshakes at a time, "
        f"median of {args.runs} runs; RSS summed over the broker's process tree\n"
    )
    print(table(conn_rows, ("broker", "connections/s", "RSS KiB per connection")))
    return results


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000, help="messages per throughput run")
    parser.add_argument("--clients", type=int, default=10_000, help="idle connections per run")
    parser.add_argument("--window", type=int, default=100, help="connection handshakes in progress at a time")
    parser.add_argument("--runs", type=int, default=3, help="runs of each row; the median is shown")
    parser.add_argument("--json", help="also write the results to this file (the bench suite reads it)")
    parser.add_argument(
        "--python",
        help="run the bridge with this interpreter's installed hookbridge (e.g. a virtualenv with the compiled "
        "wheel: docs/development.md#the-compiled-build) instead of the checkout's code",
    )
    parser.add_argument("--skip-idle", action="store_true", help="measure throughput only, not idle connections")
    args = parser.parse_args()
    if args.python:
        use_installed_bridge(args.python)
    raise_fd_limit(args.clients)
    redis_port = free_port()
    subprocess.run(["bash", "scripts/redis.sh", str(redis_port)], check=True, capture_output=True, cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
            results = measure(args, Path(tmp), redis_port)
    finally:
        subprocess.run(
            ["bash", "scripts/redis.sh", str(redis_port), "stop"], check=False, capture_output=True, cwd=ROOT
        )
        shutil.rmtree(ROOT / ".run" / f"redis-{redis_port}", ignore_errors=True)  # a new port each run: no reuse
    if args.json:
        Path(args.json).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
