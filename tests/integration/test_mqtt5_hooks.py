"""`${proto_ver}` and `${user_property.<name>}` through the dispatcher, the runner and a real Redis.

The first tests build the events as a broker source makes them for an MQTT 5.0 client and feed
them to the running bridge's dispatcher; the last one has real 5.0 and 3.1.1 clients (paho) make
them in the embedded broker, from their CONNECT and PUBLISH packets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
import redis as redis_sync

from bridge.app import Bridge
from bridge.events import ClientConnected, Event, MessageAcked, MessagePublish
from support.bridges import BridgeFactory
from support.services import postgres_dsn, start_postgres

INJECTION = "x\r\n*3\r\n$3\r\nSET\r\n$8\r\ninjected\r\n$1\r\n1\r\n"
PROPS = (("app", "first"), ("app", "second"), ("evil", INJECTION), ("x y\r\nDEL *", "hostile name"))

RULES = """
backend.redis.hook.client.connected.1 = {"action": {"commands": ["HSET proto:${clientid} connected ${proto_ver}"]}}
backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"commands": ["HSET props:${msgid} v ${proto_ver} app ${user_property.app} evil ${user_property.evil} none ${user_property.nope}"]}}
backend.redis.hook.message.publish.2 = {"topic": "#", "action": {"function": "on_message_publish"}}
backend.redis.hook.message.publish.3 = {"topic": "#", "action": {"function": "on_event_log"}}
backend.redis.hook.message.acked.1 = {"action": {"template": "redis/props.j2"}}
"""
TEMPLATE = """{% for name, value in user_properties %}
RPUSH acked:{{ clientid }}:{{ name }} {{ value }}
{% endfor %}
HSET acked:{{ clientid }} v {{ proto_ver }} app {{ user_property.app }}
"""

MSGID_5 = "0" * 31 + "5"
MSGID_4 = "0" * 31 + "4"


def _publish(msgid: str, proto_ver: int, props: tuple[tuple[str, str], ...]) -> MessagePublish:
    return MessagePublish(
        msgid,
        "dev",
        None,
        "t/1",
        1,
        b"hello",
        False,
        "n",
        "127.0.0.1:1",
        1.5,
        proto_ver=proto_ver,
        user_properties=props,
    )


async def _dispatch(bridge: Bridge, *events: Event) -> None:
    for event in events:
        done = await bridge.dispatcher(event)
        if isinstance(done, asyncio.Future):
            await done  # committed to Redis
    await bridge.idle()


async def test_mqtt5_fields_are_stored_as_bound_values(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge(RULES, templates={"redis/props.j2": TEMPLATE})
    acked = MessageAcked(
        MSGID_5, "sub", None, "dev", "t/1", 1, b"hello", False, "n", 2.0, proto_ver=5, user_properties=PROPS
    )
    await _dispatch(
        bridge,
        ClientConnected("dev", None, "n", "127.0.0.1:1", 1.0, proto_ver=5),
        ClientConnected("old", None, "n", "127.0.0.1:2", 1.0),
        _publish(MSGID_5, 5, PROPS),
        _publish(MSGID_4, 4, ()),
        acked,
    )
    assert redis_db.hgetall("proto:dev") == {b"connected": b"5"}
    assert redis_db.hgetall("proto:old") == {b"connected": b"4"}
    # the first value of a repeated name; a hostile value is one argument; a missing name is empty
    assert redis_db.hgetall(f"props:{MSGID_5}") == {
        b"v": b"5",
        b"app": b"first",
        b"evil": INJECTION.encode(),
        b"none": b"",
    }
    assert redis_db.hgetall(f"props:{MSGID_4}") == {b"v": b"4", b"app": b"", b"evil": b"", b"none": b""}
    # the template: every pair in order, a hostile name inside its key argument
    assert redis_db.lrange("acked:sub:app", 0, -1) == [b"first", b"second"]
    assert redis_db.lrange("acked:sub:evil", 0, -1) == [INJECTION.encode()]
    assert redis_db.lrange("acked:sub:x y\r\nDEL *", 0, -1) == [b"hostile name"]
    assert redis_db.hgetall("acked:sub") == {b"v": b"5", b"app": b"first"}
    assert redis_db.exists("injected") == 0

    # the stored layouts do not change for a 5.0 message: the same fields as for a 3.1.1 one
    stored_5 = redis_db.hgetall(f"mqtt:msg:{MSGID_5}")
    stored_4 = redis_db.hgetall(f"mqtt:msg:{MSGID_4}")
    assert stored_5.keys() == stored_4.keys() and stored_5[b"payload"] == b"hello"
    log = redis_db.xrange("mqtt:event_log")
    assert len(log) == 2 and log[0][1].keys() == log[1][1].keys()


PG_PORT = 5439
PG_POOL = (
    f"backend.pgsql.pool1.server = 127.0.0.1:{PG_PORT}\nbackend.pgsql.pool1.username = hookbridge\n"
    "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = mqtt\n"
)
PG_RULES = """
backend.pgsql.hook.message.publish.1 = {"action": {"sql": ["insert into mqtt5_props (msgid, proto_ver, app, quoted, none) values (${msgid}, ${proto_ver}, '${user_property.app}', ${user_property.it's}, ${user_property.nope})"]}}
"""


@pytest.fixture
async def pg() -> AsyncIterator[asyncpg.Connection]:
    start_postgres(PG_PORT)
    conn = await asyncpg.connect(postgres_dsn(PG_PORT))
    await conn.execute("DROP TABLE IF EXISTS mqtt5_props")
    await conn.execute("CREATE TABLE mqtt5_props (msgid text, proto_ver int, app text, quoted text, none text)")
    yield conn
    await conn.execute("DROP TABLE IF EXISTS mqtt5_props")
    await conn.close()


async def test_mqtt5_fields_are_sql_parameters(make_bridge: BridgeFactory, pg: asyncpg.Connection) -> None:
    bridge = await make_bridge(PG_RULES, pools=PG_POOL)
    evil = "x'); DROP TABLE mqtt5_props; --"
    await _dispatch(
        bridge,
        _publish(MSGID_5, 5, (("app", evil), ("it's", "quoted name"), ("app", "second"))),
        _publish(MSGID_4, 4, ()),
    )
    rows = await pg.fetch("SELECT msgid, proto_ver, app, quoted, none FROM mqtt5_props ORDER BY msgid")
    assert [tuple(r) for r in rows] == [(MSGID_4, 4, None, None, None), (MSGID_5, 5, evil, "quoted name", None)]


EMBEDDED_RULES = """
backend.redis.hook.client.connected.1 = {"action": {"commands": ["HSET hook:${clientid} connected ${proto_ver}"]}}
backend.redis.hook.client.disconnected.1 = {"action": {"commands": ["HSET hook:${clientid} disconnected ${proto_ver}"]}}
backend.redis.hook.session.subscribed.1 = {"action": {"commands": ["HSET hook:${clientid} subscribed ${proto_ver}"]}}
backend.redis.hook.session.unsubscribed.1 = {"action": {"commands": ["HSET hook:${clientid} unsubscribed ${proto_ver}"]}}
backend.redis.hook.message.publish.1 = {"action": {"commands": ["HSET pub:${clientid} v ${proto_ver} app ${user_property.app}"]}}
backend.redis.hook.message.delivered.1 = {"action": {"commands": ["HSET dlv:${clientid} v ${proto_ver} app ${user_property.app}"]}}
backend.redis.hook.message.acked.1 = {"action": {"commands": ["HSET ack:${clientid} v ${proto_ver} app ${user_property.app}"]}}
"""


async def test_embedded_broker_fills_the_fields_for_real_5_0_and_3_1_1_clients(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    from paho.mqtt.packettypes import PacketTypes

    from support.bridges import eventually, mqtt_port
    from support.mqtt import V5, V311, Client
    from support.mqtt_properties import props

    bridge = await make_bridge(EMBEDDED_RULES)
    port = mqtt_port(bridge)
    clients = {
        name: Client(port, name, version=V5 if name.endswith("5") else V311) for name in ("sub5", "sub4", "pub5")
    }
    try:
        for client in clients.values():
            await client.connect()
        for name in ("sub5", "sub4"):
            await clients[name].subscribe("t/#", 1)
        sent = props(PacketTypes.PUBLISH, UserProperty=[("app", "a1"), ("app", "a2")])
        await clients["pub5"].publish("t/1", b"x", qos=1, properties=sent)
        received = await clients["sub5"].message()
        assert received.properties["UserProperty"] == [("app", "a1"), ("app", "a2")]  # forwarded unchanged
        await clients["sub4"].message()
        await clients["sub4"].unsubscribe("t/#")
        await clients["pub5"].disconnect()
    finally:
        for client in clients.values():
            await client.close()

    async def read(key: str) -> dict[bytes, bytes]:
        return redis_db.hgetall(key)  # type: ignore[return-value]

    await eventually(lambda: read("ack:sub4"), lambda h: len(h) == 2)
    hooks = {"pub5": 2, "sub5": 3, "sub4": 4}  # the disconnects come after the clients closed
    for name, count in hooks.items():
        await eventually(lambda name=name: read(f"hook:{name}"), lambda h, count=count: len(h) == count)
    await bridge.idle()
    assert await read("hook:pub5") == {b"connected": b"5", b"disconnected": b"5"}
    assert await read("hook:sub5") == {b"connected": b"5", b"subscribed": b"5", b"disconnected": b"5"}
    sub4 = {b"connected": b"4", b"subscribed": b"4", b"unsubscribed": b"4", b"disconnected": b"4"}
    assert await read("hook:sub4") == sub4
    assert await read("pub:pub5") == {b"v": b"5", b"app": b"a1"}
    # the receiver's level; the message's user properties, whatever the receiver speaks
    for key, level in (("dlv:sub5", b"5"), ("ack:sub5", b"5"), ("dlv:sub4", b"4"), ("ack:sub4", b"4")):
        assert await eventually(lambda key=key: read(key), lambda h: len(h) == 2) == {b"v": level, b"app": b"a1"}
