"""Durable restart in seconds (docs/benchmarks.md#restart-with-sessions-read-back-lazily): after a restart the
durable sessions' queues are read back from the store all at once before the listener opens while
they are small enough (broker.durable_preload), else each when it is first needed; both ways here.

Against a real `hookbridge run` with `broker.durable_sessions = on`, raw clients: 2,000 device
sessions (each on its own `dev/<n>/cmd/#` and a broadcast) owed distinct messages survive kill -9;
those that reconnect get exactly their queue once, in order, with what was published after the
restart while they were not loaded yet; those that never reconnect keep theirs across a second
kill -9; shared-subscription picks given to sessions not loaded yet are not lost or doubled; a
store written by the code before the store's topic index (format 0) opens and delivers as it was.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from bridge.brokers.embedded.codec import Publish, Subscribe, Subscription
from support.process import BridgeProcess
from support.raw import RawClient
from tests.integration.test_durable_sessions import (
    drain,
    durable_bridge,
    handled,
    persistent,
    publish_all,
    restart,
    start,
)

RawConnect = Callable[..., Awaitable[tuple[RawClient, Any]]]

DEVICES = 2000
OWN = 3  # messages each device is owed before the kill, beside the broadcast
BATCH = 200  # connections opened at once
# A batch's CONNECTs are answered one after another, each after its session's queue is read back
# (and right after a restart, beside the store's own restore work): on a loaded CI machine the
# last CONNACK of a batch once took over 5 s. What this file checks is what arrives, not how fast.
ANSWER_WITHIN = 60.0
DATA = Path(__file__).parent / "durable_fixtures"


def device(n: int) -> str:
    return f"dev-{n:04d}"


async def in_batches(items: Sequence[int], work: Callable[[int], Awaitable[None]]) -> None:
    for first in range(0, len(items), BATCH):
        await asyncio.gather(*(work(n) for n in items[first : first + BATCH]))


async def publish_many(raw_connect: RawConnect, port: int, messages: list[tuple[str, bytes]]) -> None:
    publisher, _ = await raw_connect(port, "fleet-pub")
    for first in range(0, len(messages), 2000):
        await publish_all(publisher, messages[first : first + 2000])
    publisher.abort()


def unloaded(bridge: BridgeProcess) -> float:
    return bridge.metric("hookbridge_broker_durable_sessions_unloaded")


# How a restart reads the restored queues back (broker.durable_preload): each when first needed
# ("0", and a store over the budget), or all of them before the listener opens (the default).
WAYS = {"read when first needed": "0", "over the budget: read when first needed": "64KB", "read at start": None}


def lazy(way: str) -> bool:
    return WAYS[way] is not None


@pytest.mark.parametrize("way", WAYS)
async def test_a_fleet_of_durable_sessions_restored_gets_every_message_once(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, way: str
) -> None:
    bridge = durable_bridge(tmp_path, preload=WAYS[way])
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    everyone = list(range(DEVICES))

    async def open_session(n: int) -> None:
        client, _ = await persistent(raw_connect, port, device(n), fresh=True, timeout=ANSWER_WITHIN)
        filters = ((f"dev/{n:04d}/cmd/#", 1), ("fleet/all", 1))
        assert (await client.subscribe(1, *filters)).reason_codes == [1, 1]
        client.abort()

    await in_batches(everyone, open_session)
    before = [(f"dev/{n:04d}/cmd/{k}", b"%04d-%d" % (n, k)) for k in range(OWN) for n in everyone]
    await publish_many(raw_connect, port, [*before, ("fleet/all", b"bcast-0")])
    await restart(bridge, "kill")
    restored = DEVICES if lazy(way) else 0
    assert unloaded(bridge) == restored  # lazy: nothing read back yet
    assert ("over broker.durable_preload" in bridge.log.read_text()) == (way.startswith("over"))

    # Published after the restart: lazy, while no session is loaded: logged for them, queued by nobody.
    after = [(f"dev/{n:04d}/cmd/after", b"%04d-after" % n) for n in everyone]
    await publish_many(raw_connect, port, [*after, ("fleet/all", b"bcast-1")])
    assert unloaded(bridge) == restored

    def expected(n: int) -> list[bytes]:
        return [*(b"%04d-%d" % (n, k) for k in range(OWN)), b"bcast-0", b"%04d-after" % n, b"bcast-1"]

    returning, away = everyone[::2], everyone[1::2]

    async def come_back(n: int, marker: bytes | None = None) -> None:
        try:
            client, connack = await persistent(raw_connect, port, device(n), timeout=ANSWER_WITHIN)
        except TimeoutError:
            raise AssertionError(
                f"{device(n)}: no CONNACK in {ANSWER_WITHIN:g} s; {bridge.log.read_text()[-3000:]}"
            ) from None
        assert connack.session_present, device(n)
        want = expected(n) if marker is None else [marker]
        got = await drain(client, want[-1], timeout=ANSWER_WITHIN)
        assert [p.payload for p in got] == want, device(n)  # all of them, in order, once
        assert not any(p.dup for p in got), device(n)
        await handled(client, ANSWER_WITHIN)  # its PUBACKs are in: nothing of it is owed any more
        client.abort()

    await in_batches(returning, come_back)
    assert unloaded(bridge) == (len(away) if lazy(way) else 0)

    # A second kill -9: the sessions not back keep their queue (and those that were, nothing).
    await restart(bridge, "kill")
    assert unloaded(bridge) == restored
    await in_batches(away, come_back)
    await publish_many(raw_connect, port, [(f"dev/{n:04d}/cmd/mark", b"mark") for n in returning[:50]])

    async def only_marker(n: int) -> None:
        await come_back(n, b"mark")

    await in_batches(returning[:50], only_marker)


@pytest.mark.parametrize("way", ["read when first needed", "read at start"])
async def test_shared_subscription_picks_for_sessions_restored_are_kept_once(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, way: str
) -> None:
    bridge = durable_bridge(tmp_path, preload=WAYS[way])
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    members = ["worker-1", "worker-2", "worker-3"]
    for client_id in members:
        client, _ = await persistent(raw_connect, port, client_id, fresh=True)
        assert (await client.subscribe(1, ("$share/g/jobs/#", 1), (f"own/{client_id}", 1))).reason_codes == [1, 1]
        client.abort()
    jobs = [b"job-%03d" % n for n in range(30)]
    await publish_many(raw_connect, port, [(f"jobs/{n % 4}", job) for n, job in enumerate(jobs[:15])])
    await restart(bridge, "kill")
    # After the restart, lazy: none loaded, the group's picks go to the log by name.
    await publish_many(raw_connect, port, [(f"jobs/{n % 4}", job) for n, job in enumerate(jobs[15:])])
    await publish_many(raw_connect, port, [(f"own/{client_id}", b"end") for client_id in members])
    got: list[bytes] = []
    for client_id in members:
        client, connack = await persistent(raw_connect, port, client_id)
        assert connack.session_present
        mine = [p.payload for p in await drain(client, b"end")]
        assert mine[-1] == b"end" and mine[:-1] == sorted(mine[:-1]), (client_id, mine)  # in order
        got += mine[:-1]
    assert sorted(got) == jobs  # every job once, among the group


@pytest.mark.parametrize("way", ["read when first needed", "read at start"])
async def test_a_store_of_the_format_before_the_topic_index_opens_and_delivers(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, way: str
) -> None:
    """durable_store_v0.db was written by the code of commit ad4c127 (durable_fixtures/make_durable_store_v0.py)."""
    (tmp_path / "store").mkdir()
    shutil.copy(DATA / "durable_store_v0.db", tmp_path / "store" / "durable.db")
    bridge = durable_bridge(tmp_path, preload=WAYS[way])
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    log = bridge.log.read_text()
    assert "migrated to format 1" in log and "Traceback" not in log, log
    db = sqlite3.connect(f"file:{tmp_path / 'store' / 'durable.db'}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (1,)
        # the six shared picks, by name (each restored session's backlog gets its rows too: owed.py)
        by_name = "SELECT count(*) FROM routes r JOIN messages m ON m.seq = r.seq WHERE instr(m.targets, r.clientid)"
        assert db.execute(by_name).fetchone() == (6,)
    finally:
        db.close()
    assert unloaded(bridge) == (5 if lazy(way) else 0)
    everything = [b"o-%02d" % n for n in range(20)]
    for client_id in ("old-a", "old-b"):
        client, connack = await persistent(raw_connect, port, client_id)
        assert connack.session_present
        got = await drain(client, everything[-1])
        assert [p.payload for p in got] == everything and not any(p.dup for p in got), client_id
    c, _ = await persistent(raw_connect, port, "old-c")
    got = await drain(c, everything[-1])
    assert [p.payload for p in got] == everything
    assert [p.dup for p in got] == [True] * 10 + [False] * 10  # in flight at the stop: again, with DUP
    jobs: list[bytes] = []
    for client_id in ("old-s1", "old-s2"):
        client, connack = await persistent(raw_connect, port, client_id)
        assert connack.session_present
        # A marker after its queue: its own QoS 0 message on a topic it subscribes to just before
        # (one connection's packets are handled in order; its SUBACK comes among the jobs).
        await client.send(Subscribe(2, [Subscription(f"own/{client_id}", 1)]))
        await client.send(Publish(f"own/{client_id}", client_id.encode(), qos=0))
        jobs += [p.payload for p in await drain(client, client_id.encode())][:-1]
    assert sorted(jobs) == [b"j-%d" % n for n in range(6)]
    reader, _ = await raw_connect(port, "v0-reader")
    assert (await reader.subscribe(1, ("r/#", 1))).reason_codes == [1]
    retained = await reader.recv()
    assert isinstance(retained, Publish) and (retained.topic, retained.payload) == ("r/x", b"rx")
