"""MongoDB-only behaviour, on FerretDB: schema command, payload_format, template actions, injection,
last-writer-wins, expiry without TTL indexes, a server down at start, 10,000 messages fetched in order."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from bridge.events import ClientConnected, ClientDisconnected
from support.bridges import BridgeFactory, eventually, mqtt_port
from support.mqtt import Client
from support.services import ROOT, start_ferretdb, stop_ferretdb
from support.tls import Certificates, make_certificates

PORT = 27018  # shared with the conformance suite
DOWN_PORT = 27019  # started and stopped by the test that needs it
POOL = f"backend.mongo.pool1.server = 127.0.0.1:{PORT}\nbackend.mongo.pool1.database = mqtt\n"

Db = AsyncDatabase[dict[str, Any]]


@pytest.fixture
async def mongo() -> AsyncIterator[Db]:
    start_ferretdb(PORT)
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(f"mongodb://127.0.0.1:{PORT}/?directConnection=true")
    await client.drop_database("mqtt")
    yield client.mqtt
    await client.close()


async def test_schema_command_applies_idempotently(mongo: Db, tmp_path: Path) -> None:
    (tmp_path / "bridge.conf").write_text(POOL)
    command = [sys.executable, "-m", "bridge", "schema", "-c", "bridge.conf", "--pool", "mongo.pool1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = functools.partial(subprocess.run, cwd=tmp_path, capture_output=True, text=True, env=env, check=True)
    printed = await asyncio.to_thread(run, command)
    assert 'db.mqtt_msg.createIndex({topic: 1, seq: 1, _id: 1}, {"name": "topic_seq"})' in printed.stdout
    assert await mongo.list_collection_names() == []  # printing creates nothing
    for _ in range(2):  # applying twice is safe
        applied = await asyncio.to_thread(run, [*command, "--apply"])
    # FerretDB refuses TTL indexes: the backend found out and says what it does instead
    assert "this server refuses TTL indexes" in applied.stdout
    expected = {"mqtt_client", "mqtt_sub", "mqtt_msg", "mqtt_topic", "mqtt_retain", "mqtt_acked", "mqtt_event_log"}
    assert set(await mongo.list_collection_names()) == expected
    indexes = await mongo.mqtt_msg.index_information()
    assert indexes["topic_seq"]["key"] == [("topic", 1), ("seq", 1), ("_id", 1)]
    assert indexes["expires_at"]["key"] == [("expires_at", 1)]
    assert (await mongo.mqtt_acked.index_information())["clientid_topic"]["unique"]


JSON_RULES = """
backend.mongo.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, "payload_format": "json"}
backend.mongo.hook.message.publish.2 = {"topic": "#", "action": {"function": "on_message_retain"}, "payload_format": "json"}
backend.mongo.hook.session.subscribed.1 = {"topic": "#", "action": {"function": "on_message_fetch"}}
backend.mongo.hook.session.subscribed.2 = {"topic": "#", "action": {"function": "on_retain_lookup"}}
backend.mongo.hook.message.acked.1 = {"topic": "#", "action": {"function": "on_message_acked"}}
"""

PAYLOADS: list[tuple[bytes, Any]] = [
    # published bytes, what `payload` holds (bytes: stored as binary)
    (b'{"t":21.5,"unit":"C","tags":["a","b"]}', {"t": 21.5, "unit": "C", "tags": ["a", "b"]}),
    (b'{ "t" : 1e3 }', {"t": 1000.0}),  # parsed; the exact bytes are kept for delivery
    (b"[1, 2, 3]", [1, 2, 3]),
    (b"\xff\xfe not json", b"\xff\xfe not json"),
    (b'{"$where": "sleep(100000)", "user": {"$ne": null}}', b'{"$where": "sleep(100000)", "user": {"$ne": null}}'),
    (b'{"a.b": 1}', b'{"a.b": 1}'),  # would be a path, not a field name
    (b'{"big": 123456789012345678901234567890}', b'{"big": 123456789012345678901234567890}'),
    (b"NaN", b"NaN"),
    (b"", b""),
]


async def test_payload_format_json_stores_documents_and_delivers_exact_bytes(
    make_bridge: BridgeFactory, mongo: Db
) -> None:
    await mongo.mqtt_acked.insert_one({"clientid": "s", "topic": "j/#", "msgid": "", "mid": 0})
    bridge = await make_bridge(JSON_RULES, pools=POOL)
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    for n, (payload, _) in enumerate(PAYLOADS):
        await publisher.publish(f"j/{n}", payload, qos=1)
    await publisher.publish("j/nested", b'{"m": [[1, 2], [3]]}', qos=1)  # FerretDB refuses nested arrays
    await publisher.publish("j/retained", b'{"on": true}', qos=1, retain=True)
    await publisher.disconnect()
    await bridge.idle()
    for n, (_, stored) in enumerate(PAYLOADS):
        doc = await mongo.mqtt_msg.find_one({"topic": f"j/{n}"})
        assert doc is not None
        assert doc["payload"] == stored, n
    nested = await mongo.mqtt_msg.find_one({"topic": "j/nested"})
    assert nested is not None and nested["payload"] in ({"m": [[1, 2], [3]]}, b'{"m": [[1, 2], [3]]}')
    assert (await mongo.mqtt_retain.find_one({"topic": "j/retained"}) or {})["payload"] == {"on": True}
    # query the stored documents as documents
    assert await mongo.mqtt_msg.count_documents({"payload.unit": "C"}) == 1
    assert bridge.metrics.rules["mongo.message.publish.1"]["failed"] == 0

    subscriber = await Client(mqtt_port(bridge), "s", clean=False).connected()
    await subscriber.subscribe("j/#", qos=1)
    received = {m.topic: m.payload for m in await subscriber.expect(len(PAYLOADS) + 2)}
    assert received == {
        **{f"j/{n}": payload for n, (payload, _) in enumerate(PAYLOADS)},
        "j/nested": b'{"m": [[1, 2], [3]]}',
        "j/retained": b'{"on": true}',
    }
    await subscriber.disconnect()


TEMPLATE_RULES = """
backend.mongo.hook.message.publish.1 = {"topic": "#", "action": {"template": "mongo/audit.j2"}}
backend.mongo.hook.message.publish.2 = {"topic": "#", "action": {"function": "on_message_store"}}
"""
AUDIT_TEMPLATE = """{#- unquoted and quoted values, an operator the template chose, an upsert #}
[
  {"insert_one": "audit", "document": {"who": "{{ clientid }}", "topic": {{ topic }}, "qos": {{ qos }},
    "raw": {{ payload }}, "level": {{ json.level }}, "label": "from {{ clientid }} on {{ topic }}"}},
  {"update_one": "last_seen", "filter": {"clientid": {{ clientid }}, "topic": {{ topic }}},
    "update": {"$set": {"qos": {{ qos }}}, "$inc": {"count": 1}}, "upsert": true}
{% if json and json.level is number and json.level >= 3 %}
  , {"insert_one": "alarms", "document": {"who": {{ clientid }}, "detail": {{ json }}}}
{% endif %}
]
"""
EVIL_ID = '{"$ne": null}", "admin": true, "x": "'


async def test_template_actions_bind_values_as_data(make_bridge: BridgeFactory, mongo: Db) -> None:
    bridge = await make_bridge(TEMPLATE_RULES, pools=POOL, templates={"mongo/audit.j2": AUDIT_TEMPLATE})
    client = await Client(mqtt_port(bridge), EVIL_ID).connected()
    await client.publish("t/$where", b'{"level": 5, "note": "} ] {\\"$where\\": 1}"}', qos=1)
    await client.publish("t/$where", b'{"level": 1}', qos=1)
    await client.publish("t/raw", b"\x00\xff binary", qos=1)
    await client.disconnect()
    await bridge.idle()

    audit = [doc async for doc in mongo.audit.find({}, {"_id": 0})]
    assert sorted(audit, key=lambda d: d["raw"]) == sorted(
        [
            {
                "who": EVIL_ID,
                "topic": "t/$where",
                "qos": 1,
                "raw": b'{"level": 5, "note": "} ] {\\"$where\\": 1}"}',
                "level": 5,
                "label": f"from {EVIL_ID} on t/$where",
            },
            {
                "who": EVIL_ID,
                "topic": "t/$where",
                "qos": 1,
                "raw": b'{"level": 1}',
                "level": 1,
                "label": f"from {EVIL_ID} on t/$where",
            },
            {
                "who": EVIL_ID,
                "topic": "t/raw",
                "qos": 1,
                "raw": b"\x00\xff binary",
                "level": None,
                "label": f"from {EVIL_ID} on t/raw",
            },
        ],
        key=lambda d: d["raw"],
    )
    # one document per (client, topic): each is written from one ordering lane
    last = sorted([doc async for doc in mongo.last_seen.find({}, {"_id": 0})], key=lambda d: d["topic"])
    assert last == [
        {"clientid": EVIL_ID, "topic": "t/$where", "qos": 1, "count": 2},
        {"clientid": EVIL_ID, "topic": "t/raw", "qos": 1, "count": 1},
    ]
    alarms = [doc async for doc in mongo.alarms.find({}, {"_id": 0})]
    assert alarms == [{"who": EVIL_ID, "detail": {"level": 5, "note": '} ] {"$where": 1}'}}]
    assert await mongo.mqtt_msg.count_documents({}) == 3
    assert bridge.metrics.rules["mongo.message.publish.1"]["failed"] == 0


REFUSED_TEMPLATES = {
    # event data that would be read as an operator if it went in as a document
    "mongo/operator.j2": '{"update_many": "c", "filter": {"clientid": {{ json.user }}}, "update": {"$set": {"x": 1}}}',
    # a field name from event data
    "mongo/key.j2": '{"insert_one": "c", "document": {"{{ clientid }}": 1}}',
    # JavaScript on the server, whoever wrote it
    "mongo/where.j2": '{"delete_many": "c", "filter": {"$where": "true"}}',
    # not JSON once rendered
    "mongo/broken.j2": '{"insert_one": "c", "document": {"a": {{ qos }}}',
}


async def test_template_refusals_fail_only_their_action(make_bridge: BridgeFactory, mongo: Db) -> None:
    await mongo.c.insert_many([{"clientid": "victim", "x": 0}, {"clientid": "other", "x": 0}])
    rules = "".join(
        f'backend.mongo.hook.message.publish.{n} = {{"topic": "#", "action": {{"template": "{name}"}}}}\n'
        for n, name in enumerate(REFUSED_TEMPLATES, 1)
    )
    rules += 'backend.mongo.hook.message.publish.9 = {"topic": "#", "action": {"function": "on_message_store"}}\n'
    bridge = await make_bridge(rules, pools=POOL, templates=REFUSED_TEMPLATES)
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("t/x", json.dumps({"user": {"$ne": None}}).encode(), qos=1)
    await client.disconnect()
    await bridge.idle()
    for n in range(1, len(REFUSED_TEMPLATES) + 1):
        assert bridge.metrics.rules[f"mongo.message.publish.{n}"]["failed"] == 1, n
    assert sorted([(d["clientid"], d["x"]) async for d in mongo.c.find()]) == [("other", 0), ("victim", 0)]
    assert await mongo.mqtt_msg.count_documents({}) == 1  # the other rule of the same event stored it


async def test_late_connected_does_not_overwrite_newer_disconnected(make_bridge: BridgeFactory, mongo: Db) -> None:
    rules = (
        'backend.mongo.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'
        'backend.mongo.hook.client.disconnected.1 = {"action": {"function": "on_client_disconnected"}}\n'
    )
    bridge = await make_bridge(rules, pools=POOL)
    now = time.time()
    await bridge.dispatcher(ClientDisconnected("dev", None, "n", "p", "normal", now))
    await bridge.dispatcher(ClientConnected("dev", None, "n", "p", now - 5))  # arrives late, happened earlier
    await bridge.idle()
    docs = [doc async for doc in mongo.mqtt_client.find({"clientid": "dev"})]
    assert len(docs) == 1
    assert docs[0]["state"] == 0
    assert "online_at" not in docs[0]
    assert abs(docs[0]["offline_at"].timestamp() - now) < 0.01
    assert bridge.metrics.rules["mongo.client.connected.1"]["failed"] == 0  # a no-op, not an error


async def test_expired_messages_are_deleted_without_ttl_indexes(make_bridge: BridgeFactory, mongo: Db) -> None:
    rules = (
        'backend.mongo.hook.message.publish.1 = {"topic": "t/short/#", "action": {"function": "on_message_publish"}, '
        '"expired_time": 1}\n'
        'backend.mongo.hook.message.publish.2 = {"topic": "t/long/#", "action": {"function": "on_message_publish"}, '
        '"expired_time": 3600}\n'
        'backend.mongo.hook.session.subscribed.1 = {"topic": "#", "action": {"function": "on_message_fetch_for_queue"}}\n'
    )
    bridge = await make_bridge(rules, pools=POOL, extra_config="backend.mongo.pool1.trim_interval = 300ms\n")
    backend: Any = bridge.runners["mongo.pool1"].backend
    assert backend.ttl is False  # detected: FerretDB refuses TTL indexes
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("t/short/x", b"short-lived", qos=1)
    await client.publish("t/long/x", b"long-lived", qos=1)
    await bridge.idle()
    # stored (the backend acknowledged it); whether it is still there is a race with its 1 s, not asserted
    assert bridge.metrics.rules["mongo.message.publish.1"]["succeeded"] == 1
    await eventually(lambda: mongo.mqtt_msg.count_documents({"topic": "t/short/x"}), lambda n: n == 0, timeout=10)
    assert await mongo.mqtt_msg.count_documents({"topic": "t/long/x"}) == 1  # only what expired is deleted
    await client.disconnect()


async def test_server_down_at_start_then_up(make_bridge: BridgeFactory) -> None:
    stop_ferretdb(DOWN_PORT)
    pool = f"backend.mongo.pool1.server = 127.0.0.1:{DOWN_PORT}\nbackend.mongo.pool1.retry_backoff_max = 300ms\n"
    rules = 'backend.mongo.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}\n'
    bridge = await make_bridge(rules, pools=pool)  # starts anyway
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("t/late", b"waits", qos=1)

    async def ready() -> bool:
        return bool(bridge.health()[0])

    await eventually(ready, lambda ok: not ok, timeout=15)  # a write waited out server selection
    try:
        await asyncio.to_thread(start_ferretdb, DOWN_PORT)
        await asyncio.wait_for(bridge.idle(), 60)
        late: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            f"mongodb://127.0.0.1:{DOWN_PORT}/?directConnection=true"
        )
        docs = [(d["topic"], d["payload"]) async for d in late.mqtt.mqtt_msg.find()]
        await late.drop_database("mqtt")
        await late.close()
        assert docs == [("t/late", b"waits")]
        assert bridge.health()[0]
    finally:
        await client.disconnect()
        await asyncio.to_thread(stop_ferretdb, DOWN_PORT)


async def test_ten_thousand_messages_fetched_in_order(make_bridge: BridgeFactory, mongo: Db) -> None:
    rules = (
        'backend.mongo.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}\n'
        'backend.mongo.hook.session.subscribed.1 = {"topic": "fleet/#", "action": {"function": '
        '"on_message_fetch_for_pubsub"}, "offline_opts": {"max_returned_count": 500}}\n'
        'backend.mongo.hook.message.acked.1 = {"topic": "fleet/#", "action": {"function": "on_message_acked"}}\n'
    )
    await mongo.mqtt_acked.insert_one({"clientid": "s", "topic": "fleet/+/up", "msgid": "", "mid": 0})
    bridge = await make_bridge(rules, pools=POOL)
    publishers = [await Client(mqtt_port(bridge), f"dev{n}").connected() for n in range(4)]
    expected = []
    for chunk in range(10):  # 4 devices interleaved, 10,000 messages in all
        batches = [[(f"fleet/dev{n}/up", f"{chunk:02d}-{i:04d}-{n}".encode()) for i in range(250)] for n in range(4)]
        await asyncio.gather(*(p.publish_many(b, qos=1) for p, b in zip(publishers, batches, strict=True)))
    for publisher in publishers:
        await publisher.disconnect()
    await bridge.idle()
    assert await mongo.mqtt_msg.count_documents({}) == 10_000
    cursor = mongo.mqtt_msg.find({}, {"topic": 1, "payload": 1}).sort([("seq", 1), ("_id", 1)])
    expected = [(d["topic"], d["payload"]) async for d in cursor]
    per_device = [[p for t, p in expected if t == f"fleet/dev{n}/up"] for n in range(4)]
    assert all(p == sorted(p) and len(p) == 2500 for p in per_device)  # each device's order kept

    subscriber = await Client(mqtt_port(bridge), "s", clean=False).connected()
    await subscriber.subscribe("fleet/+/up", qos=1)
    received = [(m.topic, m.payload) for m in await subscriber.expect(10_000, timeout=120)]
    assert received == expected  # every message, once, in publish order across the four topics
    await subscriber.expect_nothing()
    await bridge.idle()
    offset = await mongo.mqtt_acked.find_one({"clientid": "s", "topic": "fleet/+/up"})
    last = await mongo.mqtt_msg.find_one({}, sort=[("seq", -1), ("_id", -1)])
    assert offset is not None and last is not None and offset["msgid"] == last["_id"]
    await subscriber.disconnect()


async def test_shipped_rules_and_template_work_uncommented(make_bridge: BridgeFactory, mongo: Db) -> None:
    shipped = (ROOT / "rules" / "mongo.conf").read_text()
    rules = "\n".join(line[2:] if line.startswith("# backend.") else line for line in shipped.splitlines())
    bridge = await make_bridge(rules, pools=POOL)  # the shipped templates/ are copied in
    device = await Client(mqtt_port(bridge), "sensor-1").connected()
    await device.publish("sensors/boiler", b'{"level": 4, "temp": 97}', qos=1)
    await device.publish("sensors/boiler", b'{"level": 1, "temp": 60}', qos=1)
    await device.publish("sensors/lamp", b"on", qos=1, retain=True)
    await device.disconnect()
    await bridge.idle()
    alarms = [doc async for doc in mongo.alarms.find({}, {"_id": 0, "at": 0})]
    assert alarms == [
        {"clientid": "sensor-1", "topic": "sensors/boiler", "level": 4, "detail": {"level": 4, "temp": 97}}
    ]
    assert await mongo.alarm_counts.find_one({}, {"_id": 0}) == {
        "clientid": "sensor-1",
        "alarms": 1,
        "last_topic": "sensors/boiler",
    }
    assert [d["payload"] async for d in mongo.mqtt_msg.find({"topic": "sensors/boiler"}).sort("seq", 1)] == [
        {"level": 4, "temp": 97},
        {"level": 1, "temp": 60},
    ]
    assert (await mongo.mqtt_client.find_one({"clientid": "sensor-1"}) or {}).get("state") == 0
    events = [d["event"] async for d in mongo.mqtt_event_log.find({"clientid": "sensor-1"})]
    assert sorted(events) == ["client.connected", "client.disconnected", *["message.publish"] * 3]
    assert all(counts["failed"] == 0 for counts in bridge.metrics.rules.values())


TLS_PORT, TLS_LISTENER = 27020, "127.0.0.1:27021"


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[Certificates]:
    certificates = make_certificates(tmp_path)
    stop_ferretdb(TLS_PORT)  # restarted with this test's certificates
    os.environ.update(
        HOOKBRIDGE_FERRETDB_TLS=TLS_LISTENER,
        HOOKBRIDGE_FERRETDB_TLS_CERT=str(certificates.cert),
        HOOKBRIDGE_FERRETDB_TLS_KEY=str(certificates.key),
    )
    try:
        start_ferretdb(TLS_PORT)
    finally:
        for name in ("HOOKBRIDGE_FERRETDB_TLS", "HOOKBRIDGE_FERRETDB_TLS_CERT", "HOOKBRIDGE_FERRETDB_TLS_KEY"):
            os.environ.pop(name)
    yield certificates
    stop_ferretdb(TLS_PORT)


async def test_tls_pool_writes_and_an_unverified_certificate_refuses_to_start(
    make_bridge: BridgeFactory, tls_server: Certificates
) -> None:
    rules = 'backend.mongo.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}\n'
    pool = f"backend.mongo.pool1.server = {TLS_LISTENER}\nbackend.mongo.pool1.ssl = on\n"
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        await make_bridge(rules, pools=pool)  # the test CA is not trusted by default
    bridge = await make_bridge(rules, pools=pool + f"backend.mongo.pool1.ssl.cafile = {tls_server.ca}\n")
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("t/tls", b"over TLS", qos=1)
    await client.disconnect()
    await bridge.idle()
    plain: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(f"mongodb://127.0.0.1:{TLS_PORT}/?directConnection=true")
    try:
        assert [(d["topic"], d["payload"]) async for d in plain.mqtt.mqtt_msg.find()] == [("t/tls", b"over TLS")]
        await plain.drop_database("mqtt")
    finally:
        await plain.close()
