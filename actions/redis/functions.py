"""The write functions: each turns a job into Redis commands for the batch pipeline.

A plan is a list of commands; `Script` entries are EVALSHA calls of the Lua
scripts in scripts.py. Nothing here waits on Redis, so a whole batch of these
goes out in one pipeline.
"""

from __future__ import annotations

from typing import Final

from actions.redis import keys, resp
from actions.redis.resp import Packed
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


Command = tuple[Arg, ...] | Script | Packed  # Packed: already in RESP (the message store's commands)
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
    expire = rule.expired_time or 0
    if event.expiry is not None:  # a 5.0 message expiry shortens the rule's expired_time
        expire = min(expire, max(1, event.expiry)) if expire else max(1, event.expiry)
    return _stored_not_retained(event, key, int(event.timestamp * rule.time_scale), expire)


# The commands that store a message that is not retained, packed here: every message of
# rules/redis.conf takes them, and 14 of their 27 arguments are the same every time, so their
# RESP is made once. Argument by argument (resp.pack_commands), the four commands were a tenth
# of the bridge's CPU per message (docs/benchmarks.md#the-message-stores-commands-packed-once).
# The hash's fields are stored_fields' values; tests/unit/test_redis_store_packed.py holds the
# bytes to hiredis's packing of the same commands.
_HSET: Final = resp.head(16) + resp.bulk(b"HSET")
_ID: Final = resp.bulk(b"id")
_FROM: Final = resp.bulk(b"from")
_QOS: Final = resp.bulk(b"qos")
_TOPIC: Final = resp.bulk(b"topic")
_PAYLOAD: Final = resp.bulk(b"payload")
_TS: Final = resp.bulk(b"ts")
_NOT_RETAINED: Final = resp.bulk(b"retain") + resp.bulk(b"false")
_ZADD_TO_LIST: Final = resp.head(4) + resp.bulk(b"ZADD")
_ZADD_TO_INDEX: Final = resp.head(4) + resp.bulk(b"ZADD") + resp.bulk(keys.MSG_INDEX) + resp.bulk_int(0)
_EXPIRE: Final = resp.head(3) + resp.bulk(b"EXPIRE")
_CRLF: Final = b"\r\n"
_QOS_VALUES: Final = [resp.bulk_int(qos) for qos in range(3)]
_LIST_PREFIX: Final = keys.TOPIC_LIST_PREFIX  # Final: a constant of this module, not a lookup in keys


def _stored_not_retained(event: MessagePublish, key: bytes, ts: int, expire: int) -> Plan:
    """HSET of the message's hash, ZADD to its topic's list and of the topic to the index, and
    the hash's EXPIRE (if it expires): one Packed command each, one reply each. Each argument is
    its header (from resp's table), its bytes and CRLF, joined once per command: no bytes object
    is made for an argument alone."""
    msgid = event.msgid.encode()
    topic = keys.enc(event.topic)
    clientid = keys.enc(event.clientid)
    payload = event.payload
    stamp = b"%d" % ts
    qos = event.qos
    key_head, msgid_head = resp.bulk_header(len(key)), resp.bulk_header(len(msgid))
    topic_head = resp.bulk_header(len(topic))
    # One list literal per command, argument by argument (header, bytes, CRLF): unpacked tuples
    # (`*(...)`) cost mypyc a list and a conversion each, more than packing argument by argument.
    hashed = [
        _HSET,
        key_head,
        key,
        _CRLF,
        _ID,
        msgid_head,
        msgid,
        _CRLF,
        _FROM,
        resp.bulk_header(len(clientid)),
        clientid,
        _CRLF,
        _QOS,
        _QOS_VALUES[qos] if 0 <= qos <= 2 else resp.bulk_int(qos),
        _TOPIC,
        topic_head,
        topic,
        _CRLF,
        _PAYLOAD,
        resp.bulk_header(len(payload)),
        payload,
        _CRLF,
        _TS,
        resp.bulk_header(len(stamp)),
        stamp,
        _CRLF,
        _NOT_RETAINED,
    ]
    score = b"%d" % keys.score(event.msgid)
    listed = [
        _ZADD_TO_LIST,
        resp.bulk_header(len(_LIST_PREFIX) + len(topic)),
        _LIST_PREFIX,
        topic,
        _CRLF,
        resp.bulk_header(len(score)),
        score,
        _CRLF,
        msgid_head,
        msgid,
        _CRLF,
    ]
    plan: Plan = [
        Packed(b"".join(hashed)),
        Packed(b"".join(listed)),
        Packed(b"".join((_ZADD_TO_INDEX, topic_head, topic, _CRLF))),
    ]
    if expire > 0:
        plan.append(Packed(b"".join((_EXPIRE, key_head, key, _CRLF, resp.bulk_int(expire)))))
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
