"""`hookbridge run --workers 2` in mqtt mode against Debian's Mosquitto, into the test Redis.

The supervisor and its workers are real processes; publishers are `mosquitto_pub` (QoS 1). What is
checked is what Redis holds (every message once) and what the supervisor serves.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as paho
import pytest
import redis as redis_sync
from paho.mqtt.enums import CallbackAPIVersion

from support.mqtt import paho_connect_blocking
from support.process import BridgeProcess
from support.services import start_mosquitto
from tests.integration.mqtt_support import MOSQUITTO_PORT, external_config

RULES = 'backend.redis.hook.message.publish.1 = {"topic": "wk/#", "action": {"function": "on_message_publish"}}\n'
RELOADED = 'backend.redis.hook.message.publish.2 = {"topic": "wk/#", "action": {"commands": ["SADD hb:reloaded ${payload}"]}}\n'


@pytest.fixture(scope="module")
def mosquitto() -> int:
    start_mosquitto(MOSQUITTO_PORT)
    return MOSQUITTO_PORT


def _bridge(tmp_path: Path, redis_port: int, bridges: list[BridgeProcess], workers: int = 2) -> BridgeProcess:
    group = f"wk{uuid.uuid4().hex[:8]}"
    extra = external_config(tmp_path, state=False, extra=f"broker.shared_group = {group}\n")
    bridge = BridgeProcess(tmp_path, f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n", RULES, extra)
    bridges.append(bridge)
    bridge.start(workers=workers)
    bridge.wait_for(bridge.ready, "every worker to be ready", timeout=30)
    return bridge


def _publish(tmp_path: Path, topics: list[str], count: int, prefix: str) -> list[subprocess.Popen[bytes]]:
    """One `mosquitto_pub -l -q 1` per topic, `count` lines each: `<prefix>-<topic>-<i>`."""
    publishers = []
    for topic in topics:
        lines = tmp_path / f"{prefix}-{topic.replace('/', '_')}.txt"
        lines.write_text("".join(f"{prefix}-{topic}-{i}\n" for i in range(count)))
        with lines.open("rb") as source:
            publishers.append(
                subprocess.Popen(
                    ["mosquitto_pub", "-p", str(MOSQUITTO_PORT), "-t", topic, "-q", "1", "-l"], stdin=source
                )
            )
    return publishers


def _stored_payloads(redis_db: redis_sync.Redis, topic: str) -> list[bytes]:
    ids: list[bytes] = redis_db.zrange(f"mqtt:msg:{topic}", 0, -1)  # type: ignore[assignment]
    return [redis_db.hget(b"mqtt:msg:" + msgid, "payload") for msgid in ids]  # type: ignore[misc]


def _expect_exactly_once(
    bridge: BridgeProcess, redis_db: redis_sync.Redis, topics: list[str], count: int, prefix: str
) -> None:
    def complete() -> bool:
        return all(redis_db.zcard(f"mqtt:msg:{topic}") >= count for topic in topics)

    bridge.wait_for(complete, f"{count} messages on each of {topics} in Redis", timeout=30)
    for topic in topics:
        stored = _stored_payloads(redis_db, topic)
        # one member per msgid: a message stored twice (a new msgid on redelivery) makes count + 1
        assert sorted(stored) == sorted(f"{prefix}-{topic}-{i}".encode() for i in range(count)), topic


def _health(bridge: BridgeProcess) -> dict[str, dict[str, object]]:
    answer = bridge.get("/healthz")
    assert answer is not None
    workers: dict[str, dict[str, object]] = json.loads(answer[1])["workers"]
    return workers


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def _eventually(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_two_workers_store_every_message_once_reload_restart_and_stop(
    tmp_path: Path, redis_db: redis_sync.Redis, redis_port: int, mosquitto: int, bridges: list[BridgeProcess]
) -> None:
    bridge = _bridge(tmp_path, redis_port, bridges)
    workers = _health(bridge)
    assert sorted(workers) == ["0", "1"]
    assert all(w["state"] == "running" and w["ready"] is True for w in workers.values())
    assert workers["1"]["clientid"] == f"{workers['0']['clientid']}-w1"
    pids = [int(w["pid"]) for w in workers.values()]  # type: ignore[call-overload]

    topics = ["wk/a", "wk/b", "wk/c", "wk/d"]
    for publisher in _publish(tmp_path, topics, 500, "m"):
        assert publisher.wait(30) == 0
    _expect_exactly_once(bridge, redis_db, topics, 500, "m")
    bridge.wait_for(lambda: bridge.metric("hookbridge_rule_succeeded_total") == 2000, "2000 successes in /metrics")
    assert bridge.metric("hookbridge_rule_matched_total", rule="redis.message.publish.1") == 2000
    assert bridge.metric("hookbridge_events_total", hookpoint="message.publish") == 2000
    shares = [bridge.metric("hookbridge_worker_events_total", worker=str(i)) for i in (0, 1)]
    assert sum(shares) == 2000 and min(shares) > 0, shares  # the broker gave each worker some
    assert bridge.metric("hookbridge_pool_up", worker="1") == 1

    # SIGHUP: both workers load the new rule; the broker's round robin sends each some of these
    (bridge.home / "rules" / "test.conf").write_text(RULES + RELOADED)
    assert bridge.process is not None
    bridge.process.send_signal(signal.SIGHUP)
    bridge.wait_for(lambda: bridge.log.read_text().count("rules reloaded: 2 rules") == 2, "both workers to reload")
    before = [bridge.metric("hookbridge_worker_events_total", worker=str(i)) for i in (0, 1)]
    for publisher in _publish(tmp_path, ["wk/r"], 40, "r"):
        assert publisher.wait(30) == 0
    bridge.wait_for(lambda: redis_db.scard("hb:reloaded") == 40, "the reloaded rule to store all 40")
    after = [bridge.metric("hookbridge_worker_events_total", worker=str(i)) for i in (0, 1)]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)

    # kill -9 of a worker while messages flow: it comes back, and no message is lost or stored twice
    killed = [f"wk/k{i}" for i in range(4)]
    publishers = _publish(tmp_path, killed, 500, "k")
    bridge.wait_for(lambda: bridge.metric("hookbridge_events_total") >= 2040 + 300, "messages to flow")
    subprocess.run(["kill", "-9", str(pids[1])], check=True)
    for publisher in publishers:
        assert publisher.wait(30) == 0
    bridge.wait_for(lambda: bridge.metric("hookbridge_worker_restarts_total", worker="1") == 1, "the restart")
    _expect_exactly_once(bridge, redis_db, killed, 500, "k")
    bridge.wait_for(bridge.ready, "the restarted worker to be ready")
    assert "worker 1 was killed by signal 9; starting it again in 0.5 s" in bridge.log.read_text()
    pids = [int(w["pid"]) for w in _health(bridge).values()]  # type: ignore[call-overload]

    # SIGTERM: every worker drains and exits, then the supervisor, with 0
    assert bridge.terminate() == 0
    assert not any(_alive(pid) for pid in pids)
    assert "all workers stopped" in bridge.log.read_text()


def test_no_worker_outlives_a_killed_supervisor(
    tmp_path: Path, redis_db: redis_sync.Redis, redis_port: int, mosquitto: int, bridges: list[BridgeProcess]
) -> None:
    (tmp_path / "spool" / "worker-3").mkdir(parents=True)  # left by an earlier run with 4 workers
    bridge = _bridge(tmp_path, redis_port, bridges)
    assert (
        "WARNING supervisor hookbridge: state of worker 3 from an earlier run with more workers"
        in bridge.log.read_text()
    )
    pids = [int(w["pid"]) for w in _health(bridge).values()]  # type: ignore[call-overload]
    bridge.kill()  # SIGKILL: nothing of the supervisor runs
    _eventually(lambda: not any(_alive(pid) for pid in pids), "the workers to exit after their supervisor")
    log = bridge.log.read_text()
    assert log.count("hookbridge stopped") == 2  # each drained and stopped cleanly, not killed


class _SteadyPublisher:
    """Publishes QoS 1 to `topics` in turn, 50 at a time, until stopped: load that lasts as long as
    the test needs it. `acked` holds (topic, payload) of every message the broker acknowledged."""

    def __init__(self, topics: list[str]) -> None:
        self.topics = topics
        self.acked: list[tuple[str, bytes]] = []
        self._stop = threading.Event()
        self._client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"pub-{uuid.uuid4().hex[:8]}")
        self._client.max_inflight_messages_set(100)
        self._client.connect("127.0.0.1", MOSQUITTO_PORT)
        self._client.loop_start()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            batch = []
            for _ in range(50):
                topic = self.topics[sent % len(self.topics)]
                payload = f"s-{sent}".encode()
                batch.append((topic, payload, self._client.publish(topic, payload, qos=1)))
                sent += 1
            for topic, payload, info in batch:
                info.wait_for_publish(30)
                assert info.is_published()
                self.acked.append((topic, payload))

    def stop(self) -> list[tuple[str, bytes]]:
        self._stop.set()
        self._thread.join(60)
        self._client.disconnect()
        self._client.loop_stop()
        return self.acked


def _session_present(clientid: str) -> bool:
    """Does Mosquitto hold a session for `clientid`? Asked by connecting with clean session off;
    the session that made is then cleared by a clean connect."""
    flags: list[bool] = []
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=clientid, clean_session=False)
    client.on_connect = lambda _c, _u, connect_flags, *_: flags.append(bool(connect_flags.session_present))
    client.connect("127.0.0.1", MOSQUITTO_PORT)
    client.loop_start()
    _eventually(lambda: bool(flags), f"a CONNACK for {clientid}")
    client.disconnect()
    client.loop_stop()
    paho_connect_blocking(MOSQUITTO_PORT, clientid)  # clean session: nothing stays
    return flags[0]


def test_scaling_down_under_load_retires_the_worker_and_loses_nothing(
    tmp_path: Path, redis_db: redis_sync.Redis, redis_port: int, mosquitto: int, bridges: list[BridgeProcess]
) -> None:
    bridge = _bridge(tmp_path, redis_port, bridges, workers=3)
    clientids = {int(i): str(w["clientid"]) for i, w in _health(bridge).items()}
    topics = [f"wk/s{i}" for i in range(4)]
    publisher = _SteadyPublisher(topics)
    bridge.wait_for(lambda: bridge.metric("hookbridge_worker_events_total", worker="2") >= 200, "worker 2 to work")

    assert bridge.process is not None
    bridge.process.send_signal(signal.SIGTTOU)  # scale down, 3 -> 2, while the publisher runs
    bridge.wait_for(lambda: "worker 2 retired; 2 workers" in bridge.log.read_text(), "worker 2 to retire")
    # still under load after it left: a share the broker kept giving a dead session would be lost
    after_retirement = len(publisher.acked)
    bridge.wait_for(lambda: len(publisher.acked) >= after_retirement + 2000, "2000 more messages")
    acked = publisher.stop()

    def all_stored() -> bool:
        return sum(int(redis_db.zcard(f"mqtt:msg:{topic}")) for topic in topics) >= len(acked)

    bridge.wait_for(all_stored, f"the {len(acked)} acknowledged messages in Redis", timeout=60)
    for topic in topics:
        stored = _stored_payloads(redis_db, topic)
        expected = [payload for t, payload in acked if t == topic]
        assert sorted(stored) == sorted(expected), topic  # each exactly once: none lost, none twice
    log = bridge.log.read_text()
    assert "retired: unsubscribed, every message it held is acknowledged; ending the session" in log
    assert sorted(_health(bridge)) == ["0", "1"] and bridge.metric("hookbridge_workers") == 2
    assert bridge.ready()
    assert not _session_present(clientids[2])  # nothing collects in a dead session
    assert not (tmp_path / "spool" / "worker-2").exists()  # and nothing of it is left to warn about

    # the whole set stops: worker 1 retires, worker 0 keeps its session for the next run
    assert bridge.terminate() == 0
    assert not _session_present(clientids[1])
    assert _session_present(clientids[0])
    assert not (tmp_path / "spool" / "worker-1").exists()
    assert (tmp_path / "spool").is_dir()
