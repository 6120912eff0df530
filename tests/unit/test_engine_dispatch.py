"""The engine (hookpoint, topic) -> rules with its per-topic cache, the dispatcher (events into
the runners, commit futures, `wants`) and the fetch pager, without a database or a broker."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

import bridge.pipeline.engine
from bridge.backend import Job
from bridge.events import ClientConnected, Hookpoint, MessageAcked, SessionUnsubscribed
from bridge.ops.metrics import Metrics
from bridge.pipeline.dispatcher import Dispatcher
from bridge.pipeline.engine import Engine
from bridge.pipeline.pager import FetchPager
from bridge.pipeline.runner import Runner
from support.fake_pool import (
    SUBSCRIBE_RULE,
    FakeBackend,
    pool_config,
    publish,
    rules,
    stays_pending,
    subscribed,
    wait_until,
)

RULES = "\n".join(
    [
        'backend.redis.hook.message.publish.2 = {"topic": "a/#", "action": {"function": "on_message_store"}}',
        'backend.redis.hook.message.publish.1 = {"topic": "a/b", "action": {"function": "on_message_publish"}}',
        'backend.redis.hook.message.publish.3 = {"topic": "x/+", "action": {"function": "on_message_retain"}}',
        'backend.redis.hook.message.acked.1 = {"topic": "q/#", "action": {"function": "on_message_acked_for_queue"}}',
        'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}',
    ]
)


def ids(found: list[object]) -> list[str]:
    return [rule.id for rule in found]  # type: ignore[attr-defined]


# -- engine -----------------------------------------------------------------


def test_the_engine_picks_the_rules_whose_filters_match_in_n_order() -> None:
    engine = Engine(rules(RULES))
    assert ids(engine.match(publish(topic="a/b"))) == ["redis.message.publish.1", "redis.message.publish.2"]
    assert ids(engine.match(publish(topic="a/c/d"))) == ["redis.message.publish.2"]
    assert engine.match(publish(topic="b")) == []
    connected = ClientConnected("c1", None, "n", "127.0.0.1:1", 1.0)
    assert ids(engine.match(connected)) == ["redis.client.connected.1"]  # no filter: every client


def test_a_rule_whose_function_has_nothing_to_do_is_not_matched() -> None:
    engine = Engine(rules(RULES))
    qos0 = dataclasses.replace(publish(topic="a/b"), qos=0)  # on_message_publish stores QoS>0 only
    assert ids(engine.match(qos0)) == ["redis.message.publish.2"]
    not_retained = publish(topic="x/1")
    assert engine.match(not_retained) == []  # on_message_retain: retained messages only
    assert ids(engine.match(dataclasses.replace(not_retained, retain=True))) == ["redis.message.publish.3"]


def test_takes_answers_per_hookpoint_and_per_topic() -> None:
    engine = Engine(rules(RULES))
    assert engine.takes(Hookpoint.MESSAGE_ACKED)
    assert engine.takes(Hookpoint.MESSAGE_ACKED, "q/1")
    assert not engine.takes(Hookpoint.MESSAGE_ACKED, "a/b")
    assert not engine.takes(Hookpoint.MESSAGE_DELIVERED)
    # The filter alone decides: a publish on x/1 is taken though a non-retained one does nothing.
    assert engine.takes(Hookpoint.MESSAGE_PUBLISH, "x/1")


def test_a_hookpoint_without_rules_takes_no_topic_and_leaves_the_cache_alone() -> None:
    """A fleet's deliveries ask per topic; with no rule on message.delivered every answer is no,
    and none of the fleet's topics takes a place in the per-topic cache."""
    engine = Engine(rules(RULES))
    for n in range(100):
        assert not engine.takes(Hookpoint.MESSAGE_DELIVERED, f"dev/{n}/cmd/x")
    assert engine._by_topic == {}
    assert engine.takes(Hookpoint.MESSAGE_ACKED, "q/1") and list(engine._by_topic) == [(Hookpoint.MESSAGE_ACKED, "q/1")]


def test_the_engine_matches_the_filters_once_per_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    real = bridge.pipeline.engine.matches

    def counting(topic_filter: str, topic: str) -> bool:
        calls.append((topic_filter, topic))
        return real(topic_filter, topic)

    monkeypatch.setattr(bridge.pipeline.engine, "matches", counting)
    engine = Engine(rules(RULES))
    first = engine.match(publish(topic="a/b"))
    matched_once = len(calls)
    assert matched_once == 3  # each publish rule's filter, once
    for _ in range(5):
        assert engine.match(publish(topic="a/b")) == first
        assert engine.takes(Hookpoint.MESSAGE_PUBLISH, "a/b")
    assert len(calls) == matched_once  # the rest came from the cache


def test_the_topic_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bridge.pipeline.engine, "_TOPIC_CACHE_SIZE", 4)
    engine = Engine(rules(RULES))
    for n in range(10):
        assert ids(engine.match(publish(topic=f"a/{n}"))) == ["redis.message.publish.2"]
        assert len(engine._by_topic) <= 4
    assert ids(engine.match(publish(topic="a/b"))) == ["redis.message.publish.1", "redis.message.publish.2"]


# -- dispatcher -------------------------------------------------------------


@pytest.fixture
async def dispatcher() -> AsyncIterator[tuple[Dispatcher, FakeBackend]]:
    pool = pool_config(max_inflight=2, batch_size=1)
    backend = FakeBackend(pool)
    metrics = Metrics()
    runner = Runner(pool, backend, metrics)
    loaded = rules(RULES + "\n" + SUBSCRIBE_RULE)
    runner.rules = {rule.id: rule for rule in loaded}
    dispatch = Dispatcher(Engine(loaded), {"redis.pool1": runner}, metrics)
    dispatch.track_commits = True
    runner.commit_hooks.append(dispatch.job_done)
    await runner.start()
    yield dispatch, backend
    backend.open()
    await runner.stop(drain_timeout=2)


async def test_an_events_future_resolves_once_every_one_of_its_jobs_is_committed(
    dispatcher: tuple[Dispatcher, FakeBackend],
) -> None:
    dispatch, backend = dispatcher
    backend.hold()
    future = await dispatch(publish(topic="a/b"))  # two rules: two jobs
    assert future is not None
    await backend.called.wait()
    backend.release()  # one of them is written
    await wait_until(lambda: len(backend.committed) == 1, "the first job written")
    assert await stays_pending(future)
    backend.open()
    await asyncio.wait_for(future, 5)
    assert [j.rule.id for j in backend.committed] == ["redis.message.publish.1", "redis.message.publish.2"]


async def test_an_event_no_rule_takes_needs_no_future_and_is_counted(
    dispatcher: tuple[Dispatcher, FakeBackend],
) -> None:
    dispatch, backend = dispatcher
    assert await dispatch(publish(topic="nothing/here")) is None
    assert dispatch.metrics.events[Hookpoint.MESSAGE_PUBLISH] == 1
    assert backend.batches == []


async def test_a_failed_job_still_resolves_its_events_future(dispatcher: tuple[Dispatcher, FakeBackend]) -> None:
    dispatch, backend = dispatcher
    backend.script = [ValueError("bad")]
    future = await dispatch(publish(topic="a/x"))
    assert future is not None
    await asyncio.wait_for(future, 5)  # failed for good is done too: the broker acks, the counter says failed
    assert dispatch.metrics.rules["redis.message.publish.2"]["failed"] == 1


async def test_wants_says_whether_an_event_would_do_anything_and_counts_nothing(
    dispatcher: tuple[Dispatcher, FakeBackend],
) -> None:
    dispatch, _ = dispatcher
    events = dispatch.metrics.events
    assert dispatch.wants(Hookpoint.MESSAGE_ACKED, "c1", "q/1")
    assert not dispatch.wants(Hookpoint.MESSAGE_ACKED, "c1", "a/b")
    assert not dispatch.wants(Hookpoint.MESSAGE_DELIVERED, "c1", "q/1")
    assert not dispatch.wants(Hookpoint.MESSAGE_DELIVERED, "c1", "q/1")
    assert events[Hookpoint.MESSAGE_ACKED] == 0 and events[Hookpoint.MESSAGE_DELIVERED] == 0  # a pure question
    # The broker tells what it skipped: counted as events all the same.
    dispatch.skipped(Hookpoint.MESSAGE_DELIVERED)
    assert events[Hookpoint.MESSAGE_DELIVERED] == 1 and events[Hookpoint.MESSAGE_ACKED] == 0
    # A fetch page waiting for c1's acks wants every ack of c1, whatever its topic.
    page = Job(next(r for r in dispatch.engine.rules if r.hookpoint is Hookpoint.SESSION_SUBSCRIBED), subscribed("c1"))
    dispatch.pager.track(page, [("M1", 1)], last="M1")
    assert dispatch.wants(Hookpoint.MESSAGE_ACKED, "c1", "a/b")
    assert not dispatch.wants(Hookpoint.MESSAGE_ACKED, "c2", "a/b")


async def test_resubmit_drops_a_follow_up_whose_rule_a_reload_removed(
    dispatcher: tuple[Dispatcher, FakeBackend],
) -> None:
    dispatch, backend = dispatcher
    fetch_rule = next(r for r in dispatch.engine.rules if r.hookpoint is Hookpoint.SESSION_SUBSCRIBED)
    dispatch.swap(Engine(rules(RULES)))  # the reload dropped the fetch rule
    await dispatch.resubmit(Job(fetch_rule, subscribed("c1"), cursor="M1"))
    store = next(r for r in dispatch.engine.rules if r.id == "redis.message.publish.2")
    await dispatch.resubmit(Job(store, publish(topic="a/b")))
    await dispatch.runners["redis.pool1"].idle()
    assert [j.rule.id for j in backend.committed] == ["redis.message.publish.2"]


# -- pager ------------------------------------------------------------------


class Resubmitted:
    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.arrived = asyncio.Event()

    async def __call__(self, job: Job) -> None:
        self.jobs.append(job)
        self.arrived.set()


def fetch_job(clientid: str = "c1", topic: str = "t/#") -> Job:
    rule = rules(SUBSCRIBE_RULE)[0]
    return Job(rule, subscribed(clientid, topic), seq=7, cursor=None)


def acked(msgid: str, clientid: str = "c1") -> MessageAcked:
    return MessageAcked(msgid, clientid, None, "p1", "t/1", 1, b"", False, "n", 1.0)


async def test_the_next_page_goes_out_once_every_qos1_message_of_the_page_is_acked() -> None:
    resubmit = Resubmitted()
    pager = FetchPager(resubmit)
    job = fetch_job()
    pager.track(job, [("M1", 1), ("M2", 0), ("M3", 2)], last="M3")
    assert pager.waits_for("c1") and pager.paging == 1
    pager.observe(acked("M1"))
    pager.observe(acked("M1", clientid="c2"))  # another client's ack of the same id
    pager.observe(acked("M9"))
    assert await stays_pending(asyncio.ensure_future(resubmit.arrived.wait()))
    pager.observe(acked("M3"))
    await asyncio.wait_for(resubmit.arrived.wait(), 5)
    (follow_up,) = resubmit.jobs
    assert (follow_up.cursor, follow_up.seq, follow_up.rule, follow_up.event) == ("M3", 0, job.rule, job.event)
    assert not pager.waits_for("c1") and pager.paging == 0


async def test_a_page_of_qos0_only_continues_at_once() -> None:
    resubmit = Resubmitted()
    FetchPager(resubmit).track(fetch_job(), [("M1", 0), ("M2", 0)], last="M2")
    await asyncio.wait_for(resubmit.arrived.wait(), 5)
    assert [j.cursor for j in resubmit.jobs] == ["M2"]


async def test_unsubscribing_or_a_clean_session_ends_the_waiting_pages() -> None:
    resubmit = Resubmitted()
    pager = FetchPager(resubmit)
    pager.track(fetch_job(topic="a/#"), [("M1", 1)], last="M1")
    pager.track(fetch_job(topic="b/#"), [("M2", 1)], last="M2")
    assert pager.paging == 2
    pager.observe(SessionUnsubscribed("c1", None, "n", "a/#", 1.0))
    assert pager.paging == 1
    pager.observe(ClientConnected("c1", None, "n", "127.0.0.1:1", 1.0, clean_session=False))
    assert pager.paging == 1  # a resumed session keeps its fetches
    pager.observe(ClientConnected("c1", None, "n", "127.0.0.1:1", 1.0, clean_session=True))
    assert pager.paging == 0 and not pager.waits_for("c1")
    pager.observe(acked("M2"))
    assert resubmit.jobs == []


async def test_the_pager_tracks_at_most_max_tracked_pages() -> None:
    pager = FetchPager(Resubmitted(), max_tracked=2)
    for n in range(4):
        pager.track(fetch_job(clientid=f"c{n}"), [("M1", 1)], last="M1")
    assert pager.paging == 2
    assert [pager.waits_for(f"c{n}") for n in range(4)] == [True, True, False, False]
