"""Cassandra-only behaviour on a real node: schema command, cql and template actions (injection attempts),
last-writer-wins, TTL, retain delete order, and 10,000 messages fetched in order across hour buckets."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest

from actions.cassa.schema import BUCKET_SECONDS
from bridge.events import ClientConnected, ClientDisconnected, MessagePublish
from bridge.msgid import node_bits
from conformance.cassa_store import KEYSPACE, CassaStore
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client
from support.services import ROOT, start_cassandra

PORT = 9042


@pytest.fixture(scope="module")
def cassa_node() -> int:
    start_cassandra(PORT)
    return PORT


@pytest.fixture
async def cassa(cassa_node: int) -> AsyncIterator[CassaStore]:
    store = CassaStore(cassa_node)
    await store.open()
    await store.rows("DROP TABLE IF EXISTS {ks}.audit")
    yield store
    await store.close()


def pool(extra: str = "") -> str:
    return CassaStore(PORT).pool_config() + extra


async def test_schema_command_prints_and_applies_idempotently(cassa: CassaStore, tmp_path: os.PathLike[str]) -> None:
    keyspace = "hb_schema_cmd"
    await cassa.rows(f"DROP KEYSPACE IF EXISTS {keyspace}")
    conf = pool().replace(f"keyspace = {KEYSPACE}", f"keyspace = {keyspace}")
    conf += 'backend.cassa.pool1.replication = {"class": "NetworkTopologyStrategy", "datacenter1": 1}\n'
    (tmp_path / "bridge.conf").write_text(conf)  # type: ignore[operator]
    command = [sys.executable, "-m", "bridge", "schema", "-c", "bridge.conf", "--pool", "cassa.pool1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = functools.partial(subprocess.run, cwd=tmp_path, capture_output=True, text=True, env=env, check=True)
    printed = await asyncio.to_thread(run, command)
    assert "CREATE TABLE IF NOT EXISTS hb_schema_cmd.msg" in printed.stdout
    assert "'class': 'NetworkTopologyStrategy', 'datacenter1': '1'" in printed.stdout
    assert not await cassa.rows("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s", keyspace)
    for _ in range(2):  # applying twice is safe
        await asyncio.to_thread(run, [*command, "--apply"])
    rows = await cassa.rows("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", keyspace)
    assert {r[0] for r in rows} == {"client", "sub", "msg", "msg_bucket", "topic", "retain", "acked", "event_log"}
    replication = await cassa.rows("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", keyspace)
    assert replication[0][0]["class"].endswith("NetworkTopologyStrategy")
    await cassa.rows(f"DROP KEYSPACE {keyspace}")


CQL_RULES = """
backend.cassa.hook.message.publish.1 = {"topic": "#", "action": {"cql": ["insert into audit (who, topic, body, level, at, raw) values (${clientid}, '${topic}', ${payload.text}, ${payload.level}, ${timestamp}, ${payload})", "update audit set seen = true where who = ${clientid} and topic = ${topic}"]}}
backend.cassa.hook.message.publish.2 = {"topic": "#", "action": {"template": "cassa/audit.j2"}}
"""
AUDIT_TEMPLATE = """{% if json and json.level is number and json.level >= 3 %}
insert into audit (who, topic, body, level, at, raw) values ('{{ clientid }}', {{ topic ~ '/alarm' }}, 'alarm', {{ json.level }}, {{ timestamp }}, {{ payload }});
{% endif %}
"""
EVIL = "x'); DROP TABLE audit; --"


async def test_cql_and_template_actions_bind_every_value(make_bridge: BridgeFactory, cassa: CassaStore) -> None:
    await cassa.rows(
        "CREATE TABLE {ks}.audit (who text, topic text, body text, level int, at timestamp, raw blob, seen boolean,"
        " PRIMARY KEY (who, topic))"
    )
    bridge = await make_bridge(CQL_RULES, pools=pool(), templates={"cassa/audit.j2": AUDIT_TEMPLATE})
    client = await Client(mqtt_port(bridge), EVIL).connected()
    payload = b'{"text": "it\'s \\"quoted\\"; DELETE FROM audit WHERE who = \'x\'", "level": 5}'
    before = time.time()
    await client.publish(f"t/{EVIL}", payload, qos=1)
    await client.publish("t/plain", b"\xff\xfe not json ' ; --", qos=1)
    await client.disconnect()
    await bridge.idle()
    rows = await cassa.rows("SELECT who, topic, body, level, at, raw, seen FROM {ks}.audit")
    assert sorted((r[0], r[1], r[2] or "", r[3] or 0, bytes(r[5])) for r in rows) == sorted(
        [
            (EVIL, f"t/{EVIL}", "it's \"quoted\"; DELETE FROM audit WHERE who = 'x'", 5, payload),
            (EVIL, f"t/{EVIL}/alarm", "alarm", 5, payload),  # from the template
            (EVIL, "t/plain", "", 0, b"\xff\xfe not json ' ; --"),  # a missing ${payload.x} is null
        ]
    )
    assert [r[6] for r in rows if not r[1].endswith("/alarm")] == [True, True]  # second statement ran after the first
    assert all(before - 1 <= r[4].timestamp() <= time.time() + 1 for r in rows)
    assert bridge.metrics.rules["cassa.message.publish.1"]["failed"] == 0
    assert await cassa.rows("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", KEYSPACE)


async def test_a_bad_cql_statement_fails_its_rule_only(make_bridge: BridgeFactory, cassa: CassaStore) -> None:
    rules = (
        'backend.cassa.hook.client.connected.1 = {"action": {"cql": "insert into no_such_table (a) values (${clientid})"}}\n'
        'backend.cassa.hook.client.connected.2 = {"action": {"function": "on_client_connected"}}\n'
    )
    bridge = await make_bridge(rules, pools=pool())
    client = await Client(mqtt_port(bridge), "c1").connected()
    await bridge.idle()
    assert bridge.metrics.rules["cassa.client.connected.1"]["failed"] == 1
    assert (await cassa.client("c1") or {}).get("state") == 1
    await client.disconnect()


async def test_late_connected_does_not_overwrite_newer_disconnected(
    make_bridge: BridgeFactory, cassa: CassaStore
) -> None:
    rules = (
        'backend.cassa.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'
        'backend.cassa.hook.client.disconnected.1 = {"action": {"function": "on_client_disconnected"}}\n'
    )
    bridge = await make_bridge(rules, pools=pool())
    now = time.time()
    await bridge.dispatcher(ClientDisconnected("dev", None, "n", "p", "normal", now))
    await bridge.dispatcher(ClientConnected("dev", None, "n", "p", now - 5))  # arrives late, happened earlier
    await bridge.idle()
    assert await cassa.client("dev") == {"state": 0, "online": True, "offline": True, "node": "n"}
    # the late connect's cells lose to the newer disconnect's: state stays 0
    rows = await cassa.rows("SELECT writetime(state), offline_at FROM {ks}.client WHERE clientid = 'dev'")
    assert rows[0][0] == int(now * 1_000_000)


def _publish(msgid: str, payload: bytes, topic: str, retain: bool = False) -> MessagePublish:
    return MessagePublish(msgid, "c", None, topic, 1, payload, retain, "n", "127.0.0.1:1", time.time())


async def test_expired_time_is_a_ttl_and_retain_delete_removes_only_older(
    make_bridge: BridgeFactory, cassa: CassaStore
) -> None:
    rules = (
        'backend.cassa.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, '
        '"expired_time": 3600}\n'
        'backend.cassa.hook.message.publish.2 = {"topic": "#", "action": {"function": "on_message_retain"}}\n'
        'backend.cassa.hook.message.publish.3 = {"topic": "#", "action": {"function": "on_retain_delete"}}\n'
    )
    bridge = await make_bridge(rules, pools=pool())
    older, newer = bridge.msgids.next(), bridge.msgids.next()
    await bridge.dispatcher(_publish(newer, b"on", "lamp", retain=True))
    await bridge.dispatcher(_publish(older, b"", "lamp", retain=True))  # an older clear arrives late
    await bridge.idle()
    assert await cassa.retained("lamp") == newer
    assert [m.payload for m in await cassa.messages("lamp")] == [b"", b"on"]  # msgid order
    # USING TTL 3600 on the message rows, none on the retained row; read the TTLs back rather than wait
    # for them to run out (a wait long enough for a slow machine is a test that passes only on timing)
    ttls = await cassa.rows("SELECT ttl(payload) FROM {ks}.msg WHERE topic = 'lamp' ALLOW FILTERING")
    assert len(ttls) == 2 and all(3000 < row[0] <= 3600 for row in ttls)
    retained_ttls = await cassa.rows("SELECT ttl(msgid) FROM {ks}.retain WHERE topic = 'lamp'")
    assert [row[0] for row in retained_ttls] == [None]  # retained messages do not expire
    await bridge.dispatcher(_publish(bridge.msgids.next(), b"", "lamp", retain=True))
    await bridge.idle()
    assert await cassa.retained("lamp") is None


async def test_ten_thousand_messages_fetched_in_order_across_hour_buckets(
    make_bridge: BridgeFactory, cassa: CassaStore
) -> None:
    """Messages published over five hours (msgid times), replayed in shuffled order, come back in msgid order."""
    bridge = await make_bridge(
        'backend.cassa.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}\n'
        'backend.cassa.hook.session.subscribed.1 = {"topic": "queue/#", "action": {"function": '
        '"on_message_fetch_for_queue"}, "offline_opts": {"max_returned_count": 2000}}\n'
        'backend.cassa.hook.message.acked.1 = {"topic": "queue/#", "action": {"function": '
        '"on_message_acked_for_queue"}}\n',
        pools=pool(),
    )
    node = node_bits("elsewhere")
    start_us = (int(time.time()) - 5 * BUCKET_SECONDS) * 1_000_000
    step_us = 5 * BUCKET_SECONDS * 1_000_000 // 10_000
    ids = [f"{start_us + n * step_us:016X}{node:012X}{n % 65536:04X}" for n in range(10_000)]
    topics = ["queue/a", "queue/b"]
    order = list(range(10_000))
    order = order[1::2] + order[::2]  # out of order: the odd ones first
    for n in order:
        await bridge.dispatcher(_publish(ids[n], f"m{n:05d}".encode(), topics[n % 2]))
    await bridge.idle()
    buckets = await cassa.rows("SELECT bucket FROM {ks}.msg_bucket WHERE topic = 'queue/a'")
    assert len(buckets) >= 5

    subscriber = await Client(mqtt_port(bridge), "s", clean=False).connected()
    await subscriber.subscribe("queue/#", qos=1)
    got = await subscriber.expect(10_000, timeout=180)
    assert [m.payload for m in got] == [f"m{n:05d}".encode() for n in range(10_000)]
    await subscriber.expect_nothing()
    await subscriber.disconnect()


async def test_event_log_and_retain_lookup_of_a_leading_wildcard(make_bridge: BridgeFactory, cassa: CassaStore) -> None:
    rules = (
        'backend.cassa.hook.client.connected.1 = {"action": {"function": "on_event_log"}}\n'
        'backend.cassa.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_event_log"}}\n'
        'backend.cassa.hook.message.publish.2 = {"topic": "#", "action": {"function": "on_message_retain"}}\n'
        'backend.cassa.hook.session.subscribed.1 = {"topic": "#", "action": {"function": "on_retain_lookup"}}\n'
    )
    bridge = await make_bridge(rules, pools=pool())
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    await publisher.publish("a/x", b"A", qos=1, retain=True)
    await publisher.publish("b/x", b"B", qos=1, retain=True)
    await publisher.publish("b/y", b"not retained", qos=1)
    await publisher.disconnect()
    await bridge.idle()
    await bridge.stop()  # the broker forgets its retained messages: the lookup must find them in Cassandra
    bridge = await make_bridge(rules, pools=pool())
    viewer = await Client(mqtt_port(bridge), "viewer").connected()
    await viewer.subscribe("+/x", qos=1)  # a leading wildcard reads every partition of the topic index
    got = sorted((m.topic, m.payload, m.retain) for m in await viewer.expect(2))
    assert got == [("a/x", b"A", True), ("b/x", b"B", True)]
    await viewer.expect_nothing()
    await viewer.disconnect()
    await bridge.idle()
    rows = await cassa.rows("SELECT event, clientid, topic, bytes FROM {ks}.event_log")
    events = sorted((r[0], r[1], r[2] or "", r[3] or 0) for r in rows)
    assert events == [
        ("client.connected", "pub", "", 0),
        ("client.connected", "viewer", "", 0),
        ("message.publish", "pub", "a/x", 1),
        ("message.publish", "pub", "b/x", 1),
        ("message.publish", "pub", "b/y", 12),
    ]
