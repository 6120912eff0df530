"""`$SYS/broker/...` of the embedded broker (docs/operations.md#broker-status-sysbroker), read with real paho clients as
Mosquitto's users read them: the values after known traffic are exact, the ACL decides who reads
them, `broker.sys_interval` sets how often they come (0: never)."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from pathlib import Path

import pytest

from bridge.app import Bridge
from bridge.brokers.embedded.source import EmbeddedBroker
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import V5, V311, Client

ACL = """\
user writer
topic write #

user reader
topic read #

user sysreader
topic read $SYS/#
"""
SYS = "$SYS/broker/"


async def start(make_bridge: BridgeFactory, tmp_path: Path, interval: str) -> Bridge:
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    return await make_bridge(rules="", extra_config=f"broker.acl.file = {acl}\nbroker.sys_interval = {interval}\n")


async def connect(made: list[Client], bridge: Bridge, clientid: str, user: str, **kwargs: object) -> Client:
    client = Client(mqtt_port(bridge), clientid, **kwargs)  # type: ignore[arg-type]
    client.paho.username_pw_set(user)
    made.append(client)
    assert (await client.connect()).reason == 0
    return client


async def retained_sys(reader: Client, count: int) -> dict[str, str]:
    """The retained `$SYS` messages a fresh subscription gets: topic -> value."""
    assert await reader.subscribe("$SYS/#", 0) == [0]
    got = await reader.expect(count)
    assert all(m.retain for m in got)
    return {m.topic: m.payload.decode() for m in got}


async def test_values_after_known_traffic_are_exact(
    make_bridge: BridgeFactory, tmp_path: Path, clients: list[Client]
) -> None:
    started = time.monotonic()  # before the bridge's round at start: bounds the loads' interval below
    bridge = await start(make_bridge, tmp_path, "1h")  # one round at start; the next one the test runs
    source = bridge.broker
    assert isinstance(source, EmbeddedBroker)
    systopics, core = source.sys_topics, source.core
    assert systopics is not None and core is not None
    m, k = 7, 3  # messages published, retained messages published
    offline = await connect(clients, bridge, "off1", "reader", version=V311, clean=False)
    assert await offline.subscribe("t/#", 1) == [1]
    writer = await connect(clients, bridge, "w1", "writer", version=V311)
    reader = await connect(clients, bridge, "r1", "reader", version=V5)
    assert await reader.subscribe("t/#", 0) == [0]
    ended = core.active["off1"].done
    await offline.disconnect()
    await ended.wait()  # its DISCONNECT read and the connection torn down
    for i in range(m):
        assert await writer.publish(f"t/{i}", b"x" * i, 1) == 0
    for i in range(k):
        assert await writer.publish(f"r/{i}", b"kept", 1, retain=True) == 0
    assert [msg.topic for msg in await reader.expect(m)] == [f"t/{i}" for i in range(m)]

    # the round at start left the broker's own $SYS messages retained: Mosquitto counts them as
    # retained and stored messages too
    own = core.router.retained.matching("$SYS/#")
    own_bytes = sum(len(r.payload) for r in own)
    assert len(own) == len(systopics.values())  # every topic was published at start
    assert await systopics.publish() > 0
    interval = time.monotonic() - started  # at least the time between the two rounds
    sysreader = await connect(clients, bridge, "sys1", "sysreader", version=V311)
    values = await retained_sys(sysreader, len(systopics.values()))

    # writer: CONNECT + m + k PUBLISH in, CONNACK + m + k PUBACK out; reader: CONNECT, SUBSCRIBE
    # in, CONNACK, SUBACK, m PUBLISH out; off1: CONNECT, SUBSCRIBE, DISCONNECT in, CONNACK, SUBACK out
    expected = {
        "clients/connected": 2,
        "clients/disconnected": 1,
        "clients/total": 3,
        "clients/maximum": 3,
        "clients/expired": 0,
        "messages/received": (1 + m + k) + 2 + 3,
        "messages/sent": (1 + m + k) + (2 + m) + 2,
        "publish/messages/received": m + k,
        "publish/messages/sent": m,
        "publish/messages/dropped": 0,
        "subscriptions/count": 2,
        "shared_subscriptions/count": 0,
        "retained messages/count": k + len(own),
        # each message once: the m queued for the offline persistent session (QoS 1), the retained
        "store/messages/count": m + k + len(own),
        "messages/stored": m + k + len(own),
        "store/messages/bytes": sum(range(m)) + k * len(b"kept") + own_bytes,  # payload bytes
        "publish/bytes/received": sum(range(m)) + k * len(b"kept"),
        "publish/bytes/sent": sum(range(m)),
    }
    assert {name: int(values[SYS + name]) for name in expected} == expected
    assert int(values[SYS + "bytes/received"]) > 0 and int(values[SYS + "bytes/sent"]) > 0
    assert values[SYS + "version"].startswith("hookbridge version ")
    assert 0 < int(values[SYS + "heap/current"]) <= int(values[SYS + "heap/maximum"])
    # what only hookbridge has: the bridge's spool and rules (this bridge has no rule, no pool)
    own_topics = {
        t.removeprefix(SYS + "hookbridge/"): v for t, v in values.items() if t.startswith(SYS + "hookbridge/")
    }
    assert own_topics["rules/count"] == "0" and own_topics["spool/bytes"] == "0"
    assert int(own_topics["spool/max_bytes"]) == bridge.spool_budget.max_bytes > 0
    assert values[SYS + "uptime"].endswith(" seconds")
    # per-minute rates folded into moving averages (from 0, the round at start): n events over an
    # interval of e seconds give n * 60 / e * (1 - exp(-e / window)), at most n * 60 / window and
    # falling as e grows, so the interval's upper bound measured here gives a lower bound that holds
    # however slow the machine is
    for window, seconds in (("1min", 60), ("5min", 300), ("15min", 900)):
        for name, n in (("publish/received", m + k), ("connections", 3)):
            load = float(values[f"{SYS}load/{name}/{window}"])
            least = n * 60 / interval * -math.expm1(-interval / seconds)
            assert 0.999 * least <= load <= n * 60 / seconds + 0.01, (name, window, load)


@pytest.mark.parametrize("version", [pytest.param(V311, id="3.1.1"), pytest.param(V5, id="5.0")])
async def test_only_readers_allowed_by_the_acl_get_them(
    make_bridge: BridgeFactory, tmp_path: Path, clients: list[Client], version: object
) -> None:
    bridge = await start(make_bridge, tmp_path, "100ms")
    denied = 0x80 if version == V311 else 0x87
    reader = await connect(clients, bridge, "r1", "reader", version=version)
    assert await reader.subscribe("$SYS/#", 0) == [denied]
    assert await reader.subscribe("$SYS/broker/uptime", 0) == [denied]
    assert await reader.subscribe("#", 0) == [0]  # a first-level wildcard never matches $SYS
    writer = await connect(clients, bridge, "w1", "writer", version=version)
    # clients may not publish to $SYS: dropped (5.0 says so), the broker's value stays
    assert await writer.publish(SYS + "version", b"forged", 1, retain=True) == (0 if version == V311 else 0x87)
    sysreader = await connect(clients, bridge, "sys1", "sysreader", version=version)
    assert await sysreader.subscribe(SYS + "version", 0) == [0]
    got = await sysreader.message()
    assert (got.topic, got.retain) == (SYS + "version", True)
    assert got.payload.startswith(b"hookbridge version ")
    # every interval what changed, live (not retained): messages/sent grows with what this reader gets
    assert await sysreader.subscribe(SYS + "messages/sent", 0) == [0]
    live = [m for m in await sysreader.expect(4) if not m.retain]
    assert live and all(m.topic == SYS + "messages/sent" for m in live)
    # the reader of "#" got the marker, and no $SYS message before it
    assert await writer.publish("end", b"marker", 1) == 0
    assert await reader.until("end", b"marker") == []


async def test_interval_zero_publishes_nothing(
    make_bridge: BridgeFactory, tmp_path: Path, clients: list[Client]
) -> None:
    bridge = await start(make_bridge, tmp_path, "0")
    source = bridge.broker
    assert isinstance(source, EmbeddedBroker) and source.core is not None
    sysreader = await connect(clients, bridge, "sys1", "sysreader")
    assert await sysreader.subscribe("$SYS/#", 0) == [0]
    await asyncio.sleep(0.5)
    assert sysreader.messages.empty()
    assert source.core.router.retained.matching("$SYS/#") == []


async def test_not_written_to_the_durable_store(
    make_bridge: BridgeFactory, tmp_path: Path, clients: list[Client]
) -> None:
    """The broker's own status is made again at every start: with durable sessions on, only the
    clients' retained messages go to the store (no write every interval for it)."""
    from bridge.brokers.embedded.durable.store import FILENAME

    store = tmp_path / "store"
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    extra = f"broker.acl.file = {acl}\nbroker.sys_interval = 50ms\n"
    extra += f"broker.durable_sessions = on\nbroker.durable_dir = {store}\n"
    bridge = await make_bridge(rules="", extra_config=extra)
    writer = await connect(clients, bridge, "w1", "writer")
    assert await writer.publish("keep/me", b"kept", 1, retain=True) == 0  # acked once committed
    sysreader = await connect(clients, bridge, "sys1", "sysreader")
    assert await sysreader.subscribe(SYS + "messages/sent", 0) == [0]
    await sysreader.expect(3)  # three rounds at least
    with sqlite3.connect(store / FILENAME) as db:
        topics = [row[0] for row in db.execute("SELECT topic FROM retained")]
    assert topics == ["keep/me"]


async def test_the_bridges_own_status_under_the_hookbridge_prefix(
    make_bridge: BridgeFactory, tmp_path: Path, clients: list[Client]
) -> None:
    """Pools, spool and rules of a bridge with the shipped Redis rules (real Redis), read over
    MQTT after a message was written: the numbers /metrics and /healthz show."""
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    bridge = await make_bridge(extra_config=f"broker.acl.file = {acl}\nbroker.sys_interval = 1h\n")
    source = bridge.broker
    assert isinstance(source, EmbeddedBroker) and source.sys_topics is not None
    writer = await connect(clients, bridge, "w1", "writer")
    assert await writer.publish("t/1", b"stored", 1) == 0
    await bridge.idle()
    rules, events = bridge.metrics.rules, sum(bridge.metrics.events.values())  # as the round sees them
    succeeded = sum(counts["succeeded"] for counts in rules.values())
    assert await source.sys_topics.publish() > 0
    sysreader = await connect(clients, bridge, "sys1", "sysreader")  # (its events come after the round)
    assert await sysreader.subscribe(SYS + "hookbridge/#", 0) == [0]
    own_count = sum(1 for topic in source.sys_topics.values() if topic.startswith(SYS + "hookbridge/"))
    got = {m.topic.removeprefix(SYS + "hookbridge/"): m.payload.decode() for m in await sysreader.expect(own_count)}
    assert got["pools/redis.pool1/up"] == "1"
    assert got["pools/redis.pool1/queue"] == "0" and got["pools/redis.pool1/spooled"] == "0"
    assert got["rules/count"] == str(len(bridge.engine.rules)) != "0"
    assert got["rules/succeeded"] == str(succeeded) and succeeded > 0  # the message stored, among others
    assert got["rules/failed"] == "0"
    assert got["events/received"] == str(events) and events > 0
