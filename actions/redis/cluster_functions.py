"""The write functions on a Redis Cluster: each job becomes steps, each on one key (or one slot).

A step is a command with its phase. The batch runs phase by phase (cluster.py): every command of a
phase, on every master at once, and the next phase only once all of them answered. Phases are
chosen so that what one function writes in a phase comes after what another one needs written
before it, whatever jobs share the batch:

    0  message hashes, clients and nodes, event log; offset owners read (ambiguous keys)
    1  topic lists (`ZADD`, the queue ack's `ZREM`), the retain swap, offsets moved or deleted
    2  the topic index; the release of replaced retained messages; the queue ack's retain check
    3  hashes deleted by a release or an ack, once nothing holds them

So an id is in a topic's list only after its hash exists, and a topic is in the index only after
its list holds something (a fetch never meets a listed id that has no hash, except an expired one,
which it drops). Every step is idempotent: a failure anywhere retries the whole batch, and the
replay writes the same state. A `Then` step's reply decides the steps of a later phase: the
retain swap returns the ids to release; an owner read decides whether an offset may move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actions.redis import keys
from actions.redis.functions import (
    WRITERS,
    Command,
    Script,
    client_connected,
    client_disconnected,
    event_log,
    stored_fields,
)
from bridge.backend import Job
from bridge.events import MessageAcked, MessagePublish, SessionUnsubscribed


@dataclass(frozen=True, slots=True)
class Then:
    """A command whose reply decides more steps (of later phases)."""

    command: Command
    after: Callable[[Any], list[Step]]


@dataclass(frozen=True, slots=True)
class Touch:
    """Add a topic to a cluster topic index, and move its stamp. The batch sends one INDEX_TOUCH
    per index for all its topics, not one per message: the index is a single key, on one master."""

    index: bytes
    stamps: bytes
    topic: bytes


Step = tuple[int, Command | Then | Touch]
Steps = list[Step]


def _store(job: Job) -> Steps:
    event = job.event
    assert isinstance(event, MessagePublish)
    fields = stored_fields(event, job.rule.expired_time or 0, job.rule.time_scale)
    msgid, score, expire, sender, qos, topic, payload, ts, retain = fields
    key = keys.message(event.msgid)
    steps: Steps
    if event.retain:  # a retain rule may hold the hash already: the script keeps it persisting
        hashed = (msgid, expire, sender, qos, topic, payload, ts, retain)
        steps = [(0, Script("store_hash", (key,), hashed))]
    else:
        fields_of_hash = ("id", msgid, "from", sender, "qos", qos, "topic", topic, "payload", payload, "ts", ts)
        steps = [(0, ("HSET", key, *fields_of_hash, "retain", retain))]
        if isinstance(expire, int) and expire > 0:
            steps.append((0, ("EXPIRE", key, expire)))
    steps.append((1, ("ZADD", keys.topic_list(event.topic), score, msgid)))
    steps.append((2, Touch(keys.CLUSTER_MSG_INDEX, keys.CLUSTER_MSG_STAMPS, keys.enc(event.topic))))
    return steps


def _release(topic: str, expire: int) -> Callable[[Any], Steps]:
    """What the retain swap returned: ids no longer retained. Each expires like any stored
    message; without an expiry it is deleted unless the topic's message list still holds it."""

    def steps(released: Any) -> Steps:
        out: Steps = []
        for old in released or ():
            key = keys.MESSAGE_PREFIX + old
            if expire > 0:
                out.append((2, ("EXPIRE", key, expire)))
            else:
                out.append((2, Then(("ZSCORE", keys.topic_list(topic), old), _delete_unless_held(key))))
        return out

    return steps


def _delete_unless_held(key: bytes) -> Callable[[Any], Steps]:
    return lambda held: [(3, ("DEL", key))] if held is None else []


def message_retain(job: Job) -> Steps:
    event = job.event
    assert isinstance(event, MessagePublish)
    fields = stored_fields(event, job.rule.expired_time or 0, job.rule.time_scale)
    msgid, score, _, sender, qos, topic, payload, ts, retain = fields
    key = keys.message(event.msgid)
    own = event.kept_for(None) or 0
    hashed = ("id", msgid, "from", sender, "qos", qos, "topic", topic, "payload", payload, "ts", ts, "retain", retain)
    swap = Script("retain_swap", (keys.retain(event.topic),), (msgid, score))
    return [
        (0, ("HSET", key, *hashed)),
        (0, ("EXPIRE", key, own) if own > 0 else ("PERSIST", key)),
        (1, Then(swap, _release(event.topic, job.rule.expired_time or 0))),
        (2, Touch(keys.CLUSTER_RETAIN_INDEX, keys.CLUSTER_RETAIN_STAMPS, keys.enc(event.topic))),
    ]


def retain_delete(job: Job) -> Steps:
    event = job.event
    assert isinstance(event, MessagePublish)
    clear = Script("retain_swap", (keys.retain(event.topic),), ("", 0))
    return [(1, Then(clear, _release(event.topic, job.rule.expired_time or 0)))]


def acked_for_queue(job: Job) -> Steps:
    event = job.event
    assert isinstance(event, MessageAcked)
    key = keys.message(event.msgid)
    return [
        (1, ("ZREM", keys.topic_list(event.topic), event.msgid)),
        (2, Then(("ZSCORE", keys.retain(event.topic), event.msgid), _delete_unless_held(key))),
    ]


def _if_owner(clientid: str, steps: Steps) -> Callable[[Any], Steps]:
    """The steps, if the owners hash names `clientid` (or no one) for the offset key."""
    me = keys.enc(clientid)
    return lambda owner: steps if owner is None or owner == me else []


def acked_for_pubsub(job: Job) -> Steps:
    event = job.event
    assert isinstance(event, MessageAcked)
    steps: Steps = []
    for topic_filter in event.filters or (event.topic,):
        offset = keys.acked(event.clientid, topic_filter)
        advance: Step = (1, Script("advance_one", (offset,), (event.msgid,)))
        if keys.acked_ambiguous(event.clientid, topic_filter):
            steps.append((0, Then(("HGET", keys.ACKED_OWNER, offset), _if_owner(event.clientid, [advance]))))
        else:
            steps.append(advance)
    return steps


def acked_delete(job: Job) -> Steps:
    event = job.event
    assert isinstance(event, SessionUnsubscribed)
    offset = keys.acked(event.clientid, event.topic)
    if not keys.acked_ambiguous(event.clientid, event.topic):
        return [(1, ("DEL", offset))]
    # The offset before its owner entry: stopped in between, the entry still keeps other clients
    # off the key (the owner's next fetch creates it again), never hands them this client's offset.
    delete: Steps = [(1, ("DEL", offset)), (2, ("HDEL", keys.ACKED_OWNER, offset))]
    return [(0, Then(("HGET", keys.ACKED_OWNER, offset), _if_owner(event.clientid, delete)))]


def _phase0(write: Callable[[Job], list[Command]]) -> Callable[[Job], Steps]:
    """A single-node writer whose commands each touch one key: all in phase 0, in its order."""
    return lambda job: [(0, command) for command in write(job)]


CLUSTER_WRITERS: dict[str, Callable[[Job], Steps]] = {
    "on_client_connected": _phase0(client_connected),
    "on_client_disconnected": _phase0(client_disconnected),
    "on_message_publish": _store,
    "on_message_store": _store,
    "on_message_retain": message_retain,
    "on_retain_delete": retain_delete,
    "on_message_acked_for_queue": acked_for_queue,
    "on_message_acked_for_pubsub": acked_for_pubsub,
    "on_acked_delete": acked_delete,
    "on_event_log": _phase0(event_log),
}
assert CLUSTER_WRITERS.keys() == WRITERS.keys()
