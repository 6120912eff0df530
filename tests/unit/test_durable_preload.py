"""The restored sessions' queues read at start in one pass (durable/preload.py), in process: each
session's queue is the one its own load reads back when first needed (broker.durable_preload 0),
filters, shared-subscription picks, positions and subscriptions made after a message included; a store over
the budget is left to those loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.durable import DurableStore
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.router import Message
from bridge.brokers.embedded.sessions import NEVER, SessionState, Subscription
from bridge.msgid import MsgIdGenerator
from tests.unit.test_durable_lazy_load import committed

MSGIDS = MsgIdGenerator("test")
FILTERS = {
    "dev-1": ["a/+/x", "a/1/#"],  # overlapping: one copy, both filters named
    "dev-2": ["#"],  # from the first level: the log's whole range
    "dev-3": ["c/d"],
    "worker-1": ["$share/g/jobs/#"],
    "worker-2": ["$share/g/jobs/#", "c/d"],
}
Queue = list[tuple[str, bytes, int, tuple[str, ...]]]


def broker(store: Path, preload: int = 0) -> Broker:
    return Broker(
        node="test", msgids=MSGIDS, sink=cast(Any, None), limits=Limits(), store=DurableStore(store), preload=preload
    )


def publish(b: Broker, topic: str, payload: bytes, qos: int = 1) -> None:
    b.router.route(Message(MSGIDS.next(), topic, payload, qos, False, "publisher"))


def queue(state: SessionState) -> Queue:
    return [(m.topic, m.payload, m.qos, m.filters) for m in state.outbox]


async def a_store(path: Path) -> None:
    first = broker(path)
    for clientid, filters in FILTERS.items():
        state = first.restored_session(clientid, NEVER, None, None, 4)
        for topic_filter in filters:
            first.router.subscribe(state, Subscription(topic_filter, 1, ""))
        state.touch(whole=True)
    for n in range(5):
        publish(first, f"a/{n}/x", b"a%d" % n)
        publish(first, "c/d", b"c%d" % n)
        publish(first, f"jobs/{n}", b"job%d" % n)
        publish(first, "b/zero", b"qos0-%d" % n, qos=0)  # not queued for an offline session
    reader = first.states["dev-2"]
    for _ in range(3):  # taken and acknowledged: its position moves past them, the log keeps them (dev-1's)
        reader.drop_oldest("test")
    late = first.restored_session("dev-4", NEVER, None, None, 4)
    first.router.subscribe(late, Subscription("c/#", 1, MSGIDS.next()))  # after the c/d messages
    late.touch(whole=True)
    publish(first, "c/late", b"late")
    await committed(first)
    assert first.journal is not None
    first.journal.close()


async def test_the_queues_read_at_start_are_those_each_session_reads_back_itself(tmp_path: Path) -> None:
    await a_store(tmp_path)

    lazily = broker(tmp_path)
    assert lazily.journal is not None
    lazily.journal.restore(lazily)
    assert all(state.unloaded is not None for state in lazily.states.values())
    expected = {clientid: queue(lazily.loaded(state)) for clientid, state in lazily.states.items()}
    await committed(lazily)  # what the Owe jobs wrote (routes rows) is in the store for the next start
    lazily.journal.close()
    assert [payload for _, payload, _, _ in expected["dev-1"]] == [b"a0", b"a1", b"a2", b"a3", b"a4"]
    assert expected["dev-1"][1][3] == ("a/+/x", "a/1/#")
    assert (
        len(expected["dev-2"]) == 13
        and expected["dev-2"][0][1] == b"a1"
        and expected["dev-4"] == [("c/late", b"late", 1, ("c/#",))]
    )
    picks = [
        payload for clientid in ("worker-1", "worker-2") for _, payload, _, f in expected[clientid] if f[0][0] == "$"
    ]
    assert sorted(picks) == [b"job%d" % n for n in range(5)]  # each job to one of the group

    at_start = broker(tmp_path, preload=1 << 30)
    assert at_start.journal is not None
    at_start.journal.restore(at_start)
    assert all(state.unloaded is None for state in at_start.states.values())
    assert {clientid: queue(state) for clientid, state in at_start.states.items()} == expected
    assert not at_start.journal._owe  # nothing to count in the store: every queue is in memory
    at_start.journal.close()


async def test_queues_over_the_budget_are_left_to_each_session_s_load(tmp_path: Path) -> None:
    await a_store(tmp_path)
    over = broker(tmp_path, preload=1000)  # the log alone is more
    assert over.journal is not None
    over.journal.restore(over)
    assert all(state.unloaded is not None for state in over.states.values())
    assert [p for _, p, _, _ in queue(over.loaded(over.states["dev-3"]))] == [b"c%d" % n for n in range(5)]
    over.journal.close()


def test_the_budget_is_the_setting_at_most_half_the_broker_wide_bound(tmp_path: Path) -> None:
    """broker.durable_preload, as `hookbridge run` builds the broker: the queues read at start
    count toward broker.max_queued_bytes, so they never take more than half of it."""
    from bridge.brokers.embedded.mode import make_source
    from bridge.conf.config import parse_config

    def budget(lines: str) -> int:
        text = f"broker.durable_sessions = on\nbroker.durable_dir = {tmp_path}\nbroker.bans_file =\n{lines}"
        source = make_source(parse_config("bridge.conf", text), [], MSGIDS)
        return cast(Any, source)._preload

    assert budget("") == 64 << 20
    assert budget("broker.durable_preload = 0\n") == 0
    assert budget("broker.durable_preload = 1GB\nbroker.max_queued_bytes = 100MB\n") == 50 << 20
    assert budget("broker.durable_preload = 10MB\nbroker.max_queued_bytes = 100MB\n") == 10 << 20
