"""`hookbridge migrate-emqx44` on a real Redis: data written as EMQX 4.4 Enterprise's Redis backend
writes it (seed 003: base62 `emqx_guid` ids), migrated twice and after interruptions, then served
by a real bridge (embedded broker, the shipped rules/redis.conf) in one order with what hookbridge
stores after the switch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
import redis.asyncio as aioredis

from actions.redis.emqx44 import migrate_redis
from bridge.cli import main
from bridge.emqx44.survey import MigrationRefused
from bridge.emqx_msgid import convert
from bridge.msgid import hookbridge_id
from support.bridges import mqtt_port
from support.conf import config_text
from support.emqx_ids import emqttd_base62, emqx_base62, guid, to_hexstr
from support.mqtt import Client, wait_until
from support.services import start_redis, stop_redis

EMQX_NODE_PID = 0x0A0B0C0D0E0F
OWN_REDIS_PORT = 6457  # not the shared test Redis: these tests compare whole keyspaces


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    """Overrides conftest's: a Redis of this module's own (redis_db and make_bridge use it)."""
    start_redis(OWN_REDIS_PORT)
    yield OWN_REDIS_PORT
    stop_redis(OWN_REDIS_PORT)  # the 48 node/process bits of emqx_guid


def emqx_id(ts_us: int, seq: int, encode: Callable[[int], str] = emqttd_base62) -> str:
    """emqx_guid of <<Ts:64, NPid:48, Seq:16>>, in the text `encode` gives it (EMQX's own encoders)."""
    return encode(guid(ts_us, EMQX_NODE_PID, seq))


def test_the_documented_emqx_id_decodes_to_its_publish_time() -> None:
    # seed 003: message 2VFt0kuNrOktefX6m4nP has "ts" 1542338754
    new = hookbridge_id(b"2VFt0kuNrOktefX6m4nP")
    assert new is not None and int(new[:16], 16) // 1_000_000 == 1542338754
    assert hookbridge_id(new.encode()) is None  # already hookbridge's
    assert hookbridge_id(b"not-an-id") is None


BASE_S = int(time.time()) - 3600  # EMQX stored these an hour before the switch
# One queue holding every id form: 3.x/4.x emqx_base62 (what 4.4 wrote), 2.x base62, 32 hex
FORMS = {
    "e1": emqx_base62,
    "e2": emqttd_base62,
    "e3": to_hexstr,
    "ret": emqx_base62,
    "str": emqttd_base62,
    "hash": emqx_base62,
}


def _message(msgid: str, topic: str, payload: str, ts: int, retain: str) -> dict[str, Any]:
    return {"id": msgid, "from": "emqx-pub", "qos": 1, "topic": topic, "payload": payload, "ts": ts, "retain": retain}


def write_as_emqx44(r: redis_sync.Redis) -> dict[str, str]:
    """What EMQX 4.4's Redis backend leaves behind (seed 003's keys), with its ids in each form EMQX
    wrote, and a retained message in each form of `mqtt:retain:<topic>`."""
    ids = {name: emqx_id((BASE_S + n) * 1_000_000 + 1234, n, FORMS[name]) for n, name in enumerate(FORMS)}
    r.hset("mqtt:client:dev1", mapping={"state": 0, "online_at": BASE_S, "offline_at": BASE_S + 5})
    r.hset("mqtt:node:emqx@127.0.0.1", "other", BASE_S)
    r.hset("mqtt:sub:dev1", "proxy/dev1", 1)  # the proxy subscription
    for n, name in enumerate(["e1", "e2", "e3"]):
        r.hset(f"mqtt:msg:{ids[name]}", mapping=_message(ids[name], "pubsub/t", name, BASE_S + n, "false"))
        r.expire(f"mqtt:msg:{ids[name]}", 86400)
        r.zadd("mqtt:msg:pubsub/t", {ids[name]: 1})
    r.set("mqtt:acked:dev1:pubsub/t", ids["e1"])  # dev1 had acked e1
    # retained, as hookbridge keeps it: a sorted set
    r.hset(f"mqtt:msg:{ids['ret']}", mapping=_message(ids["ret"], "status/x", "retained-by-emqx", BASE_S + 3, "true"))
    r.zadd("mqtt:retain:status/x", {ids["ret"]: 1})
    r.zadd("mqtt:msg:status/x", {ids["ret"]: 1})
    # retained, as the 4.2.1 backend wrote it (decompiled): SET of the msgid, the message in its hash
    r.hset(f"mqtt:msg:{ids['str']}", mapping=_message(ids["str"], "status/s", "retained-string", BASE_S + 4, "true"))
    r.set("mqtt:retain:status/s", ids["str"])
    # retained, as the 4.4 Redis page shows it: the whole message in a hash
    r.hset("mqtt:retain:status/h", mapping=_message(ids["hash"], "status/h", "retained-hash", BASE_S + 5, "true"))
    # an id whose hash had expired: dropped, as a fetch would drop it
    r.zadd("mqtt:msg:pubsub/t", {emqx_id((BASE_S - 100) * 1_000_000, 9, emqx_base62): 1})
    return ids


def snapshot(r: redis_sync.Redis) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {}
    for key in sorted(r.keys("*")):
        kind = r.type(key)
        if kind == b"hash":
            out[key] = r.hgetall(key)
        elif kind == b"zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"string":
            out[key] = r.get(key)
    return out


class Interrupting:
    """A Redis client that fails after `budget` commands (the migration stopped midway)."""

    def __init__(self, client: Any, budget: int) -> None:
        self._client, self._budget = client, budget

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if name in {"scan_iter", "pipeline"}:
            return target
        if not callable(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._budget -= 1
            if self._budget < 0:
                raise ConnectionError("interrupted")
            return await target(*args, **kwargs)

        return call


async def test_migration_is_idempotent_and_resumes_after_any_interruption(
    redis_db: redis_sync.Redis, redis_port: int
) -> None:
    client = aioredis.Redis(port=redis_port, protocol=2)
    try:
        ids = write_as_emqx44(redis_db)
        before = snapshot(redis_db)
        dry = await migrate_redis(client, dry_run=True)
        # e3 is 32 hex already (the rule engine's form): only its score (EMQX's constant 1) changes
        assert (dry.messages, dry.retained, dry.offsets, dry.gone) == (4, 3, 1, 1)
        assert snapshot(redis_db) == before  # dry run: unchanged
        assert dry.survey.lines() == [
            "mqtt:acked:<clientid>:<filter>: 1 emqx_base62 of the decimal text (EMQX 3.x/4.x)",
            "mqtt:msg:<topic>: 3 emqx_base62 of the decimal text (EMQX 3.x/4.x), 1 positional base62 (EMQ X 2.x),"
            " 1 32 hex",
            "mqtt:retain:<topic>: 2 emqx_base62 of the decimal text (EMQX 3.x/4.x), 1 positional base62 (EMQ X 2.x)",
        ]
        counts = await migrate_redis(client)
        assert (counts.messages, counts.retained, counts.offsets, counts.gone) == (4, 3, 1, 1)
        reference = snapshot(redis_db)
        again = await migrate_redis(client)
        assert (again.messages, again.retained, again.offsets, again.gone) == (0, 0, 0, 0)
        assert snapshot(redis_db) == reference
        new = {name: convert(value)[1] for name, value in ids.items()}
        assert redis_db.zrange("mqtt:msg:pubsub/t", 0, -1) == [new[n].encode() for n in ("e1", "e2", "e3")]  # type: ignore[union-attr]
        assert redis_db.get("mqtt:acked:dev1:pubsub/t") == new["e1"].encode()  # type: ignore[union-attr]
        assert redis_db.hget(f"mqtt:msg:{new['e2']}", "id") == new["e2"].encode()  # type: ignore[union-attr]
        assert redis_db.ttl(f"mqtt:msg:{new['e2']}") > 86000
        assert redis_db.ttl(f"mqtt:msg:{new['ret']}") == -1  # retained: kept while retained
        for topic, name in (("status/x", "ret"), ("status/s", "str"), ("status/h", "hash")):
            assert redis_db.type(f"mqtt:retain:{topic}") == b"zset"
            assert redis_db.zrange(f"mqtt:retain:{topic}", 0, -1) == [new[name].encode()]  # type: ignore[union-attr]
            assert redis_db.ttl(f"mqtt:msg:{new[name]}") == -1
            assert redis_db.hget(f"mqtt:msg:{new[name]}", "topic") == topic.encode()
        assert redis_db.hget(f"mqtt:msg:{new['hash']}", "payload") == b"retained-hash"
        moved = [value for name, value in ids.items() if name != "e3"]
        assert not redis_db.exists(*(f"mqtt:msg:{value}" for value in moved))

        # Stopped after any number of commands, then run again: the same end state.
        budget = 1
        while True:
            redis_db.flushall()
            write_as_emqx44(redis_db)
            try:
                await migrate_redis(Interrupting(client, budget))
            except ConnectionError:
                await migrate_redis(client)
                assert snapshot(redis_db) == reference, f"interrupted after {budget} commands"
                budget += 1
                continue
            break
        assert budget > 20
    finally:
        await client.aclose()


async def test_a_bridge_serves_what_emqx44_stored_in_order_with_its_own(
    tmp_path: Path, redis_db: redis_sync.Redis, redis_port: int, make_bridge: Callable[..., Any]
) -> None:
    write_as_emqx44(redis_db)
    conf = tmp_path / "migrate.conf"
    conf.write_text(config_text(redis_port))
    for _ in range(2):
        assert await asyncio.to_thread(main, ["migrate-emqx44", "-c", str(conf), "--pool", "redis.pool1"]) == 0

    bridge = await make_bridge()  # the shipped rules/redis.conf
    port = mqtt_port(bridge)
    publisher = await Client(port, "hb-pub").connected()
    await publisher.publish("pubsub/t", b"h4", qos=1)  # stored by hookbridge after the switch
    await bridge.idle()

    # The returning subscriber: proxy subscription applied on connect, then its offset (acked e1)
    # gives EMQX's e2, e3 and then hookbridge's h4.
    dev1 = await Client(port, "dev1", clean=False).connected()
    await wait_until(lambda: redis_db.hget("mqtt:client:dev1", "state") == b"1", what="online state")
    await dev1.subscribe("pubsub/t", qos=1)
    got = await dev1.expect(3)
    assert [m.payload for m in got] == [b"e2", b"e3", b"h4"]
    await publisher.publish("proxy/dev1", b"to-proxy", qos=1)
    assert [m.payload for m in await dev1.expect(1)] == [b"to-proxy"]

    # A new subscriber gets the retained messages EMQX stored, whichever form their key had.
    fresh = await Client(port, "fresh").connected()
    await fresh.subscribe("status/#", qos=1)
    got = await fresh.expect(3)
    assert sorted(m.payload for m in got) == [b"retained-by-emqx", b"retained-hash", b"retained-string"]
    assert all(m.retain for m in got)
    for client in (dev1, fresh, publisher):
        await client.disconnect()


@pytest.mark.parametrize(
    ("key", "write"),
    [
        ("mqtt:msg:pubsub/t", lambda r: r.zadd("mqtt:msg:pubsub/t", {"not-an-id": 1})),
        ("mqtt:retain:status/bad", lambda r: r.set("mqtt:retain:status/bad", "Z" * 60)),
        ("mqtt:retain:status/nohash", lambda r: r.hset("mqtt:retain:status/nohash", "payload", "no id field")),
        ("mqtt:acked:dev1:pubsub/t", lambda r: r.set("mqtt:acked:dev1:pubsub/t", "M" * 30)),
    ],
)
async def test_a_value_that_is_no_id_stops_it_before_anything_changes(
    tmp_path: Path,
    redis_db: redis_sync.Redis,
    redis_port: int,
    key: str,
    write: Callable[[redis_sync.Redis], Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_as_emqx44(redis_db)
    write(redis_db)
    before = snapshot(redis_db)
    client = aioredis.Redis(port=redis_port, protocol=2)
    try:
        with pytest.raises(MigrationRefused, match=key):
            await migrate_redis(client)
    finally:
        await client.aclose()
    assert snapshot(redis_db) == before
    conf = tmp_path / "migrate.conf"
    conf.write_text(config_text(redis_port))
    assert await asyncio.to_thread(main, ["migrate-emqx44", "-c", str(conf), "--pool", "redis.pool1"]) == 2
    err = capsys.readouterr().err
    assert key in err and "nothing was changed" in err
    assert snapshot(redis_db) == before


@pytest.mark.parametrize("pool", ["redis.nope", "mongo.pool1"])
def test_the_command_names_the_pools_it_can_migrate(
    tmp_path: Path, pool: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "bridge.conf"
    conf.write_text(config_text(6390))
    assert main(["migrate-emqx44", "-c", str(conf), "--pool", pool]) == 2
    assert "those configured: redis.pool1" in capsys.readouterr().err


async def test_a_retained_key_emqx_wrote_unmigrated_is_a_counted_error_for_its_topic_only(
    redis_db: redis_sync.Redis, make_bridge: Callable[..., Any]
) -> None:
    """Before (or without) the migration, a bridge meets EMQX's string and hash retained keys: the
    lookup of their topics fails, counted on the rule, and every other topic is served; a retained
    publish to such a topic stores the message and leaves the key alone."""
    await unmigrated_retained_keys_are_errors_of_their_topic(redis_db, make_bridge)


async def unmigrated_retained_keys_are_errors_of_their_topic(
    redis_db: redis_sync.Redis | Any, make_bridge: Callable[..., Any]
) -> None:
    """(Also run on a Redis Cluster by test_redis_cluster.py.)"""
    ids = write_as_emqx44(redis_db)  # status/s a string, status/h a hash: not migrated
    bridge = await make_bridge()  # the shipped rules/redis.conf
    port = mqtt_port(bridge)
    publisher = await Client(port, "hb-pub").connected()
    await publisher.publish("status/ok", b"retained-by-hookbridge", qos=1, retain=True)
    await bridge.idle()
    lookup = "redis.session.subscribed.3"

    fresh = await Client(port, "fresh").connected()
    for topic in ("status/s", "status/h", "status/ok"):
        await fresh.subscribe(topic, qos=1)
    got = await fresh.expect(1)
    assert [m.payload for m in got] == [b"retained-by-hookbridge"]
    await bridge.idle()
    assert bridge.metrics.rules[lookup]["failed"] == 2
    assert bridge.metrics.rules[lookup]["succeeded"] == 1

    retain_rule, store_rule = "redis.message.publish.2", "redis.message.publish.1"
    stored_before = bridge.metrics.rules[store_rule]["succeeded"]
    await publisher.publish("status/s", b"new-retained", qos=1, retain=True)
    await bridge.idle()
    assert bridge.metrics.rules[retain_rule]["failed"] == 1
    assert bridge.metrics.rules[store_rule]["succeeded"] == stored_before + 1  # the message is stored
    assert redis_db.get("mqtt:retain:status/s") == ids["str"].encode()  # EMQX's key, left as it was
    for client in (fresh, publisher):
        await client.disconnect()
