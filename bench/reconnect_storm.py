"""A reconnect storm: a whole fleet coming back at once, the embedded broker against Mosquitto in
the same run (docs/benchmarks.md#reconnect-storm).

After a network outage or a broker restart every device reconnects at the same moment. Two
storms, each with and without password authentication, each against a fresh broker process:

- **clean**: --clients devices (clean session) are connected, drop their connections together
  (the outage), and reconnect at once, up to --window handshakes in flight (more than the
  listen backlog: a SYN the backlog drops costs its client a retry). Figure: seconds from the
  first reconnect to the last CONNACK.
- **durable**: --clients persistent sessions (clean session 0), each subscribed at QoS 1 to its
  own `storm/<n>`, are left offline with --queued messages each; the broker is restarted (Mosquitto
  with `persistence true` writes its own db file at the stop and reads it at the start; the
  embedded broker with `broker.durable_sessions = on`), then every device reconnects at once.
  Figures: seconds until the last CONNACK, and until the last device had its whole queue.

Checked on every run, or the run fails: every device got an accepted CONNACK (session present 1
in the durable storm), and every queued message reached its device exactly once, in publish
order (its payload names the device and its number; a PINGREQ after the last one must be
answered with no PUBLISH before the PINGRESP, so a doubled delivery shows up).

Authentication: one user per device in a password file written by `mosquitto_passwd -U`, i.e.
Mosquitto's default hash (`$7$`, PBKDF2-SHA512, 101 iterations), the same file for both brokers
(`password_file`, `broker.auth.password_file`).

    .venv/bin/python -m bench.reconnect_storm [--quick] [--clients 15000] [--window 1000] [--queued 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from bench.broker_bench import limit_setting, raise_fd_limit
from bench.broker_servers import (
    HOST,
    Launch,
    Server,
    bridge_build,
    hookbridge_launch,
    mosquitto_launch,
    mosquitto_version,
    use_installed_bridge,
)
from bench.machine import cpu_ticks, describe, steal_since, table
from bench.mqtt_clients import TIMEOUT, Client, publish
from bench.mqtt_subscribers import cpu_seconds
from bench.storm_device import StormDevice, connect_packet, reconnect, source_address

FULL = {"clients": 15_000, "window": 1_000, "queued": 10}
QUICK = {"clients": 200, "window": 50, "queued": 3}
# Handshakes in flight while the fleet is set up (untimed): within the listen backlog.
SETUP_WINDOW = 100
# A handshake this long waited for a SYN sent again (Linux: the first retry after 1 s).
RETRIED = 1.0
KINDS = ("clean", "durable")
T = TypeVar("T")


def run_fleet(fleet: Coroutine[Any, Any, T]) -> T:
    """Run the fleet's clients on uvloop where it is installed (the `fast` extra, as the bridge
    runs): on asyncio's own loop 15,000 clients kept this process busier than either broker, so
    the storm timed the clients (CPU seconds of both sides are printed with every row)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(fleet)
    return uvloop.run(fleet)


def client_id(number: int) -> str:
    return f"storm-{number:06d}"


def topic_of(number: int) -> str:
    return f"storm/{number}"


def payload_of(number: int, sequence: int) -> bytes:
    """What identifies a queued message: its device and its place in the device's queue."""
    return f"{number}:{sequence}".encode()


@dataclass(frozen=True)
class Login:
    """Who the devices log in as: nobody, or user `storm-<n>` with its own password."""

    auth: bool

    def username(self, number: int) -> str | None:
        return client_id(number) if self.auth else None

    def password(self, number: int) -> bytes | None:
        return f"secret-{number}".encode() if self.auth else None

    async def connect(self, port: int, number: int, *, clean: bool) -> tuple[Client, bool, float]:
        """A connected device, its CONNACK's session present flag, and the seconds its TCP
        handshake took (a second or more: its SYN was dropped and sent again)."""
        began = time.perf_counter()
        reader, writer = await asyncio.open_connection(HOST, port)
        tcp = time.perf_counter() - began
        client = Client(reader, writer)
        try:
            connack = await client.handshake(
                client_id(number), clean=clean, username=self.username(number), password=self.password(number)
            )
        except BaseException:
            writer.close()
            raise
        return client, connack.session_present, tcp


def password_file(path: Path, count: int) -> Path:
    """Users `storm-<n>` for `count` devices, hashed by mosquitto_passwd as Mosquitto's users are."""
    login = Login(auth=True)
    path.write_text("".join(f"{login.username(n)}:{login.password(n).decode()}\n" for n in range(count)))  # type: ignore[union-attr]
    subprocess.run(["mosquitto_passwd", "-U", str(path)], check=True, timeout=600)
    return path


@dataclass(frozen=True)
class Storm:
    """One storm's figures, in seconds from the first reconnect."""

    clients: int
    connected: float
    """the last CONNACK arrived"""
    complete: float
    """the last device had its whole queue (the durable storm; else = connected)"""
    handshake_median: float
    handshake_p99: float
    """one device's TCP connect to its CONNACK"""
    retried: int
    """TCP handshakes that took RETRIED seconds or more: their SYN was dropped (a full listen
    queue) and sent again by the client's kernel a second later (then 3 s...), which is what
    spreads a storm's last CONNACK"""
    delivered: int
    """queued messages delivered, each checked to be its device's, once and in order"""
    rss: int
    """the broker's resident bytes with the whole fleet connected"""
    broker_cpu: float
    """CPU seconds the broker process spent on the storm"""
    bench_cpu: float
    """CPU seconds this process (the fleet's clients) spent on it: on 2 cores the two share the
    machine, and a broker that is idle while the storm lasts is waiting for retried SYNs"""
    restart: float = 0.0
    """the durable storm: seconds from the restarted broker's launch until it answered a CONNECT
    (it had read its store back: Mosquitto its whole db file, the embedded broker its sessions and,
    within broker.durable_preload, their queues)"""


async def open_fleet(port: int, count: int, login: Login, *, clean: bool) -> list[Client]:
    """`count` devices connected; persistent ones (not `clean`) subscribed to their topic."""
    gate = asyncio.Semaphore(SETUP_WINDOW)

    async def one(number: int) -> Client:
        async with gate:
            client, _, _ = await login.connect(port, number, clean=clean)
            if not clean:
                await client.subscribe(topic_of(number))
            return client

    return list(await asyncio.gather(*(one(number) for number in range(count))))


async def close_all(clients: list[Client]) -> None:
    await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)


async def storm(server: Server, count: int, window: int, login: Login, *, durable: bool, queued: int) -> Storm:
    """Every device reconnects at once, up to `window` handshakes in flight; the run fails unless
    every one is connected (and, durable, got its session and its whole queue). The devices are
    bench/storm_device.py's, cheaper for this process than the general client, so that the storm
    times the broker rather than the bench."""
    gate = asyncio.Semaphore(window)
    handshakes: list[float] = []
    tcp_handshakes: list[float] = []  # the TCP part of each
    connects = [
        connect_packet(client_id(n), clean=not durable, username=login.username(n), password=login.password(n))
        for n in range(count)
    ]
    broker_cpu, bench_cpu = cpu_seconds(server.process.pid), time.process_time()
    started = time.perf_counter()

    async def one(number: int) -> tuple[StormDevice, float, float, int]:
        expected = None
        if durable:
            expected = (topic_of(number).encode(), [payload_of(number, sequence) for sequence in range(queued)])
        async with gate:
            began = time.perf_counter()
            device, tcp = await reconnect(
                server.port, client_id(number), connects[number], expected, source_address(number)
            )
            connected = time.perf_counter()
        handshakes.append(connected - began)
        tcp_handshakes.append(tcp)
        taken = 0
        try:
            if durable and not device.connack.result():
                raise RuntimeError(f"{client_id(number)}: session present 0 after the restart (its session was lost)")
            if durable:
                async with asyncio.timeout(TIMEOUT):
                    taken = await device.done
        except BaseException:
            await device.close()
            raise
        return device, connected - started, time.perf_counter() - started, taken

    done = await asyncio.gather(*(one(number) for number in range(count)), return_exceptions=True)
    broker_cpu, bench_cpu = cpu_seconds(server.process.pid) - broker_cpu, time.process_time() - bench_cpu
    devices = [result[0] for result in done if isinstance(result, tuple)]
    rss = server.rss()
    await asyncio.gather(*(device.close() for device in devices))
    failures = [result for result in done if isinstance(result, BaseException)]
    if failures:
        raise RuntimeError(f"{server.name}: {len(failures)} of {count} devices failed, the first: {failures[0]!r}")
    times = [result for result in done if isinstance(result, tuple)]
    handshakes.sort()
    return Storm(
        clients=count,
        connected=max(connected for _, connected, _, _ in times),
        complete=max(complete for _, _, complete, _ in times),
        handshake_median=statistics.median(handshakes),
        handshake_p99=handshakes[min(len(handshakes) - 1, int(len(handshakes) * 0.99))],
        retried=sum(seconds >= RETRIED for seconds in tcp_handshakes),
        delivered=sum(taken for _, _, _, taken in times),
        rss=rss,
        broker_cpu=broker_cpu,
        bench_cpu=bench_cpu,
    )


def clean_storm(launch: Launch, args: argparse.Namespace, login: Login) -> Storm:
    """The fleet connected, dropped at once (the outage), and back at once."""

    async def run(server: Server) -> Storm:
        fleet = await open_fleet(server.port, args.clients, login, clean=True)
        for client in fleet:
            client.writer.transport.abort()  # the outage: gone without a DISCONNECT
        return await storm(server, args.clients, args.window, login, durable=False, queued=0)

    with launch.run() as server:
        return run_fleet(run(server))


def durable_storm(launch: Launch, args: argparse.Namespace, login: Login) -> Storm:
    """Persistent sessions offline with their queues, the broker restarted, the fleet back at once."""
    with launch.run() as server:
        run_fleet(_offline_sessions(server, args, login))
        server.stop()  # SIGTERM: Mosquitto writes its db file now
    with launch.run() as server:
        ready = time.perf_counter() - server.started
        found = run_fleet(storm(server, args.clients, args.window, login, durable=True, queued=args.queued))
        return replace(found, restart=ready)


async def _offline_sessions(server: Server, args: argparse.Namespace, login: Login) -> None:
    """Every device's persistent session subscribed, then offline (DISCONNECT), with its queue."""
    await close_all(await open_fleet(server.port, args.clients, login, clean=False))
    await _fill(server, args)


async def _fill(server: Server, args: argparse.Namespace) -> None:
    """--queued messages for each offline session, in rounds: the n-th of every device, then the
    next, as a fleet's commands arrive; each payload names its device and number."""
    count = args.clients
    for sequence in range(args.queued):
        await _publish_round(server.port, count, sequence)


async def _publish_round(port: int, count: int, sequence: int) -> None:
    await publish(port, count, topic_of, lambda n: payload_of(n, sequence), client_id=f"storm-publisher-{sequence}")


Make = Callable[[Path, Path | None, bool], Launch]


def brokers(limit: int | None, variants: list[str]) -> list[tuple[str, Make]]:
    """(name, how to launch it in a workdir with an optional password file, durable or not):
    Mosquitto, the embedded broker, and the embedded broker with each of `variants` (a config
    line) added."""

    def embedded(line: str | None) -> Make:
        return lambda workdir, passwords, durable: hookbridge_launch(
            workdir,
            max_connections=limit,
            durable=durable,
            extra=((f"broker.auth.password_file = {passwords}",) if passwords else ()) + ((line,) if line else ()),
        )

    return [
        (
            f"Mosquitto {mosquitto_version()}",
            lambda workdir, passwords, durable: mosquitto_launch(workdir, persistence=durable, password_file=passwords),
        ),
        ("embedded", embedded(None)),
        *((f"embedded, {line}", embedded(line)) for line in variants),
    ]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help=f"small sizes for a smoke run: {QUICK}")
    parser.add_argument("--clients", type=int, help=f"devices (default {FULL['clients']:,})")
    parser.add_argument("--window", type=int, help=f"handshakes in flight in the storm (default {FULL['window']:,})")
    parser.add_argument("--queued", type=int, help=f"messages queued per durable session (default {FULL['queued']})")
    parser.add_argument("--only", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    parser.add_argument("--auth", default="off,on", help="password authentication: off, on or off,on")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="also run the embedded broker with this config line added (repeatable), e.g. "
        "'broker.listener.tcp.transport = loop'",
    )
    parser.add_argument(
        "--python",
        help="run the bridge with this interpreter's installed hookbridge (e.g. a virtualenv with the compiled "
        "wheel: docs/development.md#the-compiled-build) instead of the checkout's code",
    )
    args = parser.parse_args()
    if args.python:
        use_installed_bridge(args.python)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if unknown := set(args.only.split(",")) - set(KINDS):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    if unknown := set(args.auth.split(",")) - {"off", "on"}:
        parser.error(f"--auth: unknown {', '.join(sorted(unknown))}")
    return args


def main() -> None:
    args = parse_args()
    raise_fd_limit(args.clients + 100)
    limit = limit_setting(args.clients + 100)
    print(f"machine: {describe()}; the bridge: {bridge_build()}", flush=True)
    rows: list[tuple[str, ...]] = []
    results: dict[str, dict[str, float]] = {}
    ticks = cpu_ticks()
    with tempfile.TemporaryDirectory(prefix="bench-storm-") as tmp:
        passwords = password_file(Path(tmp) / "passwd", args.clients) if "on" in args.auth.split(",") else None
        for kind in args.only.split(","):
            for auth in args.auth.split(","):
                login = Login(auth=auth == "on")
                for index, (name, make) in enumerate(brokers(limit, args.variant)):
                    who = name.split()[0].lower().rstrip(",") + (f"-variant{index - 1}" if index > 1 else "")
                    key = f"{kind}-{'auth' if login.auth else 'anon'}-{who}"
                    launch = make(Path(tmp) / key, passwords if login.auth else None, kind == "durable")
                    run = durable_storm if kind == "durable" else clean_storm
                    found = run(launch, args, login)
                    results[key] = asdict(found)
                    rows.append(_row(kind, auth, name, found))
                    print(" | ".join(rows[-1]), flush=True)
    print(
        f"\n{args.clients:,} devices reconnecting at once, up to {args.window:,} handshakes in flight; durable: "
        f"{args.queued} QoS 1 messages queued per session across a broker restart, every one delivered once "
        "(checked). Seconds from the first reconnect.\n"
    )
    header = (
        "storm",
        "passwords",
        "broker",
        "all connected s",
        "all queues s",
        "restart s",
        "connects/s",
        "handshake median / p99 s",
        f"SYN retried (TCP >= {RETRIED:.0f} s)",
        "delivered",
        "RSS MiB",
        "CPU s broker / clients",
    )
    print(table(rows, header))
    print(steal_since(ticks))
    if args.json:
        Path(args.json).write_text(json.dumps(results))


def _row(kind: str, auth: str, name: str, found: Storm) -> tuple[str, ...]:
    return (
        kind,
        auth,
        name,
        f"{found.connected:.2f}",
        f"{found.complete:.2f}" if kind == "durable" else "-",
        f"{found.restart:.2f}" if kind == "durable" else "-",
        f"{found.clients / found.connected:,.0f}",
        f"{found.handshake_median:.3f} / {found.handshake_p99:.3f}",
        f"{found.retried:,}",
        f"{found.delivered:,}" if kind == "durable" else "-",
        f"{found.rss / (1 << 20):,.0f}",
        f"{found.broker_cpu:.1f} / {found.bench_cpu:.1f}",
    )


if __name__ == "__main__":
    main()
