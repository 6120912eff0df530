"""Redis commands and templates: hostile clientids, topics and payloads stay single arguments.

(Storing hostile data through the functions, and database outages, are in tests/conformance/.)"""

from __future__ import annotations

import os

import redis as redis_sync

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client

INJECTION = "x\r\n*3\r\n$3\r\nSET\r\n$8\r\ninjected\r\n$1\r\n1\r\n"
HOSTILE_IDS = ["a b \"c\" 'd'", "new\nline", INJECTION, "ü-日本-🙂", "*?[glob]\\"]
HOSTILE_TOPICS = ["a b/\"q\"/'s'", "line\nbreak", INJECTION.replace("*", "star"), "日本/🙂", "glob/*?[x]\\"]
PAYLOADS = [
    b"\x00\xff\xfe binary \r\n",
    INJECTION.encode(),
    b"\x80\x81 not utf-8",
    os.urandom((1 << 20) - 4096),
    b"",
]  # inside the 1MB packet limit

COMMAND_RULES = """
backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_store"}}
backend.redis.hook.message.publish.2 = {"topic": "#", "action": {"commands": ["HSET raw:${clientid} ${topic} ${payload}", "HSET field:${clientid} json ${payload.a.b} missing ${payload.nope}"]}}
backend.redis.hook.message.publish.3 = {"topic": "#", "action": {"template": "redis/copy.j2"}}
"""
TEMPLATE = """{% if qos > 0 %}
SET tpl:{{ clientid }}:{{ topic }} {{ payload }}
{% endif %}
"""


async def test_hostile_input_is_stored_byte_exact(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge(COMMAND_RULES, templates={"redis/copy.j2": TEMPLATE})
    expected_keys: set[bytes] = set()
    for clientid, topic, payload in zip(HOSTILE_IDS, HOSTILE_TOPICS, PAYLOADS, strict=True):
        client = await Client(mqtt_port(bridge), clientid).connected()
        await client.publish(topic, payload, qos=1)
        await client.disconnect()
        await bridge.idle()
        ids = redis_db.zrange(f"mqtt:msg:{topic}".encode(), 0, -1)
        assert len(ids) == 1
        stored = redis_db.hgetall(b"mqtt:msg:" + ids[0])
        assert stored[b"payload"] == payload
        assert stored[b"from"] == clientid.encode()
        assert stored[b"topic"] == topic.encode()
        assert redis_db.hgetall(f"raw:{clientid}".encode()) == {topic.encode(): payload}
        assert redis_db.get(f"tpl:{clientid}:{topic}".encode()) == payload
        expected_keys |= {
            f"mqtt:msg:{topic}".encode(),
            b"mqtt:msg:" + ids[0],
            f"raw:{clientid}".encode(),
            f"tpl:{clientid}:{topic}".encode(),
            f"field:{clientid}".encode(),
        }
    # the topic index holds each hostile topic as one member, byte-exact
    assert set(redis_db.zrange("mqtt:index:msg", 0, -1)) == {topic.encode() for topic in HOSTILE_TOPICS}
    # nothing else was written: no `injected` key, no split arguments
    # (the index marker appears once the start-up build, done in the background, is finished)
    assert set(redis_db.keys("*")) - {b"mqtt:index:built"} == expected_keys | {b"mqtt:index:msg"}
    assert redis_db.exists("injected") == 0


async def test_json_placeholders(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge(COMMAND_RULES, templates={"redis/copy.j2": TEMPLATE})
    client = await Client(mqtt_port(bridge), "dev").connected()
    await client.publish("t", b'{"a": {"b": "x y\\r\\nSET z 1"}}', qos=1)
    await client.disconnect()
    await bridge.idle()
    # a nested value is one argument; a missing field renders as null (empty in Redis)
    assert redis_db.hgetall("field:dev") == {b"json": b"x y\r\nSET z 1", b"missing": b""}
    assert redis_db.exists("z") == 0
