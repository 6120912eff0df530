"""What keeping sessions on disk costs in bytes and at a restart: the last two sections of
`bench.durable_bench`, for hookbridge's durable sessions and Mosquitto's `persistence true`.

Both fill a broker through the broker itself, with the sessions offline: they are opened and
left (clean session 0, subscribed at QoS 1), then one raw client publishes the messages at QoS 1
with up to 1,000 unacknowledged (a PUBACK means stored, docs/architecture.md#acknowledged-means-kept).
No faster way in: writing
the store's files directly would measure a store the broker never wrote.

- Disk: `k` sessions of one topic, M messages; the store's bytes per message stored, while the
  broker runs (SQLite's write-ahead log included) and after a graceful stop. Messages stored is
  the broker's own count (/metrics, STORED_METRIC) where it has one, else the messages published.
- Restart: S sessions of one topic each, M messages spread evenly over them; a graceful stop
  (SIGTERM), then a start timed from the process start to the listener accepting, one session's
  CONNACK with session present 1, its first message, and all its messages; then `kill -9` and
  the same again with another session.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.broker_servers import HOST, Launch, Server, hookbridge_launch, mosquitto_launch
from bench.broker_servers import mosquitto_version as version
from bench.mqtt_clients import Reconnect, connect_when_up, open_sessions, publish, reconnect

PAYLOAD = b"x" * 100
TOPIC = "bench/d"
# Rows in the durable store's message log (bridge/brokers/embedded/: grep the name if it moved).
STORED_METRIC = "hookbridge_broker_durable_messages"


@dataclass(frozen=True)
class Store:
    """A broker that keeps sessions on disk, and where (relative to its workdir)."""

    key: str
    name: str
    launch: Callable[[Path], Launch]
    state: str
    """the file or directory holding its sessions and messages"""


def brokers() -> list[Store]:
    """Mosquitto with persistence (the baseline), the embedded broker with durable sessions off
    (sessions in memory only) and on."""
    return [
        Store("mosquitto", f"Mosquitto {version()}, persistence true", _mosquitto, "mosquitto.db"),
        Store("off", "embedded broker, durable sessions off", hookbridge_launch, "durable"),
        Store("on", "embedded broker, durable sessions on", _durable, "durable"),
    ]


def stores() -> list[Store]:
    """The brokers that keep sessions on disk."""
    return [store for store in brokers() if store.key != "off"]


def _mosquitto(workdir: Path) -> Launch:
    return mosquitto_launch(workdir, persistence=True)


def _durable(workdir: Path) -> Launch:
    return hookbridge_launch(workdir, durable=True, metrics=True)


def disk_bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (0 if it does not exist yet)."""
    if path.is_dir():
        return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())
    return path.stat().st_size if path.exists() else 0


def stored_messages(launch: Launch) -> int | None:
    """The broker's count of messages in its store, where it has /metrics (hookbridge)."""
    if launch.metrics_port is None:
        return None
    with urllib.request.urlopen(f"http://{HOST}:{launch.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():  # `name{labels} value`, one series: the broker's mode
        if line.partition("{")[0].partition(" ")[0] == STORED_METRIC:
            return int(float(line.rsplit(" ", 1)[1]))
    raise RuntimeError(f"{launch.name}: no {STORED_METRIC} in /metrics (renamed? see STORED_METRIC)")


@dataclass(frozen=True)
class Disk:
    stored: int
    running: int
    """bytes while the broker ran, after the last PUBACK"""
    stopped: int
    """bytes after a graceful stop"""


def measure_disk(store: Store, workdir: Path, sessions: int, messages: int) -> Disk:
    launch = store.launch(workdir)
    with launch.run() as server:
        client_ids = [f"bench-disk-{number:05d}" for number in range(sessions)]
        asyncio.run(open_sessions(server.port, client_ids, lambda _: TOPIC))
        asyncio.run(publish(server.port, messages, lambda _: TOPIC, PAYLOAD))
        counted = stored_messages(launch)
        running = disk_bytes(workdir / store.state)
        server.stop()
    stored = messages if counted is None else counted
    if stored <= 0:
        raise RuntimeError(f"{store.name}: {messages} messages published to {sessions} offline sessions, none stored")
    return Disk(stored, running, disk_bytes(workdir / store.state))


@dataclass(frozen=True)
class Restart:
    empty_start: float
    """a fresh broker: process start to a clean session's CONNACK"""
    fill_rate: float
    """messages per second while filling the store"""
    stored: int
    stop: float
    """seconds of the graceful stop"""
    graceful: Reconnect
    killed: Reconnect
    rss: int
    """resident bytes after the graceful restart gave one session its messages"""
    size: int
    """bytes of the store after the graceful stop"""


def measure_restart(store: Store, workdir: Path, sessions: int, messages: int) -> Restart:
    per_session = messages // sessions
    topics = [f"bench/r/{number}" for number in range(sessions)]
    client_ids = [f"bench-r-{number:05d}" for number in range(sessions)]
    launch = store.launch(workdir)
    with launch.run(wait=False) as server:
        empty_start = asyncio.run(_start_time(server))
        asyncio.run(open_sessions(server.port, client_ids, topics.__getitem__))
        started = time.perf_counter()
        asyncio.run(publish(server.port, per_session * sessions, lambda n: topics[n % sessions], PAYLOAD))
        fill_rate = per_session * sessions / (time.perf_counter() - started)
        counted = stored_messages(launch)
        stop = server.stop()
    size = disk_bytes(workdir / store.state)
    with launch.run(wait=False) as server:
        graceful = asyncio.run(reconnect(server.port, client_ids[0], server.started, per_session))
        rss = server.rss()
        server.stop(kill=True)
    with launch.run(wait=False) as server:
        killed = asyncio.run(reconnect(server.port, client_ids[1], server.started, per_session))
    stored = per_session * sessions if counted is None else counted
    return Restart(empty_start, fill_rate, stored, stop, graceful, killed, rss, size)


async def _start_time(server: Server) -> float:
    """Seconds from the process start to a clean session's CONNACK."""
    _, client, _ = await connect_when_up(server.port, "bench-start", clean=True)
    connected = time.perf_counter()
    await client.close()
    return connected - server.started
