"""Redis Sentinel pools on a real Sentinel set (scripts/redis_sentinel.sh: a primary, a replica, three
Sentinels on loopback): the bridge writes through the primary the Sentinels name; under load the
primary is killed (SIGKILL), the Sentinels promote the replica, and every message the broker
acknowledged is stored exactly once afterwards (wait_replicas = 1: a batch counts as written once
the replica holds it too, so the promoted replica has everything that was acknowledged)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client, wait_until
from support.services import ROOT

PORT = 26490  # the primary; the replica on PORT+1, the Sentinels on PORT+2..PORT+4
MASTER = "hookbridge"
DIR = ROOT / ".run" / f"redis-sentinel-{PORT}"
SCRIPT = ROOT / "scripts" / "redis_sentinel.sh"
POOL = (
    "backend.redis.pool1.type = sentinel\n"
    f"backend.redis.pool1.server = 127.0.0.1:{PORT + 2}, 127.0.0.1:{PORT + 3}, 127.0.0.1:{PORT + 4}\n"
    f"backend.redis.pool1.sentinel = {MASTER}\n"
    "backend.redis.pool1.wait_replicas = 1\n"
    "backend.redis.pool1.batch_time = 1ms\n"
    "backend.redis.pool1.request_timeout = 1s\n"
    "backend.redis.pool1.retry_backoff_max = 200ms\n"
)
RULES = 'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, "pool": "pool1"}\n'


def _script(action: str) -> None:
    subprocess.run(["bash", str(SCRIPT), str(PORT), action], check=True)


@pytest.fixture
def sentinel_set() -> Iterator[None]:
    """A fresh set (the primary on PORT), stopped afterwards."""
    _script("stop")
    _script("start")
    yield
    _script("stop")


def _primary_port(sentinel_port: int = PORT + 2) -> int:
    sentinel = redis_sync.Redis(port=sentinel_port)
    try:
        _host, port = sentinel.sentinel_get_master_addr_by_name(MASTER)
        return int(port)
    finally:
        sentinel.close()


def _all_sentinels_name(port: int) -> bool:
    return all(_primary_port(sentinel) == port for sentinel in (PORT + 2, PORT + 3, PORT + 4))


async def test_writes_go_to_the_primary_the_sentinels_name(make_bridge: BridgeFactory, sentinel_set: None) -> None:
    bridge = await make_bridge(rules=RULES, pools=POOL)
    client = await Client(mqtt_port(bridge), "sentinel-dev").connected()
    await client.publish("s/t", b"through sentinel", qos=1)
    await bridge.idle()
    primary = redis_sync.Redis(port=PORT)
    ids = primary.zrange("mqtt:msg:s/t", 0, -1)
    assert len(ids) == 1 and primary.hget(b"mqtt:msg:" + ids[0], "payload") == b"through sentinel"
    # replicated, as wait_replicas = 1 asks, before the broker acknowledged it
    assert redis_sync.Redis(port=PORT + 1).exists(b"mqtt:msg:" + ids[0]) == 1
    primary.close()
    await client.disconnect()


def _revive_old_primary_as_replica(new_primary: int) -> None:
    """What an operator does after a failover: start the dead node again; it joins as a replica."""
    subprocess.run(
        [
            "redis-server", "--port", str(PORT), "--bind", "127.0.0.1", "--daemonize", "yes",
            "--dir", str(DIR), "--pidfile", str(DIR / "primary.pid"), "--logfile", str(DIR / "primary.log"),
            "--dbfilename", "primary.rdb", "--save", "", "--appendonly", "no",
            "--replicaof", "127.0.0.1", str(new_primary),
        ],
        check=True,
    )  # fmt: skip


@pytest.mark.slow
async def test_primary_killed_under_load_nothing_acknowledged_is_lost(
    make_bridge: BridgeFactory, sentinel_set: None, tmp_path: Path
) -> None:
    bridge = await make_bridge(rules=RULES, pools=POOL)
    client = await Client(mqtt_port(bridge), "sentinel-load").connected()
    acks: list[asyncio.Future[int]] = []  # one per PUBLISH, done once PUBACKed
    enough = asyncio.Event()

    async def publish() -> None:  # about 1,000 messages a second until told to stop
        while not enough.is_set():
            for _ in range(10):
                acks.append(client.send("load/t", f"m{len(acks)}".encode(), 1))
            await asyncio.sleep(0.01)

    def acked() -> int:
        return sum(1 for ack in acks if ack.done())

    publisher = asyncio.create_task(publish())
    await wait_until(lambda: acked() >= 500, timeout=30, what="500 PUBACKs before the kill")
    killed_after = acked()
    os.kill(int((DIR / "primary.pid").read_text()), signal.SIGKILL)
    await wait_until(lambda: _primary_port() == PORT + 1, timeout=30, what="the Sentinels to promote the replica")
    # The old node comes back only once every Sentinel agrees: one that has not heard of the
    # failover yet would fail over again, to the returning node before it holds the data (seen
    # with Sentinels 1 s apart: a second switch-master to the empty node).
    await wait_until(lambda: _all_sentinels_name(PORT + 1), timeout=30, what="every Sentinel to name the replica")
    _revive_old_primary_as_replica(PORT + 1)
    await asyncio.sleep(1)  # load on the new primary with its new replica
    enough.set()
    await publisher
    count = len(acks)
    await wait_until(lambda: acked() == count, timeout=120, what="every PUBACK")

    primary = redis_sync.Redis(port=PORT + 1)
    try:
        await wait_until(lambda: primary.zcard("mqtt:msg:load/t") >= count, timeout=60, what="every message stored")
    except AssertionError as exc:  # say how far it got and what the pool was doing
        stored = primary.zcard("mqtt:msg:load/t")
        have = {primary.hget(b"mqtt:msg:" + i, "payload") for i in primary.zrange("mqtt:msg:load/t", 0, -1)}
        missing = [i for i in range(count) if f"m{i}".encode() not in have]
        ranges = f"{missing[:3]}..{missing[-3:]}" if missing else "none"
        other = redis_sync.Redis(port=PORT)
        detail = f"old node: {other.zcard('mqtt:msg:load/t')} stored, role {other.role()[0]!r}"
        raise AssertionError(
            f"{exc}: {stored} of {count} (killed after {killed_after}; missing {len(missing)}: {ranges}; {detail}); health {bridge.health()}"
        ) from None
    assert primary.zcard("mqtt:msg:load/t") == count
    ids = primary.zrange("mqtt:msg:load/t", 0, -1)
    payloads = [primary.hget(b"mqtt:msg:" + msgid, "payload") for msgid in ids]
    assert sorted(payloads) == sorted(f"m{i}".encode() for i in range(count))  # each exactly once
    primary.close()
    await client.disconnect()
