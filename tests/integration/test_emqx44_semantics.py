"""EMQX 4.4's semantics as pool settings (docs/import-emqx.md#emqx-44s-semantics), on the embedded
broker and a real Redis: each setting changes what a client receives or what Redis holds, and an
ordinary config (the setting absent) keeps hookbridge's own behaviour.

- `fetch_clean_sessions = on`: a clean-session client's new QoS>0 subscription gets the stored
  messages after its offset (EMQX fetched for any session); off: only persistent sessions do.
- `timestamps = milliseconds`: online_at, offline_at and a message's ts in milliseconds.
- `default_expired_time = 7200`: a message stored by a rule without expired_time expires.

And all three at once, from a config `import-emqx` wrote from the Chinese Redis page's file.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from bridge.app import Bridge, Paths
from bridge.cli import main
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client, ConnAck, wait_until
from support.services import ROOT, start_redis

# This module's own Redis (started by the project's script, reused when up): its tests flush it,
# and the shared test Redis may be in use by a parallel run.
PRIVATE_REDIS_PORT = 6479

PUBSUB = """\
backend.redis.hook.message.publish.1 = {"topic": "pubsub/#", "action": {"function": "on_message_publish"}, "pool": "pool1"}
backend.redis.hook.session.subscribed.1 = {"topic": "pubsub/#", "action": {"function": "on_message_fetch_for_pubsub"}, "pool": "pool1"}
backend.redis.hook.message.acked.1 = {"topic": "pubsub/#", "action": {"function": "on_message_acked_for_pubsub"}, "pool": "pool1"}
backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}, "pool": "pool1"}
backend.redis.hook.client.disconnected.1 = {"action": {"function": "on_client_disconnected"}, "pool": "pool1"}
"""


@pytest.fixture(scope="module")
def redis_port() -> int:
    start_redis(PRIVATE_REDIS_PORT)
    return PRIVATE_REDIS_PORT


@pytest.fixture
def redis_db(redis_port: int) -> Iterator[redis_sync.Redis]:
    client = redis_sync.Redis(port=redis_port, protocol=2)
    client.flushall()
    yield client
    client.close()


@pytest.mark.parametrize("setting", ["on", None])
async def test_a_clean_session_gets_its_offline_messages_only_with_fetch_clean_sessions(
    setting: str | None, make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    extra = f"backend.redis.pool1.fetch_clean_sessions = {setting}\n" if setting else ""
    bridge = await make_bridge(PUBSUB, extra)
    port = mqtt_port(bridge)
    device = await Client(port, "clean-device", clean=True).connected()
    await device.subscribe("pubsub/#", qos=1)  # a first subscription: the offset starts here (with the setting)
    await bridge.idle()
    await device.disconnect()

    publisher = await Client(port, "app").connected()
    for n in range(3):
        await publisher.publish("pubsub/cmd", f"while away {n}".encode(), qos=1)
    await publisher.disconnect()
    await bridge.idle()
    assert redis_db.zcard("mqtt:msg:pubsub/cmd") == 3

    device = await Client(port, "clean-device", clean=True).connected()
    assert device.connack == ConnAck(
        reason=0, session_present=False, properties={}
    )  # a clean session: nothing of the broker's own is resumed
    await device.subscribe("pubsub/#", qos=1)
    if setting == "on":
        got = await device.expect(3)
        assert [(m.topic, m.payload, m.qos) for m in got] == [
            ("pubsub/cmd", f"while away {n}".encode(), 1) for n in range(3)
        ]
        newest = redis_db.zrange("mqtt:msg:pubsub/cmd", -1, -1)[0]
        await wait_until(lambda: redis_db.get("mqtt:acked:clean-device:pubsub/#") == newest, what="offset")
    else:
        await bridge.idle()
        await device.expect_nothing()
        assert redis_db.exists("mqtt:acked:clean-device:pubsub/#") == 0
    await device.disconnect()


@pytest.mark.parametrize("unit", ["milliseconds", None])
async def test_redis_times_in_the_pools_unit(
    unit: str | None, make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    extra = f"backend.redis.pool1.timestamps = {unit}\n" if unit else ""
    scale = 1000 if unit == "milliseconds" else 1
    bridge = await make_bridge(PUBSUB, extra)
    before = int(time.time() * scale)
    client = await Client(mqtt_port(bridge), "timed", clean=False).connected()
    await client.publish("pubsub/t", b"x", qos=1)
    await bridge.idle()
    online_at = int(redis_db.hget("mqtt:client:timed", "online_at") or 0)
    msgid = redis_db.zrange("mqtt:msg:pubsub/t", 0, -1)[0].decode()
    ts = int(redis_db.hget(f"mqtt:msg:{msgid}", "ts") or 0)
    await client.disconnect()
    await bridge.idle()
    assert redis_db.hget("mqtt:client:timed", "state") == b"0"
    offline_at = int(redis_db.hget("mqtt:client:timed", "offline_at") or 0)
    after = int(time.time() * scale) + 1
    for name, value in (("online_at", online_at), ("ts", ts), ("offline_at", offline_at)):
        assert before <= value <= after, (name, value, before, after)


@pytest.mark.parametrize("default", [7200, None])
async def test_default_expired_time_applies_to_rules_without_expired_time(
    default: int | None, make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    extra = f"backend.redis.pool1.default_expired_time = {default}\n" if default else ""
    rules = PUBSUB + (
        'backend.redis.hook.message.publish.2 = {"topic": "kept/#", "action": {"function": "on_message_store"},'
        ' "expired_time": 60, "pool": "pool1"}\n'
    )
    bridge = await make_bridge(rules, extra)
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("pubsub/a", b"default", qos=1)
    await client.publish("kept/a", b"its own", qos=1)
    await client.disconnect()
    await bridge.idle()
    default_id = redis_db.zrange("mqtt:msg:pubsub/a", 0, -1)[0].decode()
    own_id = redis_db.zrange("mqtt:msg:kept/a", 0, -1)[0].decode()
    ttl = redis_db.ttl(f"mqtt:msg:{default_id}")
    if default:
        assert default - 120 <= ttl <= default
    else:
        assert ttl == -1  # hookbridge's own default: no expiry
    assert 0 < redis_db.ttl(f"mqtt:msg:{own_id}") <= 60  # a rule's own expired_time wins


@pytest.fixture
async def imported_bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_port: int) -> AsyncIterator[Bridge]:
    """A bridge started from what `import-emqx` writes for EMQX 4.4's Chinese Redis page (its
    `emqx_backend_redis.conf` as the page shows it, pointed at this module's Redis, its store rule
    without the page's own expired_time)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOOKBRIDGE_MQTT_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("HOOKBRIDGE_METRICS_LISTEN", "off")
    monkeypatch.setenv("HOOKBRIDGE_SPOOL_DIR", str(tmp_path / "spool"))
    page = ROOT / "tests" / "fixtures" / "emqx44" / "pages" / "zh_CN" / "emqx_backend_redis.conf"
    text = page.read_text(encoding="utf-8")
    assert "backend.redis.pool1.server = 127.0.0.1:6379" in text and "msg.expired_after" not in text
    source = tmp_path / "emqx" / "etc" / "plugins"
    source.mkdir(parents=True)
    text = text.replace("server = 127.0.0.1:6379", f"server = 127.0.0.1:{redis_port}")
    # the store rule without its own expired_time, as many users' files have it: EMQX's default applies
    own = '"on_message_publish"}, "expired_time" : 3600,'
    assert own in text
    text = text.replace(own, '"on_message_publish"},')
    (source / page.name).write_text(text, encoding="utf-8")
    out = tmp_path / "hookbridge"
    assert main(["import-emqx", str(tmp_path / "emqx"), "--out", str(out)]) == 0
    bridge = Bridge.load(Paths(out / "config" / "bridge.conf", out / "rules"))
    await bridge.start()
    yield bridge
    await bridge.stop(drain_timeout=5)


async def test_a_config_written_by_import_emqx_behaves_as_emqx_44(
    imported_bridge: Bridge, redis_db: redis_sync.Redis
) -> None:
    port = mqtt_port(imported_bridge)
    before = int(time.time() * 1000)
    device = await Client(port, "zh-device", clean=True).connected()
    await device.subscribe("pubsub/#", qos=1)  # the page's on_message_fetch_for_pubsub: the offset starts
    await imported_bridge.idle()
    await device.disconnect()
    await imported_bridge.idle()
    assert redis_db.hget("mqtt:client:zh-device", "state") == b"0"

    publisher = await Client(port, "zh-app").connected()
    await publisher.publish("pubsub/cmd", b"while away", qos=1)
    await publisher.disconnect()
    await imported_bridge.idle()

    device = await Client(port, "zh-device", clean=True).connected()
    await device.subscribe("pubsub/#", qos=1)
    assert [(m.topic, m.payload) for m in await device.expect(1)] == [("pubsub/cmd", b"while away")]
    after = int(time.time() * 1000) + 1

    client = redis_db.hgetall("mqtt:client:zh-device")
    assert before <= int(client[b"online_at"]) <= after  # milliseconds
    assert before <= int(client[b"offline_at"]) <= after
    msgid = redis_db.zrange("mqtt:msg:pubsub/cmd", 0, -1)[0]
    assert before <= int(redis_db.hget(b"mqtt:msg:" + msgid, "ts") or 0) <= after
    # no msg.expired_after and no expired_time on the rule: EMQX's default lifetime, 7200 s
    assert 7000 < redis_db.ttl(b"mqtt:msg:" + msgid) <= 7200
    await device.disconnect()
