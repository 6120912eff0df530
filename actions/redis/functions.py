"""The write functions: each turns a job into Redis commands for the batch pipeline.

A plan is a list of commands; `Script` entries are EVALSHA calls of the Lua
scripts in scripts.py. Nothing here waits on Redis, so a whole batch of these
goes out in one pipeline.
"""

from __future__ import annotations

from typing import Final

from actions.redis import keys
from bridge.backend import Job, Writers
from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    MessageAcked,
    MessagePublish,
    SessionUnsubscribed,
    placeholder_value,
)
from bridge.plugin import to_bytes

Arg = bytes | str | int


class Script:
    """An EVALSHA of one of scripts.py's scripts (by name) with its keys and arguments: read-only
    (`Final`), a class of its own rather than a frozen dataclass for the reason router.Message is
    (this module is compiled: bridge/extensions.py)."""

    __slots__ = ("args", "keys", "name")

    def __init__(self, name: str, keys: tuple[bytes, ...], args: tuple[Arg, ...]) -> None:
        self.name: Final = name
        self.keys: Final = keys
        self.args: Final = args

    def __repr__(self) -> str:
        return f"Script({self.name!r}, {self.keys!r}, {self.args!r})"


Command = tuple[Arg, ...] | Script
Plan = list[Command]


def stored_fields(event: MessagePublish, expire: int, time_scale: int = 1) -> tuple[Arg, ...]:
    """The fields of a message's hash; `ts` in the pool's unit (`timestamps`: rule.time_scale)."""
    if event.expiry is not None:  # a 5.0 message expiry shortens the rule's expired_time
        expire = min(expire, max(1, event.expiry)) if expire else max(1, event.expiry)
    return (
        event.msgid,
        keys.score(event.msgid),
        expire,
        keys.enc(event.clientid),
        event.qos,
        keys.enc(event.topic),
        event.payload,
        int(event.timestamp * time_scale),
        "true" if event.retain else "false",
    )


def client_connected(job: Job) -> Plan:
    event = job.event
    assert isinstance(event, ClientConnected)
    ts = int(event.timestamp * job.rule.time_scale)
    key = keys.client(event.clientid)
    return [
        ("HSET", key, "state", 1, "online_at", ts, "node", keys.enc(event.node)),
        ("HSETNX", key, "offline_at", "undefined"),
        ("HSET", keys.node(event.node), keys.enc(event.clientid), ts),
    ]


def client_disconnected(job: Job) -> Plan:
    event = job.event
    assert isinstance(event, ClientDisconnected)
    return [
        ("HSET", keys.client(event.clientid), "state", 0, "offline_at", int(event.timestamp * job.rule.time_scale)),
        ("HDEL", keys.node(event.node), keys.enc(event.clientid)),
    ]


def _store(job: Job) -> Plan:
    event = job.event
    assert isinstance(event, MessagePublish)
    msgid, rule = event.msgid, job.rule
    key = keys.message(msgid)
    if event.retain:
        # A retained message may also be kept by a retain rule, which makes its hash persist: the
        # script gives it a TTL only if it is not in the topic's retained set, atomically.
        fields = stored_fields(event, rule.expired_time or 0, rule.time_scale)
        topic_list = keys.topic_list(event.topic)
        return [Script("store", (key, topic_list, keys.retain(event.topic), keys.MSG_INDEX), fields)]
    # Not retained: the script's check can only pass, so the same writes go out as plain commands,
    # which cost Redis about a third less per message than the script (bench/mqtt_bench.py,
    # database CPU column). Each is idempotent: a redelivery (same msgid) writes the same state.
    # The fields are stored_fields' values, taken one by one here (each message of rules/redis.conf
    # comes this way: no tuple to unpack, the topic encoded once).
    expire = rule.expired_time or 0
    if event.expiry is not None:  # a 5.0 message expiry shortens the rule's expired_time
        expire = min(expire, max(1, event.expiry)) if expire else max(1, event.expiry)
    topic = keys.enc(event.topic)
    score = keys.score(msgid)
    hashed = (
        "HSET",
        key,
        "id",
        msgid,
        "from",
        keys.enc(event.clientid),
        "qos",
        event.qos,
        "topic",
        topic,
        "payload",
        event.payload,
        "ts",
        int(event.timestamp * rule.time_scale),
        "retain",
        "false",
    )
    plan: Plan = [hashed, ("ZADD", keys.TOPIC_LIST_PREFIX + topic, score, msgid), ("ZADD", keys.MSG_INDEX, 0, topic)]
    if expire > 0:
        plan.append(("EXPIRE", key, expire))
    return plan


# The registry's `applies` keeps jobs that have nothing to do out of the queue:
# on_message_publish sees QoS 1/2 only, the retain functions only retained messages.
message_publish = message_store = _store


def message_retain(job: Job) -> Plan:
    event = job.event
    assert isinstance(event, MessagePublish)
    return [
        Script(
            "retain_set",
            (keys.message(event.msgid), keys.retain(event.topic), keys.topic_list(event.topic), keys.RETAIN_INDEX),
            (*stored_fields(event, job.rule.expired_time or 0, job.rule.time_scale), event.kept_for(None) or 0),
        )
    ]


def retain_delete(job: Job) -> Plan:
    event = job.event
    assert isinstance(event, MessagePublish)
    return [
        Script(
            "retain_clear",
            (keys.retain(event.topic), keys.topic_list(event.topic), keys.RETAIN_INDEX),
            (job.rule.expired_time or 0, keys.enc(event.topic)),
        )
    ]


def acked_for_queue(job: Job) -> Plan:
    event = job.event
    assert isinstance(event, MessageAcked)
    return [
        Script(
            "ack_queue",
            (keys.topic_list(event.topic), keys.message(event.msgid), keys.retain(event.topic), keys.MSG_INDEX),
            (event.msgid, keys.enc(event.topic)),
        )
    ]


def acked_for_pubsub(job: Job) -> Plan:
    event = job.event
    assert isinstance(event, MessageAcked)
    filters = event.filters or (event.topic,)
    offsets = tuple(keys.acked(event.clientid, f) for f in filters)
    ambiguous = tuple(_flag(keys.acked_ambiguous(event.clientid, f)) for f in filters)
    return [Script("advance", (*offsets, keys.ACKED_OWNER), (event.msgid, keys.enc(event.clientid), *ambiguous))]


def acked_delete(job: Job) -> Plan:
    event = job.event
    assert isinstance(event, SessionUnsubscribed)
    ambiguous = _flag(keys.acked_ambiguous(event.clientid, event.topic))
    offset = keys.acked(event.clientid, event.topic)
    return [Script("acked_delete", (offset, keys.ACKED_OWNER), (keys.enc(event.clientid), ambiguous))]


def _flag(value: bool) -> int:
    return 1 if value else 0


_LOG_FIELDS = ("clientid", "username", "node", "topic", "qos", "msgid", "reason", "peername")


def event_log(job: Job) -> Plan:
    """XADD to the `mqtt:event_log` stream: one entry per event, fields as in mqtt_event_log."""
    event = job.event
    fields: list[Arg] = ["event", str(event.hookpoint), "ts", int(event.timestamp * 1000)]
    for name in _LOG_FIELDS:
        if hasattr(event, name):
            fields += [name, to_bytes(placeholder_value(event, name))]
    payload = getattr(event, "payload", None)
    if payload is not None:
        fields += ["bytes", len(payload)]
    return [("XADD", keys.EVENT_LOG, "*", *fields)]


WRITERS: Writers[Command] = {
    "on_client_connected": client_connected,
    "on_client_disconnected": client_disconnected,
    "on_message_publish": message_publish,
    "on_message_store": message_store,
    "on_message_retain": message_retain,
    "on_retain_delete": retain_delete,
    "on_message_acked_for_queue": acked_for_queue,
    "on_message_acked_for_pubsub": acked_for_pubsub,
    "on_acked_delete": acked_delete,
    "on_event_log": event_log,
}
