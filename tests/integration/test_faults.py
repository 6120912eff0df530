"""Faults around the spool, with the bridge in its own process: SIGKILL, a torn segment, a full disk,
a stalled database. Each asserts that nothing accepted is lost and nothing is stored twice."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
import redis as redis_sync
from paho.mqtt.enums import CallbackAPIVersion

from support.process import BridgeProcess
from support.services import start_redis, stop_redis

PORT = 6419  # this module's own Redis: its tests stop, stall and restart it
RULES = 'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}\n'
POOL = f"backend.redis.pool1.server = 127.0.0.1:{PORT}\nbackend.redis.pool1.retry_backoff_max = 200ms\n"


@pytest.fixture
def down_redis() -> Iterator[None]:
    """This module's Redis, emptied and stopped: the test starts it when it wants the database back
    (emptied first: once it is up the bridge writes at once, and a FLUSHALL then would race that)."""
    start_redis(PORT)
    redis_sync.Redis(port=PORT).flushall()
    stop_redis(PORT)
    yield
    pid = redis_pid()
    if pid:
        os.kill(pid, signal.SIGCONT)
    stop_redis(PORT)


def redis_up() -> redis_sync.Redis:
    start_redis(PORT)
    return redis_sync.Redis(port=PORT, protocol=2)


def redis_pid() -> int | None:
    try:
        info = redis_sync.Redis(port=PORT, socket_timeout=1).info("server")
    except redis_sync.RedisError:
        return None
    return int(info["process_id"])


def publish(port: int, messages: list[tuple[str, bytes]], clientid: str = "pub") -> None:
    """QoS 1, waiting for every PUBACK (the embedded broker acks once the bridge has the event)."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=clientid, protocol=paho.MQTTv311)
    client.max_inflight_messages_set(1000)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        infos = [client.publish(topic, payload, qos=1) for topic, payload in messages]
        for info in infos:
            info.wait_for_publish(60)
    finally:
        client.disconnect()
        client.loop_stop()


def stored_payloads(client: redis_sync.Redis) -> list[bytes]:
    keys = [key for key in client.scan_iter(match=b"mqtt:msg:*") if client.type(key) == b"hash"]
    return [client.hget(key, "payload") or b"" for key in keys]


def wait_stored(bridge: BridgeProcess, client: redis_sync.Redis, count: int, timeout: float = 60) -> None:
    bridge.wait_for(lambda: len(stored_payloads(client)) >= count, f"{count} stored messages", timeout)


def test_sigkill_while_spooled_then_restart_replays_everything(
    tmp_path: Path, down_redis: None, bridges: list[BridgeProcess]
) -> None:
    bridge = BridgeProcess(tmp_path, POOL, RULES)
    bridges.append(bridge.start())
    sent = [(f"t/{n % 10}", b"message %d" % n) for n in range(2000)]
    publish(bridge.mqtt_port, sent)
    bridge.wait_for(lambda: bridge.metric("hookbridge_spooled_actions") == 2000, "all 2000 actions spooled")
    assert not bridge.ready()  # the pool is down
    bridge.kill()  # SIGKILL: no shutdown code runs

    client = redis_up()
    bridge.start()
    wait_stored(bridge, client, 2000)
    time.sleep(0.5)
    assert sorted(stored_payloads(client)) == sorted(payload for _, payload in sent)  # each once
    assert bridge.metric("hookbridge_spooled_actions") == 0
    bridge.wait_for(bridge.ready, "/healthz ready")


def test_a_torn_segment_keeps_everything_before_the_tear(
    tmp_path: Path, down_redis: None, bridges: list[BridgeProcess]
) -> None:
    bridge = BridgeProcess(tmp_path, POOL + "backend.redis.pool1.max_inflight = 1\n", RULES)  # one lane: one order
    bridges.append(bridge.start())
    sent = [("t/torn", b"message %03d" % n) for n in range(300)]
    publish(bridge.mqtt_port, sent)
    bridge.wait_for(lambda: bridge.metric("hookbridge_spooled_actions") == 300, "all 300 actions spooled")
    bridge.kill()
    segments = sorted((tmp_path / "spool" / "redis.pool1" / "lane-0").glob("*.seg"))
    newest = segments[-1]
    newest.write_bytes(newest.read_bytes()[:-7])  # the last record torn in the middle

    client = redis_up()
    bridge.start()
    wait_stored(bridge, client, 299)
    time.sleep(0.5)
    assert sorted(stored_payloads(client)) == [payload for _, payload in sent[:299]]
    assert bridge.metric("hookbridge_spool_problems_total") == 1
    assert "torn or corrupt record" in bridge.log.read_text()


def test_a_full_spool_disk_is_reported_and_loses_nothing(
    tmp_path: Path, down_redis: None, bridges: list[BridgeProcess]
) -> None:
    bridge = BridgeProcess(tmp_path, POOL, RULES)
    bridges.append(bridge.start(file_size_limit=64 << 10))  # no file of the bridge may pass 64 KB
    sent = [(f"t/{n % 10}", b"%05d" % n + b"." * 200) for n in range(3000)]  # about 200 KB per lane to spool
    # A PUBACK means kept (docs/architecture.md#acknowledged-means-kept): with the spool full and the database down, publishers wait.
    publishing = threading.Thread(target=publish, args=(bridge.mqtt_port, sent))
    publishing.start()

    def spool_full() -> bool:
        health = bridge.get("/healthz")
        return health is not None and health[0] == 503 and "spool cannot write" in health[1]

    bridge.wait_for(spool_full, "/healthz 503: the spool cannot write")
    assert "the spool cannot write" in bridge.log.read_text()
    assert 0 < bridge.metric("hookbridge_spooled_actions") < 3000  # what fitted is on disk
    assert publishing.is_alive()  # the rest is not acknowledged yet

    client = redis_up()
    publishing.join(60)
    assert not publishing.is_alive()
    wait_stored(bridge, client, 3000)
    time.sleep(0.5)
    assert sorted(stored_payloads(client)) == sorted(payload for _, payload in sent)
    bridge.wait_for(bridge.ready, "/healthz ready again once the spool is written")


MEMORY_BOUND = 128 << 20  # bytes of resident memory the bridge must stay under in the next test


def test_a_stalled_database_keeps_memory_bounded(
    tmp_path: Path, down_redis: None, bridges: list[BridgeProcess]
) -> None:
    client = redis_up()  # up and empty before the bridge starts
    bridge = BridgeProcess(tmp_path, POOL + "backend.redis.pool1.queue_size = 2000\n", RULES)
    bridges.append(bridge.start())
    pid = redis_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # the database hangs: no error, no answer
    payload = b"." * 1024
    sent = [(f"t/{n % 50}", b"%05d" % n + payload) for n in range(20_000)]  # 20 MB of payloads
    peak = 0
    for start in range(0, len(sent), 2000):
        publish(bridge.mqtt_port, sent[start : start + 2000], clientid=f"pub{start}")
        peak = max(peak, bridge.rss_bytes())
    assert bridge.metric("hookbridge_spooled_actions") > 15_000  # beyond the memory queues: on disk
    print(f"peak RSS of the bridge: {peak / 2**20:.0f} MiB (bound {MEMORY_BOUND / 2**20:.0f} MiB)")
    assert peak < MEMORY_BOUND, f"peak RSS {peak / 2**20:.0f} MiB"
    os.kill(pid, signal.SIGCONT)
    wait_stored(bridge, client, 20_000, timeout=120)
    time.sleep(0.5)
    assert len(stored_payloads(client)) == 20_000


def test_sigterm_with_the_database_down_spools_and_the_next_start_writes(
    tmp_path: Path, down_redis: None, bridges: list[BridgeProcess]
) -> None:
    bridge = BridgeProcess(tmp_path, POOL, RULES)
    bridges.append(bridge.start())
    sent = [(f"t/{n % 10}", b"message %d" % n) for n in range(500)]
    publish(bridge.mqtt_port, sent)
    started = time.monotonic()
    assert bridge.terminate() == 0
    assert time.monotonic() - started < 20  # drain bounded (10 s), then spooled
    client = redis_up()
    bridge.start()
    wait_stored(bridge, client, 500)
    time.sleep(0.5)
    assert sorted(stored_payloads(client)) == sorted(payload for _, payload in sent)
