"""mqtt mode under faults, with the bridge as a real process (`python -m bridge run`):

- `kill -9` in the middle of a 20,000-message QoS 1 stream, then a restart: every
  message is stored, none twice (the packet-id ledger gives a redelivered message
  the msgid it had, docs/brokers.md "Message identity");
- a stalled database (SIGSTOP of its Redis): within `request_timeout` the pool is
  down and the bridge acknowledges from its spool (docs/architecture.md#acknowledged-means-kept); what it holds in
  flight stays bounded by the receive maximum, its memory stays under a bound, and
  after SIGCONT everything is stored, once.

Each test has its own Redis (ports 6397/6398, started and stopped here), so the
SIGSTOP and the counts are not disturbed by other tests on the shared one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from support.mqtt import Client
from support.services import ROOT, start_mosquitto, start_redis, stop_redis
from tests.integration.mqtt_support import MOSQUITTO_PORT, external_config

pytestmark = pytest.mark.slow

TOPICS = 10
RULES = 'backend.redis.hook.message.publish.1 = {"topic": "load/#", "action": {"function": "on_message_publish"}}\n'


@pytest.fixture(scope="module")
def mosquitto() -> int:
    start_mosquitto(MOSQUITTO_PORT)
    return MOSQUITTO_PORT


def _own_redis(port: int) -> Iterator[redis_sync.Redis]:
    start_redis(port)
    client = redis_sync.Redis(port=port, protocol=2)
    client.flushall()
    yield client
    client.close()
    stop_redis(port)


@pytest.fixture
def crash_redis() -> Iterator[redis_sync.Redis]:
    yield from _own_redis(6398)


@pytest.fixture
def stall_redis() -> Iterator[redis_sync.Redis]:
    yield from _own_redis(6397)


class BridgeProcess:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    def start(self) -> None:
        log = self.home / f"bridge{len(self.logs)}.log"
        self.logs.append(log)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bridge",
                "run",
                "-c",
                str(self.home / "bridge.conf"),
                "-r",
                str(self.home / "rules"),
            ],
            cwd=ROOT,
            stderr=log.open("wb"),
        )

    def rss_mb(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(10)

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs)


@pytest.fixture
def bridge_processes() -> Iterator[Callable[[Path], BridgeProcess]]:
    """Bridge processes, killed at teardown whatever the test did."""
    made: list[BridgeProcess] = []

    def make(home: Path) -> BridgeProcess:
        made.append(BridgeProcess(home))
        return made[-1]

    yield make
    for bridge in made:
        if bridge.proc is not None and bridge.proc.poll() is None:
            bridge.kill(signal.SIGKILL)


def _home(tmp_path: Path, redis_port: int, extra: str) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "load.conf").write_text(RULES)
    (tmp_path / "bridge.conf").write_text(
        "node.name = faults@127.0.0.1\n"
        f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
        "log.level = info\n" + external_config(tmp_path, extra=extra)
    )
    return tmp_path


def _stored(db: redis_sync.Redis) -> int:
    return sum(int(db.zcard(f"mqtt:msg:load/{t}")) for t in range(TOPICS))


async def _wait_stored(db: redis_sync.Redis, count: int, timeout: float, bridge: BridgeProcess) -> None:
    deadline = time.monotonic() + timeout
    while (n := _stored(db)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{n} of {count} stored after {timeout}s\n{bridge.log_text()[-3000:]}")
        await asyncio.sleep(0.1)


async def _wait_subscribed(home: Path, bridge: BridgeProcess) -> None:
    deadline = time.monotonic() + 20
    while "subscribed to" not in bridge.log_text() or "connected to the broker" not in bridge.log_text():
        assert time.monotonic() < deadline, bridge.log_text()
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # SUBACK


def _check_each_once(db: redis_sync.Redis, total: int) -> None:
    assert _stored(db) == total
    ids = [m for t in range(TOPICS) for m in db.zrange(f"mqtt:msg:load/{t}", 0, -1)]
    assert len(ids) == len(set(ids)) == total
    pipe = db.pipeline()
    for msgid in ids:
        pipe.hget(b"mqtt:msg:" + msgid, "payload")
    payloads = pipe.execute()
    assert sorted(payloads) == sorted(b"%d" % i for i in range(total))  # every message, and none twice


async def test_kill_9_mid_stream_then_restart_stores_every_message_once(
    mosquitto: int,
    crash_redis: redis_sync.Redis,
    tmp_path: Path,
    paho_clients: Callable[..., Client],
    bridge_processes: Callable[[Path], BridgeProcess],
) -> None:
    total = 20_000
    metrics_port = 9400 + (os.getpid() + 1) % 500
    home = _home(tmp_path, 6398, f"broker.receive_maximum = 1000\nmetrics.listener = 127.0.0.1:{metrics_port}\n")
    bridge = bridge_processes(home)
    bridge.start()
    await _wait_subscribed(home, bridge)
    pub = paho_clients(mosquitto, f"pub-{uuid.uuid4().hex[:6]}")
    pub.paho.max_inflight_messages_set(1000)
    await pub.connect()
    acks = [pub.send(f"load/{i % TOPICS}", b"%d" % i, qos=1) for i in range(total)]
    await _wait_stored(crash_redis, total // 3, 60, bridge)
    # Mid-stream, with messages received and not yet acknowledged for certain: Redis is held
    # (SIGSTOP) until the bridge holds some in flight, well within request_timeout (5 s), and the
    # bridge is killed then. Without the hold the kill may land when everything received was
    # acknowledged already, and no redelivery would be seen.
    redis_pid = int(crash_redis.info("server")["process_id"])
    os.kill(redis_pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 3
        while _inflight(metrics_port) == 0:
            assert time.monotonic() < deadline, "the bridge held nothing in flight"
            await asyncio.sleep(0.01)
        bridge.kill(signal.SIGKILL)
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    killed_at = _stored(crash_redis)
    assert killed_at < total, "the stream ended before the kill; the test proves nothing"
    async with asyncio.timeout(120):
        await asyncio.gather(*acks)  # Mosquitto keeps the rest for the bridge's session
    bridge.start()
    await _wait_stored(crash_redis, total, 120, bridge)
    await asyncio.sleep(1.0)  # anything stored twice would show up now
    _check_each_once(crash_redis, total)
    bridge.kill(signal.SIGTERM)
    # The restart did get messages committed before the kill again, and gave them their old ids.
    assert "redelivered message recognised" in bridge.log_text()


async def test_stalled_database_spools_acks_and_memory_stays_bounded(
    mosquitto: int,
    stall_redis: redis_sync.Redis,
    tmp_path: Path,
    paho_clients: Callable[..., Client],
    bridge_processes: Callable[[Path], BridgeProcess],
) -> None:
    receive_maximum = 200
    metrics_port = 9400 + os.getpid() % 500
    home = _home(
        tmp_path,
        6397,
        f"broker.receive_maximum = {receive_maximum}\nmetrics.listener = 127.0.0.1:{metrics_port}\n",
    )
    bridge = bridge_processes(home)
    bridge.start()
    await _wait_subscribed(home, bridge)
    pub = paho_clients(mosquitto, f"pub-{uuid.uuid4().hex[:6]}")
    pub.paho.max_inflight_messages_set(1000)
    await pub.connect()
    first = 2000
    await asyncio.gather(*[pub.send(f"load/{i % TOPICS}", b"%d" % i, qos=1) for i in range(first)])
    await _wait_stored(stall_redis, first, 60, bridge)
    rss_before = bridge.rss_mb()

    redis_pid = int(stall_redis.info("server")["process_id"])
    os.kill(redis_pid, signal.SIGSTOP)
    try:
        stalled = 30_000
        payload_pad = b"x" * 200  # 6 MB of messages published while the database is stalled
        acks = [
            pub.send(f"load/{i % TOPICS}", b"%d" % i + b"|" + payload_pad, qos=1) for i in range(first, first + stalled)
        ]
        # Within request_timeout the pool is down: every message goes to the spool, which
        # acknowledges it, so the bridge takes the whole stream while Redis is still stopped,
        # holding at most the receive maximum in flight (plus what one socket read had already
        # brought in: gmqtt reads 64 KiB at a time, about 440 of these 200-byte messages).
        peak = 0
        deadline = time.monotonic() + 90
        while _metric(metrics_port, "hookbridge_rule_spooled_total") < stalled or _inflight(metrics_port):
            assert time.monotonic() < deadline, (peak, bridge.log_text()[-3000:])
            peak = max(peak, _inflight(metrics_port))
            await asyncio.sleep(0.02)
        assert peak <= receive_maximum + 65_536 // 150, peak
        async with asyncio.timeout(60):
            await asyncio.gather(*acks)
        assert _healthz_status(metrics_port) == 503  # the pool is reported down while stalled
        rss_stalled = bridge.rss_mb()
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    assert rss_stalled < rss_before + 40, (rss_before, rss_stalled)  # stated bound: +40 MB for 6 MB spooled
    await _wait_stored(stall_redis, first + stalled, 120, bridge)
    await asyncio.sleep(0.5)
    assert _stored(stall_redis) == first + stalled  # every spooled message written, none twice
    assert _inflight(metrics_port) == 0
    assert _healthz_status(metrics_port) == 200
    bridge.kill(signal.SIGTERM)


def _metric(port: int, name: str) -> int:
    """The sum of a metric's series."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    return sum(
        int(float(line.split()[-1])) for line in lines if line.startswith(name + "{") or line.startswith(name + " ")
    )


def _healthz_status(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _inflight(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("hookbridge_broker_inflight"):
                return int(float(line.split()[-1]))
    raise AssertionError("no hookbridge_broker_inflight gauge")
