"""The message store's commands (on_message_publish / on_message_store, a message that is not
retained) are packed by actions/redis/functions.py itself: the bytes are hiredis's packing of the
same four commands, spelled out here argument by argument as docs/backends/redis.md lists them,
for every kind of publisher, topic, QoS, expiry and payload, on both builds
(tests/packaging/test_compiled_build.py runs this on the compiled one)."""

from __future__ import annotations

import dataclasses
from typing import Any

import hiredis
import pytest

from actions.redis import keys, resp
from actions.redis.functions import WRITERS
from bridge.backend import Job
from bridge.events import MessagePublish
from support.fake_pool import PUBLISH_RULE, publish, rules

MESSAGES: list[dict[str, Any]] = [
    {},
    {"clientid": "dev-é", "topic": "é/ü/日本", "payload": b""},
    {"clientid": "c:1", "topic": "a" * 1500, "payload": b"\x00\xff\r\n" * 1000},  # headers past the table
    {"clientid": "bad-\udcff", "topic": "t/\udcfe"},  # lone surrogates: keys.enc's escape
    {"qos": 2, "expiry": 5},
    {"qos": 2, "expiry": 0},
    {"payload": b"p" * 1023},
    {"payload": b"p" * 1024},
    {"timestamp": 1_765_000_000.123456},
]


def _expected(event: MessagePublish, expire: int, time_scale: int) -> list[tuple[Any, ...]]:
    """The commands argument by argument (seed 003's hash; the topic's list; the topic index)."""
    key = b"mqtt:msg:" + event.msgid.encode()
    topic = keys.enc(event.topic)
    hashed = ("HSET", key, "id", event.msgid, "from", keys.enc(event.clientid), "qos", event.qos)
    hashed += ("topic", topic, "payload", event.payload, "ts", int(event.timestamp * time_scale), "retain", "false")
    commands = [hashed, ("ZADD", b"mqtt:msg:" + topic, keys.score(event.msgid), event.msgid)]
    commands.append(("ZADD", keys.MSG_INDEX, 0, topic))
    if expire > 0:
        commands.append(("EXPIRE", key, expire))
    return commands


@pytest.mark.parametrize("expired_time", [86400, None])
@pytest.mark.parametrize("fields", MESSAGES)
def test_a_message_s_commands_are_hiredis_s_packing_of_them(fields: dict[str, Any], expired_time: int | None) -> None:
    kept_for = "" if expired_time is None else f', "expired_time": {expired_time}'
    (rule,) = rules(PUBLISH_RULE.replace('"on_message_publish"}', '"on_message_publish"}' + kept_for))
    event = dataclasses.replace(publish(), **fields)
    plan = WRITERS["on_message_publish"](Job(rule, event))
    expire = rule.expired_time or 0
    if event.expiry is not None:
        expire = min(expire, max(1, event.expiry)) if expire else max(1, event.expiry)
    expected = _expected(event, expire, rule.time_scale)
    assert all(isinstance(command, resp.Packed) for command in plan)
    assert len(plan) == len(expected)  # one command (and one reply) each
    for command, spelled in zip(plan, expected, strict=True):
        assert isinstance(command, resp.Packed)
        assert command.data == hiredis.pack_command(spelled), spelled[0]
    # and copied as they are between commands packed argument by argument
    around = resp.pack_commands([("GET", "a"), *plan, ("GET", "b")])
    assert around == b"".join(hiredis.pack_command(c) for c in [("GET", "a"), *expected, ("GET", "b")])


def test_a_retained_message_still_goes_through_the_store_script() -> None:
    (rule,) = rules(PUBLISH_RULE)
    (command,) = WRITERS["on_message_publish"](Job(rule, dataclasses.replace(publish(), retain=True)))
    assert not isinstance(command, resp.Packed)


def test_the_packing_helpers_are_hiredis_s() -> None:
    for data in (b"", b"x", b"\r\n", b"y" * 1023, b"y" * 1024, b"z" * 5000):
        assert resp.bulk(data) == hiredis.pack_command(("X", data))[len(b"*2\r\n$1\r\nX\r\n") :]
        assert resp.bulk_header(len(data)) + data + b"\r\n" == resp.bulk(data)
    for number in (0, 1, -1, 86400, 2**63, -(2**70)):
        assert resp.bulk_int(number) == hiredis.pack_command(("X", number))[len(b"*2\r\n$1\r\nX\r\n") :]
    for count in (1, 63, 64, 1000):
        assert resp.head(count) == b"*%d\r\n" % count
    assert resp.Packed(b"a") == resp.Packed(b"a") != resp.Packed(b"b")
