"""Acknowledgement means kept (docs/architecture.md#acknowledged-means-kept), with the bridge in its own process and its own Redis.

A PUBACK from the embedded broker means every rule's action for the message is committed or
spooled: a `kill -9` right after the last PUBACK loses nothing, even while the database is stalled
(SIGSTOP: no error, no answer) and so is only known to be down after `request_timeout`. A full
spool disk (a real 2 MB tmpfs) holds publishers back; once the database is back every lane resumes
by itself and everything acknowledged is stored, in order, once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
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

PORT = 6437  # this module's own Redis: its tests stop, stall and restart it
RULES = 'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}\n'
POOL = f"backend.redis.pool1.server = 127.0.0.1:{PORT}\nbackend.redis.pool1.retry_backoff_max = 200ms\n"


@pytest.fixture
def empty_redis() -> Iterator[redis_sync.Redis]:
    """This module's Redis, up and empty; resumed (if a test stopped it) and shut down at the end."""
    start_redis(PORT)
    client = redis_sync.Redis(port=PORT, protocol=2)
    client.flushall()
    pid = redis_pid()  # asked now: a stopped Redis cannot tell its pid
    yield client
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    stop_redis(PORT)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MB filesystem (tmpfs) at the spool.dir of a BridgeProcess in `tmp_path`; unmounted
    at the end whatever happens."""
    mountpoint = tmp_path / "spool"
    mountpoint.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mountpoint)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def redis_pid() -> int | None:
    try:
        info = redis_sync.Redis(port=PORT, socket_timeout=1).info("server")
    except redis_sync.RedisError:
        return None
    return int(info["process_id"])


class Publisher:
    """A paho QoS 1 publisher that counts the PUBACKs it got."""

    def __init__(self, port: int, clientid: str) -> None:
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=clientid, protocol=paho.MQTTv311)
        self.client.max_inflight_messages_set(1000)
        self.client.max_queued_messages_set(0)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def publish(self, messages: list[tuple[str, bytes]]) -> list[paho.MQTTMessageInfo]:
        return [self.client.publish(topic, payload, qos=1) for topic, payload in messages]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def acked(infos: list[paho.MQTTMessageInfo]) -> int:
    return sum(info.is_published() for info in infos)


def stored(client: redis_sync.Redis, topic: str) -> list[bytes]:
    """The payloads stored for `topic`, in the topic's message order."""
    ids = client.zrange(f"mqtt:msg:{topic}", 0, -1)
    return [client.hget(b"mqtt:msg:" + msgid, "payload") or b"" for msgid in ids]


def message_hashes(client: redis_sync.Redis) -> int:
    return sum(1 for key in client.scan_iter(match=b"mqtt:msg:*", count=1000) if client.type(key) == b"hash")


def test_acknowledged_while_the_database_is_stalled_survives_kill_9(
    tmp_path: Path, empty_redis: redis_sync.Redis, bridges: list[BridgeProcess]
) -> None:
    bridge = BridgeProcess(tmp_path, POOL, RULES)  # request_timeout: the default, 5 s
    bridges.append(bridge.start())
    pid = redis_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # the database hangs: no error, no answer
    sent = [("t/kept", b"message %03d" % n) for n in range(500)]
    publisher = Publisher(bridge.mqtt_port, "kept-pub")
    started = time.monotonic()
    infos = publisher.publish(sent)
    bridge.wait_for(lambda: acked(infos) == len(sent), "every PUBACK while Redis is stopped")
    print(f"500 PUBACKs with Redis stalled after {time.monotonic() - started:.1f} s")
    publisher.close()
    # Acknowledged with the database still stopped: so each one is on disk.
    assert bridge.metric("hookbridge_spooled_actions") == len(sent)
    health = bridge.get("/healthz")
    assert health is not None and health[0] == 503 and '"up": false' in health[1]
    bridge.kill()  # SIGKILL: no shutdown code runs

    # Resumed, Redis may still run the batch the killed bridge had sent: replayed, it is stored once.
    os.kill(pid, signal.SIGCONT)
    bridge.start()
    bridge.wait_for(lambda: len(stored(empty_redis, "t/kept")) >= len(sent), "all 500 stored")
    bridge.wait_for(lambda: bridge.metric("hookbridge_spooled_actions") == 0, "the spool written out")
    assert stored(empty_redis, "t/kept") == [payload for _, payload in sent]  # in order
    assert message_hashes(empty_redis) == len(sent)  # once each


def test_a_full_spool_disk_holds_publishers_back_and_every_lane_resumes(
    tmp_path: Path, small_disk: Path, empty_redis: redis_sync.Redis, bridges: list[BridgeProcess]
) -> None:
    stop_redis(PORT)  # killed: connection refused from the first write
    bridge = BridgeProcess(tmp_path, POOL + "backend.redis.pool1.queue_size = 2000\n", RULES)  # spool: small_disk
    bridges.append(bridge.start())
    topics = [f"t/{n}" for n in range(16)]  # spread over the pool's four lanes
    sent = [(topics[n % len(topics)], b"%05d" % n + b"." * 1024) for n in range(6000)]  # 6 MB for a 2 MB disk
    publisher = Publisher(bridge.mqtt_port, "full-pub")
    infos: list[paho.MQTTMessageInfo] = []
    publishing = threading.Thread(target=lambda: infos.extend(publisher.publish(sent)))
    publishing.start()

    def spool_full() -> bool:
        answer = bridge.get("/healthz")
        return answer is not None and answer[0] == 503 and "spool cannot write" in answer[1]

    bridge.wait_for(spool_full, "/healthz 503: the spool cannot write")
    publishing.join()
    held_back = len(sent) - acked(infos)
    assert held_back > 0, "the spool is full: publishers must wait"
    assert "the spool cannot write" in bridge.log.read_text()

    start_redis(PORT)  # the database is back; the disk stays as small as it was
    bridge.wait_for(lambda: acked(infos) == len(sent), "every PUBACK once Redis is back", timeout=120)
    publisher.close()
    for topic in topics:  # everything acknowledged, in order, once
        bridge.wait_for(lambda t=topic: len(stored(empty_redis, t)) >= len(sent) // len(topics), f"{topic} stored")
        assert stored(empty_redis, topic) == [payload for t, payload in sent if t == topic]
    bridge.wait_for(bridge.ready, "/healthz ready again")

    # Every lane writes again: a new client on every topic reaches Redis.
    late = Publisher(bridge.mqtt_port, "late-pub")
    after = late.publish([(topic, b"after the outage") for topic in topics])
    bridge.wait_for(lambda: acked(after) == len(topics), "PUBACKs of a new client")
    late.close()
    for topic in topics:
        assert stored(empty_redis, topic)[-1] == b"after the outage"
    assert message_hashes(empty_redis) == len(sent) + len(topics)
    assert "Traceback" not in bridge.log.read_text()
