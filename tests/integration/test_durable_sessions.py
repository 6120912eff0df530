"""Durable sessions (docs/brokers.md#durable-sessions) against a real `hookbridge run` with `broker.durable_sessions = on`.

Sessions with an expiry (3.1.1 clean session 0, 5.0 session expiry > 0), their subscriptions,
queued and in-flight messages, unreleased incoming QoS 2 ids and the retained messages survive
`kill -9` and SIGTERM; the will of a session connected at the crash goes out after its delay; an
expired session is gone, data and all; a torn write at the end of the store is survived; a PUBACK
means the message reaches the durable session after a crash; a fetch rule and a durable session
deliver each message once; with durable sessions off (the default) a restart forgets every session.

Every client is a raw socket (tests/support/raw.py `RawClient`): the test decides which
message is acknowledged and when, so messages can be left in flight across the restart, and each
check is on what arrives: payloads numbered in publish order, DUP flags, packet ids, CONNACK
session present, PUBCOMP reason codes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    MQTT_5,
    Connack,
    Disconnect,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Will,
    encode,
)
from support.process import BridgeProcess
from support.raw import RawClient, brief
from support.services import ROOT

RawConnect = Callable[..., Awaitable[tuple[RawClient, Any]]]

WINDOW = 10  # broker.max_inflight: messages a session has in flight before the rest wait in its queue
QUEUED = 1000  # messages queued for each session while it is offline
SEQ = [b"%04d" % n for n in range(QUEUED)]  # payloads: their publish order, so order and duplicates show
Q2_RELEASED, Q2_UNRELEASED = 2001, 2002  # the publisher's QoS 2 packet ids left open across the restart


def durable_bridge(
    home: Path, pools: str = "", rules: str = "", *, durable: bool = True, preload: str | None = None
) -> BridgeProcess:
    """A bridge home whose store is `home/store`; `durable=False` leaves the settings out (the default).
    `preload`: broker.durable_preload ("0": every restored queue read back when first needed)."""
    extra = f"broker.max_inflight = {WINDOW}\n"
    if durable:
        extra += f"broker.durable_sessions = on\nbroker.durable_dir = {home / 'store'}\n"
    if preload is not None:
        extra += f"broker.durable_preload = {preload}\n"
    return BridgeProcess(home, pools, rules, extra)


async def persistent(
    raw_connect: RawConnect,
    port: int,
    client_id: str,
    *,
    v5: bool = False,
    expiry: int = 3600,
    fresh: bool = False,
    timeout: float = 5.0,
) -> tuple[RawClient, Connack]:
    """A connection to a session with an expiry: 3.1.1 clean session 0, or 5.0 with `expiry` seconds
    (clean start only when `fresh`). Fails unless the CONNACK accepts it (within `timeout` s)."""
    if v5:
        props = Properties(session_expiry_interval=expiry)
        client, connack = await raw_connect(
            port, client_id, clean_session=fresh, level=MQTT_5, properties=props, timeout=timeout
        )
    else:
        client, connack = await raw_connect(port, client_id, clean_session=False, timeout=timeout)
    assert isinstance(connack, Connack) and connack.reason_code == 0, connack
    return client, connack


async def publish_all(client: RawClient, messages: list[tuple[str, bytes]], *, retain: bool = False) -> None:
    """QoS 1 messages sent in one write (packet ids 1..n); returns once every PUBACK is in."""
    data = b"".join(
        encode(Publish(topic, payload, qos=1, retain=retain, packet_id=n + 1), client.level)
        for n, (topic, payload) in enumerate(messages)
    )
    await client.send_bytes(data)
    pending = set(range(1, len(messages) + 1))
    while pending:
        packet = await client.recv(timeout=30)
        assert isinstance(packet, Puback) and packet.reason_code == 0, packet and brief(packet)
        pending.discard(packet.packet_id)


async def drain(client: RawClient, last: bytes, timeout: float = 30) -> list[Publish]:
    """Every PUBLISH until the one whose payload is `last`, acknowledged as a well-behaved client
    does (PUBACK; PUBREC, then PUBCOMP for the PUBREL); SUBACKs on the way are passed over."""
    got: list[Publish] = []
    while not got or got[-1].payload != last:
        packet = await client.recv(timeout)
        assert packet is not None, f"closed after {[p.payload for p in got][-5:]} ({len(got)} messages)"
        if isinstance(packet, Publish):
            got.append(packet)
            if packet.qos == 1:
                await client.send(Puback(packet.packet_id))
            elif packet.qos == 2:
                await client.send(Pubrec(packet.packet_id))
        elif isinstance(packet, Pubrel):
            await client.send(Pubcomp(packet.packet_id))
        else:
            assert isinstance(packet, Suback), brief(packet)
    return got


def broker_up(bridge: BridgeProcess) -> bool:
    answer = bridge.get("/healthz")
    return answer is not None and bool(json.loads(answer[1])["broker"]["up"])


async def start(bridge: BridgeProcess) -> BridgeProcess:
    """Start the bridge and wait until its broker listens: /healthz answers before that (the
    durable store is opened and the sessions restored in between)."""
    await asyncio.to_thread(bridge.start)
    await asyncio.to_thread(bridge.wait_for, lambda: broker_up(bridge), "the broker to listen")
    return bridge


async def sessions_stored(bridge: BridgeProcess, count: int) -> None:
    def stored() -> bool:
        return bridge.metric("hookbridge_broker_durable_sessions") == count

    await asyncio.to_thread(bridge.wait_for, stored, f"{count} sessions in the store")


async def handled(client: RawClient, timeout: float = 5.0) -> None:
    """Returns once the broker has handled every packet `client` sent before (a PINGRESP comes
    after them: one connection's packets are handled in order)."""
    await client.send(Pingreq())
    assert isinstance(await client.recv(timeout), Pingresp)


async def restart(bridge: BridgeProcess, stop: str) -> None:
    """Stop the bridge by `kill -9` or SIGTERM (exit 0), then start it again on the same home."""
    if stop == "kill":
        bridge.kill()
    else:
        assert bridge.terminate() == 0, bridge.log.read_text()[-3000:]
    await start(bridge)


# -- 1, 2: everything a session holds survives kill -9 and SIGTERM ------------------------------


@pytest.mark.parametrize("stop", ["kill", "term"])
async def test_sessions_queues_inflight_and_retained_survive_a_restart(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, stop: str
) -> None:
    bridge = durable_bridge(tmp_path)
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    # Three durable sessions on d/# and q2/#: 3.1.1 (a, c) and 5.0 with a session expiry (b).
    subscribers = {"dur-a": False, "dur-b": True, "dur-c": False}
    for client_id, v5 in subscribers.items():
        client, _ = await persistent(raw_connect, port, client_id, v5=v5, fresh=True)
        suback = await client.subscribe(1, ("d/#", 1), ("q2/#", 2))
        assert suback.reason_codes == [1, 2]
        await client.send(Disconnect())
    # d: a 3.1.1 durable session on q2/# at QoS 2 that stays connected (its QoS 2 flows stay open).
    d, _ = await persistent(raw_connect, port, "dur-d")
    assert (await d.subscribe(1, ("q2/#", 2))).reason_codes == [2]
    publisher, _ = await persistent(raw_connect, port, "dur-pub", v5=True, fresh=True)
    await publish_all(publisher, [(f"d/{n % 2}", payload) for n, payload in enumerate(SEQ)])

    # c comes back and receives its window of messages; it acknowledges none of them.
    c, _ = await persistent(raw_connect, port, "dur-c")
    inflight = [await c.recv() for _ in range(WINDOW)]
    assert [(p.payload, p.dup) for p in inflight] == [(payload, False) for payload in SEQ[:WINDOW]]

    # QoS 2 from the publisher: PUBREC received for both, PUBREL sent for neither (the second
    # PUBREC is "lost": the publisher will send that PUBLISH again).
    await publisher.send(Publish("q2/x", b"q2-7", qos=2, packet_id=Q2_RELEASED))
    assert await publisher.recv() == Pubrec(Q2_RELEASED)
    to_d = await d.recv()
    assert (to_d.payload, to_d.qos) == (b"q2-7", 2)
    await d.send(Pubrec(to_d.packet_id))
    assert await d.recv() == Pubrel(to_d.packet_id)  # d never sends the PUBCOMP
    await publisher.send(Publish("q2/x", b"q2-8", qos=2, packet_id=Q2_UNRELEASED))
    assert await publisher.recv() == Pubrec(Q2_UNRELEASED)
    unreleased = await d.recv()  # d never sends the PUBREC
    assert (unreleased.payload, unreleased.qos) == (b"q2-8", 2)

    retained = [("r/a", b"ra"), ("r/b", b"rb"), ("r/gone", b"soon cleared"), ("r/gone", b"")]
    await publish_all(publisher, retained, retain=True)
    await restart(bridge, stop)

    # Every session is there, without a resubscribe.
    sessions = {}
    for client_id, v5 in {**subscribers, "dur-d": False}.items():
        client, connack = await persistent(raw_connect, port, client_id, v5=v5)
        assert connack.session_present, client_id
        sessions[client_id] = client
    publisher, connack = await persistent(raw_connect, port, "dur-pub", v5=True)
    assert connack.session_present
    # The publisher's open QoS 2 flows complete, and neither message is passed on again.
    await publisher.send(Pubrel(Q2_RELEASED))
    assert await publisher.recv() == Pubcomp(Q2_RELEASED)  # reason 0, not 0x92 (id not found)
    await publisher.send(Publish("q2/x", b"q2-8", qos=2, dup=True, packet_id=Q2_UNRELEASED))
    assert await publisher.recv() == Pubrec(Q2_UNRELEASED)
    await publisher.send(Pubrel(Q2_UNRELEASED))
    assert await publisher.recv() == Pubcomp(Q2_UNRELEASED)

    # d: the PUBREL it never completed comes again, then the PUBLISH it never received, with DUP.
    d = sessions["dur-d"]
    assert await d.recv() == Pubrel(to_d.packet_id)
    again = await d.recv()
    assert (again.payload, again.qos, again.dup, again.packet_id) == (b"q2-8", 2, True, unreleased.packet_id)
    await d.send(Pubcomp(to_d.packet_id))
    await d.send(Pubrec(again.packet_id))
    assert await d.recv() == Pubrel(again.packet_id)
    await d.send(Pubcomp(again.packet_id))

    # New publishes reach every session through the subscriptions restored from the store.
    await publish_all(publisher, [("d/after", b"d-after"), ("q2/after", b"q2-after")])
    expected = [*SEQ, b"q2-7", b"q2-8", b"d-after", b"q2-after"]
    for client_id in subscribers:
        got = await drain(sessions[client_id], b"q2-after")
        assert [p.payload for p in got] == expected, client_id  # all of them, in order, once
        dups = [p.payload for p in got if p.dup]
        assert dups == (SEQ[:WINDOW] if client_id == "dur-c" else []), client_id
        if client_id == "dur-c":  # what was in flight comes again under its packet ids
            assert [p.packet_id for p in got[:WINDOW]] == [p.packet_id for p in inflight]
    assert [p.payload for p in await drain(d, b"q2-after")] == [b"q2-after"]  # nothing twice before it

    # Retained messages: topics and payloads as they were; the cleared one stays cleared.
    reader, _ = await raw_connect(port, "dur-reader")
    await reader.send(Subscribe(1, [Subscription("r/#", 1)]))
    assert isinstance(await reader.recv(), Suback)
    await publish_all(publisher, [("r/marker", b"end")])
    got = await drain(reader, b"end")
    assert {p.topic: p.payload for p in got if p.retain} == {"r/a": b"ra", "r/b": b"rb"}
    assert len(got) == 3


# -- 3: an expired session is gone, with its data --------------------------------------------


def store_rows_mentioning(store: Path, needles: list[bytes]) -> list[str]:
    """Every row of every table in the store (opened read-only) that holds one of `needles`."""
    db = sqlite3.connect(f"file:{store / 'durable.db'}?mode=ro", uri=True)
    found = []
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    data = value.encode() if isinstance(value, str) else value
                    if isinstance(data, bytes) and any(needle in data for needle in needles):
                        found.append(f"{table}: {row!r}"[:300])
    finally:
        db.close()
    return found


async def test_an_expired_session_is_gone_after_the_restart_and_its_data_removed(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = durable_bridge(tmp_path)
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    expiring, _ = await persistent(raw_connect, port, "expiring-x", v5=True, expiry=2, fresh=True)
    assert (await expiring.subscribe(1, ("x/#", 1))).reason_codes == [1]
    await expiring.send(Disconnect())
    keeper, _ = await persistent(raw_connect, port, "keeper-y")  # no expiry: it stays
    assert (await keeper.subscribe(1, ("y/#", 1))).reason_codes == [1]
    publisher, _ = await raw_connect(port, "expiry-pub")
    doomed = [b"expired-payload-%d" % n for n in range(5)]
    await publish_all(publisher, [("x/t", payload) for payload in doomed])  # queued for x only
    await publish_all(publisher, [("y/t", b"y-%d" % n) for n in range(5)])
    assert [p.payload for p in await drain(keeper, b"y-4")] == [b"y-%d" % n for n in range(5)]
    await handled(keeper)  # its PUBACKs: the stop must keep them

    assert bridge.terminate() == 0
    await asyncio.sleep(2.5)  # longer than x's session expiry: it ends while the bridge is down
    await start(bridge)

    needles = [b"expiring-x", *doomed]
    await asyncio.to_thread(
        bridge.wait_for, lambda: not store_rows_mentioning(tmp_path / "store", needles), "x's rows deleted", 20
    )
    assert store_rows_mentioning(tmp_path / "store", needles) == []
    assert bridge.metric("hookbridge_broker_durable_sessions") == 1  # keeper-y only

    expiring, connack = await persistent(raw_connect, port, "expiring-x", v5=True, expiry=2)
    assert not connack.session_present
    assert (await expiring.subscribe(1, ("marker/x", 1))).reason_codes == [1]
    publisher, _ = await raw_connect(port, "expiry-pub")
    await publish_all(publisher, [("x/t", b"x-after"), ("marker/x", b"marker"), ("y/t", b"y-after")])
    assert [p.payload for p in await drain(expiring, b"marker")] == [b"marker"]  # nothing queued, no x/#
    keeper, connack = await persistent(raw_connect, port, "keeper-y")
    assert connack.session_present
    assert [p.payload for p in await drain(keeper, b"y-after")] == [b"y-after"]


async def test_the_will_of_a_session_connected_at_kill_9_goes_out_after_its_delay(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = await start(durable_bridge(tmp_path))
    bridges.append(bridge)
    port = bridge.mqtt_port
    watcher, _ = await persistent(raw_connect, port, "will-watcher")
    assert (await watcher.subscribe(1, ("will/#", 1))).reason_codes == [1]
    await watcher.send(Disconnect())
    will = Will("will/w", b"w is gone", qos=1, properties=Properties(will_delay_interval=1))
    props = Properties(session_expiry_interval=3600)
    await raw_connect(port, "will-w", clean_session=True, level=MQTT_5, properties=props, will=will)
    await sessions_stored(bridge, 2)
    bridge.kill()  # will-w was connected: it never sent a DISCONNECT, so its will is due
    await start(bridge)

    watcher, connack = await persistent(raw_connect, port, "will-watcher")
    assert connack.session_present
    got = await drain(watcher, b"w is gone", timeout=10)
    assert [(p.topic, p.payload) for p in got] == [("will/w", b"w is gone")]


RESUMED_EXPIRY = 8  # s: the session expiry interval of the test below


async def test_a_session_resumed_and_connected_at_kill_9_keeps_its_expiry_from_the_restart(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    """A CONNECT that resumes a session and changes nothing else of it rewrites only its
    `positions` row (durable/journal.py `progress`): that row must say it is connected. Its
    `sessions` row still says when its last disconnection would have ended it; at kill -9 that
    moment is past, and the session must survive: its client was connected until the crash."""
    bridge = await start(durable_bridge(tmp_path))
    bridges.append(bridge)
    port = bridge.mqtt_port
    client, _ = await persistent(raw_connect, port, "back-again", v5=True, expiry=RESUMED_EXPIRY, fresh=True)
    assert (await client.subscribe(1, ("back/t", 1))).reason_codes == [1]
    await client.send(Disconnect())
    await sessions_stored(bridge, 1)
    client, connack = await persistent(raw_connect, port, "back-again", v5=True, expiry=RESUMED_EXPIRY)
    assert connack.session_present
    await handled(client)
    await asyncio.sleep(RESUMED_EXPIRY + 1)  # connected past the end its disconnection had set
    bridge.kill()
    await start(bridge)  # its expiry counts from here: seconds to come back, on a slow machine too

    publisher, _ = await raw_connect(port, "back-pub")
    await publish_all(publisher, [("back/t", b"kept")])
    client, connack = await persistent(raw_connect, port, "back-again", v5=True, expiry=RESUMED_EXPIRY)
    assert connack.session_present
    assert [p.payload for p in await drain(client, b"kept")] == [b"kept"]


# -- 4, 5: what a publisher got a PUBACK for reaches the durable session after kill -9 ----------


async def publish_until_killed(
    bridge: BridgeProcess, raw_connect: RawConnect, count: int = 2000, kill_at: int = 500
) -> list[bytes]:
    """A durable session on k/# offline; a publisher sends `count` QoS 1 messages at once and the
    bridge gets SIGKILL the moment the `kill_at`-th PUBACK is read. Returns the payloads of every
    PUBACK the publisher got (those read after the kill too: the kernel had them already)."""
    port = bridge.mqtt_port
    keeper, _ = await persistent(raw_connect, port, "ack-keeper")
    assert (await keeper.subscribe(1, ("k/#", 1))).reason_codes == [1]
    await keeper.send(Disconnect())
    # The session is in the store before the first publish: what is tested is the messages.
    await sessions_stored(bridge, 1)
    publisher, _ = await raw_connect(port, "ack-pub")
    payloads = [b"%05d" % n for n in range(count)]
    await publisher.send_bytes(
        b"".join(encode(Publish("k/t", p, qos=1, packet_id=n + 1), MQTT_3_1_1) for n, p in enumerate(payloads))
    )
    acked: list[bytes] = []
    while (packet := await publisher.recv(timeout=30)) is not None:
        assert isinstance(packet, Puback), brief(packet)
        acked.append(payloads[packet.packet_id - 1])
        if len(acked) == kill_at:
            bridge.kill()
    assert len(acked) >= kill_at
    return acked


async def delivered_after_restart(bridge: BridgeProcess, raw_connect: RawConnect) -> list[Publish]:
    """What the k/# session gets once the bridge is back, up to a marker published then."""
    await start(bridge)
    keeper, connack = await persistent(raw_connect, bridge.mqtt_port, "ack-keeper")
    assert connack.session_present
    publisher, _ = await raw_connect(bridge.mqtt_port, "ack-pub")
    await publish_all(publisher, [("k/t", b"marker")])
    return (await drain(keeper, b"marker"))[:-1]


def assert_every_acked_once_in_order(got: list[Publish], acked: list[bytes], context: str = "") -> None:
    payloads = [p.payload for p in got]
    assert payloads == sorted(set(payloads)), f"out of order or twice {context}"
    missing = sorted(set(acked) - set(payloads))
    assert not missing, f"{len(missing)} acknowledged messages lost, first {missing[:5]} {context}"
    assert not any(p.dup for p in got)  # none was ever sent to the session before


async def test_every_acknowledged_message_reaches_the_durable_session_after_kill_9(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = durable_bridge(tmp_path)
    bridges.append(await start(bridge))
    acked = await publish_until_killed(bridge, raw_connect)
    assert_every_acked_once_in_order(await delivered_after_restart(bridge, raw_connect), acked)


async def publish_qos2_until_killed(bridge: BridgeProcess, raw_connect: RawConnect, count: int, kill_at: int) -> int:
    """A durable session on k/# offline; a publisher with a persistent session sends `count` QoS 2
    messages (packet ids 1..count) at once and the bridge gets SIGKILL the moment the `kill_at`-th
    PUBREC is read (no PUBREL goes out: a slow client). Returns how many PUBRECs it got."""
    port = bridge.mqtt_port
    keeper, _ = await persistent(raw_connect, port, "q2-keeper")
    assert (await keeper.subscribe(1, ("k/#", 2))).reason_codes == [2]
    await keeper.send(Disconnect())
    publisher, _ = await persistent(raw_connect, port, "q2-pub")
    await publisher.send(Disconnect())
    await sessions_stored(bridge, 2)
    publisher, _ = await persistent(raw_connect, port, "q2-pub")
    await publisher.send_bytes(b"".join(encode(p, MQTT_3_1_1) for p in qos2_publishes(count, dup=False)))
    pubrecs = 0
    while (packet := await publisher.recv(timeout=30)) is not None:
        assert isinstance(packet, Pubrec), brief(packet)
        pubrecs += 1
        if pubrecs == kill_at:
            bridge.kill()
    return pubrecs


def qos2_publishes(count: int, *, dup: bool) -> list[Publish]:
    return [Publish("k/t", b"%05d" % n, qos=2, dup=dup, packet_id=n + 1) for n in range(count)]


@pytest.mark.parametrize("round_", range(3))
async def test_a_qos2_publish_resent_with_dup_after_kill_9_is_delivered_once(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, round_: int
) -> None:
    """MQTT-4.4.0-1: after a kill -9 the publisher resends every PUBLISH it has no PUBCOMP for,
    with DUP, then PUBRELs them. Those whose PUBREC went out were passed on before the kill: their
    packet ids were committed with the message, so the resend is acknowledged, not passed on again.
    The durable subscriber gets each message exactly once, in order."""
    count = 1000
    bridge = durable_bridge(tmp_path)
    bridges.append(await start(bridge))
    pubrecs = await publish_qos2_until_killed(bridge, raw_connect, count, kill_at=200 + 100 * round_)
    await start(bridge)
    publisher, connack = await persistent(raw_connect, bridge.mqtt_port, "q2-pub")
    assert connack.session_present
    await publisher.send_bytes(b"".join(encode(p, MQTT_3_1_1) for p in qos2_publishes(count, dup=True)))
    for _ in range(count):
        packet = await publisher.recv(timeout=30)
        assert isinstance(packet, Pubrec), packet and brief(packet)
    await publisher.send_bytes(b"".join(encode(Pubrel(n + 1), MQTT_3_1_1) for n in range(count)))
    for _ in range(count):
        packet = await publisher.recv(timeout=30)
        assert isinstance(packet, Pubcomp) and packet.reason_code == 0, packet and brief(packet)
    await publish_all(publisher, [("k/t", b"marker")])
    keeper, connack = await persistent(raw_connect, bridge.mqtt_port, "q2-keeper")
    assert connack.session_present
    payloads = [p.payload for p in await drain(keeper, b"marker")][:-1]
    twice = sorted(p for p in set(payloads) if payloads.count(p) > 1)
    assert not twice, f"{len(twice)} delivered twice (first {twice[:5]}); {pubrecs} PUBRECs before the kill"
    assert payloads == [b"%05d" % n for n in range(count)]  # every one, once, in order


def committed_wal_pages(wal: bytes) -> set[int]:
    """Page numbers of the WAL's frames up to its last commit (SQLite's WAL format: a 32-byte
    header, then frames of a 24-byte header and a page; frames of this WAL carry its salts)."""
    if len(wal) < 32:
        return set()
    page_size, salts = int.from_bytes(wal[8:12], "big"), wal[16:24]
    committed: set[int] = set()
    pending: set[int] = set()
    pos = 32
    while pos + 24 + page_size <= len(wal) and wal[pos + 8 : pos + 16] == salts:
        pending.add(int.from_bytes(wal[pos : pos + 4], "big"))
        if int.from_bytes(wal[pos + 4 : pos + 8], "big"):  # a commit frame: the database size after it
            committed |= pending
            pending = set()
        pos += 24 + page_size
    return committed


def tear(store: Path) -> str:
    """Leave the store as a crash in the middle of writing would: the WAL ends in half a frame
    (a transaction that was being written), and `durable.db`'s last page is cut in half (a
    checkpoint that was copying it; the WAL still holds the page) or, where the WAL does not hold
    it, the file ends in half a page of garbage (it was growing). Returns what was done."""
    wal_path, db_path = store / "durable.db-wal", store / "durable.db"
    wal, db = wal_path.read_bytes(), db_path.read_bytes()
    assert len(wal) > 32, "the WAL is empty right after kill -9: nothing to tear"
    page_size = int.from_bytes(wal[8:12], "big")
    torn_frame = (1).to_bytes(4, "big") + (1).to_bytes(4, "big") + wal[16:24] + os.urandom(8)
    with wal_path.open("ab") as f:
        f.write(torn_frame + os.urandom(page_size // 2))
    last_page = len(db) // page_size
    if last_page in committed_wal_pages(wal):
        os.truncate(db_path, len(db) - page_size // 2)
        return f"WAL: half a frame appended; durable.db: last page {last_page} cut in half"
    with db_path.open("ab") as f:
        f.write(os.urandom(page_size // 2))
    return f"WAL: half a frame appended; durable.db: half a page of garbage after page {last_page}"


async def test_a_torn_write_at_the_end_of_the_store_is_survived(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = durable_bridge(tmp_path)
    bridges.append(await start(bridge))
    acked = await publish_until_killed(bridge, raw_connect)
    torn = tear(tmp_path / "store")
    before = len(bridge.log.read_bytes())
    got = await delivered_after_restart(bridge, raw_connect)
    assert_every_acked_once_in_order(got, acked, torn)
    log = bridge.log.read_bytes()[before:].decode()
    print(torn)
    # It says what it found: an unclean stop, the log recovered, the store checked; what it restored.
    assert "did not stop cleanly" in log and "store checked, ok" in log, f"{torn}:\n{log}"
    assert "sessions, " in log and "restored in" in log, log
    assert "Traceback" not in log, log


# -- 6: a fetch rule and a durable session deliver each message once ----------------------------

FETCH_RULES = """\
backend.redis.hook.message.publish.1 = {"topic": "pubsub/#", "action": {"function": "on_message_publish"}}
backend.redis.hook.session.subscribed.1 = {"topic": "pubsub/#", "action": {"function": "on_message_fetch_for_pubsub"}}
backend.redis.hook.message.acked.1 = {"topic": "pubsub/#", "action": {"function": "on_message_acked_for_pubsub"}}
"""


async def test_a_fetch_rule_and_a_durable_session_deliver_each_message_once(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, redis_db: redis_sync.Redis
) -> None:
    pools = f"backend.redis.pool1.server = 127.0.0.1:{redis_db.connection_pool.connection_kwargs['port']}\n"
    bridge = durable_bridge(tmp_path, pools, FETCH_RULES)
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    fetcher, _ = await persistent(raw_connect, port, "fetch-f")
    assert (await fetcher.subscribe(1, ("pubsub/#", 1))).reason_codes == [1]  # the fetch notes its offset
    await fetcher.send(Disconnect())
    publisher, _ = await raw_connect(port, "fetch-pub")
    sent = [b"f-%02d" % n for n in range(20)]
    await publish_all(publisher, [("pubsub/t", payload) for payload in sent])  # in Redis and in the store
    assert len(redis_db.zrange("mqtt:msg:pubsub/t", 0, -1)) == len(sent)
    bridge.kill()
    await start(bridge)

    # The client subscribes again on connecting, as most do: the subscription is not new, so the
    # fetch does not run; the session's own queue delivers. Nothing is acknowledged until the
    # rules are done with the SUBSCRIBE: a fetch that ran would find every message still unacked.
    fetcher, connack = await persistent(raw_connect, port, "fetch-f")
    assert connack.session_present
    await fetcher.send(Subscribe(2, [Subscription("pubsub/#", 1)]))

    def rules_idle() -> bool:
        return (
            bridge.metric("hookbridge_events_total", hookpoint="session.subscribed") >= 1
            and bridge.metric("hookbridge_queue_depth") == 0
            and bridge.metric("hookbridge_fetches_paging") == 0
        )

    await asyncio.to_thread(bridge.wait_for, rules_idle, "the SUBSCRIBE through the rules")
    got = await drain(fetcher, sent[-1])
    publisher, _ = await raw_connect(port, "fetch-pub")
    await publish_all(publisher, [("pubsub/t", b"marker")])
    got += await drain(fetcher, b"marker")
    assert [p.payload for p in got] == [*sent, b"marker"]


# -- 7: durable sessions off, the default: a restart forgets the sessions ----------------------


async def test_without_durable_sessions_a_restart_forgets_the_session(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = durable_bridge(tmp_path, durable=False)
    bridges.append(await start(bridge))
    client, connack = await persistent(raw_connect, bridge.mqtt_port, "plain")
    assert (await client.subscribe(1, ("p/#", 1))).reason_codes == [1]
    await client.send(Disconnect())
    client, connack = await persistent(raw_connect, bridge.mqtt_port, "plain")
    assert connack.session_present  # kept in memory while the bridge runs
    await client.send(Disconnect())
    bridge.kill()
    await start(bridge)
    client, connack = await persistent(raw_connect, bridge.mqtt_port, "plain")
    assert not connack.session_present
    assert not (tmp_path / "store").exists()


# -- check: broker.durable_dir must be a directory the bridge can write ------------------------


@pytest.mark.parametrize(
    ("durable_dir", "problem"),
    [
        ("/etc/passwd", "/etc/passwd exists and is not a directory"),
        ("/etc/passwd/store", "cannot create /etc/passwd/store: /etc/passwd is not a directory"),
        ("/proc/1/store", "cannot write to /proc/1"),  # refused even to root
    ],
)
def test_check_refuses_a_durable_dir_that_is_not_a_writable_directory(
    tmp_path: Path, durable_dir: str, problem: str
) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "bridge.conf").write_text(
        f"broker.durable_sessions = on\nbroker.durable_dir = {durable_dir}\nmetrics.listener = off\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "bridge", "check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (result.returncode, result.stderr.splitlines()) == (
        2,
        [f"config/bridge.conf:2:22: broker.durable_dir: {problem}", "1 problem found"],
    )
