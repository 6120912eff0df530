"""`broker.mode = mqtt` against Debian's Mosquitto (scripts/mosquitto.sh), end to end into Redis.

The bridge subscribes with its own persistent session; publishers are ordinary
paho clients. Client events come from Mosquitto's log lines on `$SYS/broker/log/...`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis as redis_sync

from bridge.app import Bridge
from bridge.brokers.external.mqtt import MqttSource
from support.bridges import BridgeFactory, eventually
from support.mqtt import Client
from support.services import ROOT, start_mosquitto
from tests.integration.mqtt_support import MOSQUITTO_PORT, external_config

RULES = """\
backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}
backend.redis.hook.client.disconnected.1 = {"action": {"function": "on_client_disconnected"}}
backend.redis.hook.message.publish.1 = {"topic": ["sensors/#", "ret/#"], "action": {"function": "on_message_publish"}}
backend.redis.hook.message.publish.2 = {"topic": "ret/#", "action": {"function": "on_message_retain"}}
backend.redis.hook.message.publish.3 = {"topic": "ret/#", "action": {"function": "on_retain_delete"}}
backend.redis.hook.message.publish.4 = {"topic": "qos0/#", "action": {"function": "on_message_store"}}
backend.redis.hook.session.subscribed.1 = {"action": {"commands": ["HSET mqtt:sub:${clientid} ${topic} ${qos}"]}}
backend.redis.hook.session.unsubscribed.1 = {"action": {"commands": ["HDEL mqtt:sub:${clientid} ${topic}"]}}
"""


# make_bridge gives each bridge its own spool.dir once the spool is merged (tests/conftest.py);
# before that, external_config sets one.
_MAKE_BRIDGE_SETS_SPOOL = "spool.dir" in Path(__file__).parents[1].joinpath("conftest.py").read_text()


@pytest.fixture(scope="session")
def mosquitto() -> int:
    start_mosquitto(MOSQUITTO_PORT)
    return MOSQUITTO_PORT


async def _bridge(make_bridge: BridgeFactory, tmp_path: Path, rules: str = RULES, **kw: str) -> Bridge:
    bridge = await make_bridge(rules, external_config(tmp_path, state=not _MAKE_BRIDGE_SETS_SPOOL, **kw))
    assert isinstance(bridge.broker, MqttSource)
    await asyncio.wait_for(bridge.broker._connection.connected.wait(), 10)  # type: ignore[union-attr]
    await asyncio.sleep(0.2)  # SUBACK
    return bridge


async def test_every_supported_function_end_to_end(
    mosquitto: int,
    make_bridge: BridgeFactory,
    redis_db: redis_sync.Redis,
    tmp_path: Path,
    paho_clients: Callable[..., Client],
) -> None:
    await _bridge(make_bridge, tmp_path)
    cid = f"dev-{uuid.uuid4().hex[:6]}"
    dev = paho_clients(mosquitto, cid, clean=False)
    await dev.connect()
    client_key = f"mqtt:client:{cid}".encode()

    async def client_hash() -> dict[bytes, bytes]:
        return redis_db.hgetall(client_key)  # type: ignore[return-value]

    online = await eventually(client_hash, lambda h: h.get(b"state") == b"1")
    assert online[b"offline_at"] == b"undefined"
    assert redis_db.hexists(b"mqtt:node:test@127.0.0.1", cid)

    await dev.subscribe([("cmd/a", 1), ("cmd/+", 2)])
    subs = await eventually(lambda: _read(redis_db.hgetall, f"mqtt:sub:{cid}"), lambda h: len(h) == 2)
    assert subs == {b"cmd/a": b"1", b"cmd/+": b"2"}
    await dev.unsubscribe("cmd/a")
    await eventually(lambda: _read(redis_db.hgetall, f"mqtt:sub:{cid}"), lambda h: h == {b"cmd/+": b"2"})

    for i in range(5):
        await dev.publish("sensors/t1", f"m{i}".encode(), qos=1)
    await dev.publish("sensors/t1", b"zero", qos=0)  # QoS 0: on_message_publish skips it
    await dev.publish("qos0/x", b"q0", qos=0)  # on_message_store keeps every QoS
    ids = await eventually(lambda: _read(redis_db.zrange, "mqtt:msg:sensors/t1", 0, -1), lambda z: len(z) == 5)
    payloads = [redis_db.hget(b"mqtt:msg:" + i, "payload") for i in ids]
    assert payloads == [b"m0", b"m1", b"m2", b"m3", b"m4"]  # publish order
    detail = redis_db.hgetall(b"mqtt:msg:" + ids[0])
    assert detail[b"topic"] == b"sensors/t1" and detail[b"qos"] == b"1" and detail[b"retain"] == b"false"
    assert all(len(i) == 32 for i in ids)
    await eventually(lambda: _read(redis_db.zcard, "mqtt:msg:qos0/x"), lambda n: n == 1)

    await dev.publish("ret/a", b"kept", qos=1, retain=True)
    retained = await eventually(lambda: _read(redis_db.zrange, "mqtt:retain:ret/a", 0, -1), lambda z: len(z) == 1)
    assert redis_db.hget(b"mqtt:msg:" + retained[0], "payload") == b"kept"
    await dev.publish("ret/a", b"", qos=1, retain=True)
    await eventually(lambda: _read(redis_db.exists, "mqtt:retain:ret/a"), lambda n: n == 0)

    await dev.disconnect()
    offline = await eventually(client_hash, lambda h: h.get(b"state") == b"0")
    assert offline[b"offline_at"] != b"undefined"
    assert not redis_db.hexists(b"mqtt:node:test@127.0.0.1", cid)
    await mosquitto_publish(mosquitto, "sensors/t1", b"after")  # the bridge still takes messages
    await eventually(lambda: _read(redis_db.zcard, "mqtt:msg:sensors/t1"), lambda n: n == 6)


async def _read(fn: Callable[..., object], *args: object) -> object:
    return fn(*args)


async def mosquitto_publish(port: int, topic: str, payload: bytes, qos: int = 1) -> None:
    proc = await asyncio.create_subprocess_exec(
        "mosquitto_pub", "-p", str(port), "-t", topic, "-m", payload.decode(), "-q", str(qos)
    )
    assert await proc.wait() == 0


async def test_two_bridges_on_one_shared_subscription_store_every_message_once(
    mosquitto: int,
    make_bridge: BridgeFactory,
    redis_db: redis_sync.Redis,
    tmp_path: Path,
    paho_clients: Callable[..., Client],
) -> None:
    rules = (
        'backend.redis.hook.message.publish.1 = {"topic": "shared/#", "action": {"function": "on_message_publish"}}\n'
    )
    group = f"g{uuid.uuid4().hex[:6]}"
    one = await _bridge(make_bridge, tmp_path / "one", rules, extra=f"broker.shared_group = {group}\n")
    two = await _bridge(make_bridge, tmp_path / "two", rules, extra=f"broker.shared_group = {group}\n")
    assert one.broker.subscriptions()[0][0] == f"$share/{group}/shared/#"  # type: ignore[attr-defined]
    pub = paho_clients(mosquitto, f"pub-{uuid.uuid4().hex[:6]}")
    await pub.connect()
    total = 2000
    acks = [pub.send(f"shared/{i % 10}", b"%d" % i, qos=1) for i in range(total)]
    async with asyncio.timeout(30):
        await asyncio.gather(*acks)

    async def stored() -> int:
        return sum(redis_db.zcard(f"mqtt:msg:shared/{k}") for k in range(10))

    await eventually(stored, lambda n: n >= total, timeout=30)
    await one.idle()
    await two.idle()
    assert await stored() == total
    payloads = {redis_db.hget(k, "payload") for k in redis_db.scan_iter(b"mqtt:msg:????????????????????????????????")}
    assert payloads == {b"%d" % i for i in range(total)}  # every message, each once
    # both processes took part of the stream
    assert one.metrics.events["message.publish"] > 0 and two.metrics.events["message.publish"] > 0
    assert one.metrics.events["message.publish"] + two.metrics.events["message.publish"] == total


async def test_the_shipped_mqtt_rules_store_client_events_beside_their_hash_rule(
    mosquitto: int,
    make_bridge: BridgeFactory,
    redis_db: redis_sync.Redis,
    tmp_path: Path,
    paho_clients: Callable[..., Client],
) -> None:
    """deploy/rules-mqtt has `message.publish` rules on `#`: `#` never matches `$SYS/...`, so the
    bridge must still subscribe to Mosquitto's log topics for the client events."""
    rules = (ROOT / "deploy" / "rules-mqtt" / "redis.conf").read_text()
    bridge = await _bridge(make_bridge, tmp_path, rules)
    subscribed = [t for t, _ in bridge.broker.subscriptions()]  # type: ignore[attr-defined]
    assert "#" in subscribed and "$SYS/broker/log/N" in subscribed

    async def online(cid: str) -> bytes | None:
        return redis_db.hget(f"mqtt:client:{cid}", "state")  # type: ignore[return-value]

    # The log subscriptions are active once a probe's connect reaches Redis.
    for _ in range(50):
        probe = f"probe-{uuid.uuid4().hex[:6]}"
        await paho_clients(mosquitto, probe).connect()
        try:
            await eventually(functools.partial(online, probe), lambda s: s == b"1", timeout=0.5)
            break
        except AssertionError:
            continue
    else:
        raise AssertionError("no client event reached Redis with the shipped mqtt rules")

    cid = f"dev-{uuid.uuid4().hex[:6]}"
    dev = paho_clients(mosquitto, cid)
    await dev.connect()
    await eventually(lambda: online(cid), lambda s: s == b"1")
    await dev.publish("any/where", b"hello", qos=1)
    ids = await eventually(lambda: _read(redis_db.zrange, "mqtt:msg:any/where", 0, -1), lambda z: len(z) == 1)
    assert redis_db.hget(b"mqtt:msg:" + ids[0], "payload") == b"hello"
    await dev.disconnect()
    await eventually(lambda: online(cid), lambda s: s == b"0")


async def test_rules_needing_what_the_mode_lacks_are_refused(tmp_path: Path, make_bridge: BridgeFactory) -> None:
    from bridge.conf.errors import ConfErrors

    rules = 'backend.redis.hook.client.connected.1 = {"action": {"function": "on_subscribe_lookup"}}\n'
    with pytest.raises(ConfErrors) as caught:
        await make_bridge(rules, external_config(tmp_path, state=not _MAKE_BRIDGE_SETS_SPOOL))
    assert "function on_subscribe_lookup needs proxy-subscribe, which broker mode mqtt does not offer" in str(
        caught.value.errors[0]
    )


def test_message_filters_never_overlap() -> None:
    from bridge.brokers.external.mqtt.filters import subscription_filters

    assert subscription_filters(["a/#", "a/b", "c/+"]) == ["a/#", "c/+"]
    assert subscription_filters(["a/+", "+/b"]) == ["#"]
    assert subscription_filters([None, "x"]) == ["#"]
    assert subscription_filters(["a/+/c", "a/b/d"]) == ["a/+/c", "a/b/d"]
    assert json.dumps(subscription_filters(["s/1", "s/2"])) == '["s/1", "s/2"]'


async def test_user_properties_of_a_5_0_publisher_reach_the_rules(
    mosquitto: int, make_bridge: BridgeFactory, redis_db: redis_sync.Redis, tmp_path: Path
) -> None:
    """Mosquitto forwards a 5.0 PUBLISH's user properties to the bridge's 5.0 session; the
    publisher's protocol level is not forwarded, so `${proto_ver}` is 4."""
    topic = f"props/{uuid.uuid4().hex[:6]}"
    rules = (
        'backend.redis.hook.message.publish.1 = {"topic": "props/#", "action": {"commands": '
        '["HSET up:${topic} app ${user_property.app} evil ${user_property.evil} none ${user_property.nope} v ${proto_ver}"]}}\n'
    )
    await _bridge(make_bridge, tmp_path, rules)
    evil = "a b 'c' \"d\" DEL *"  # Mosquitto 2.0.11 drops a publisher whose properties hold \r\n
    command = ["mosquitto_pub", "-p", str(mosquitto), "-V", "mqttv5", "-q", "1", "-t", topic, "-m", "x"]
    for name, value in (("app", "first"), ("app", "second"), ("evil", evil)):
        command += ["-D", "publish", "user-property", name, value]
    run = functools.partial(subprocess.run, command, check=True, capture_output=True, timeout=10)
    await asyncio.to_thread(run)
    stored = await eventually(lambda: _read(redis_db.hgetall, f"up:{topic}"), lambda h: len(h) == 4)
    assert stored == {b"app": b"first", b"evil": evil.encode(), b"none": b"", b"v": b"4"}
