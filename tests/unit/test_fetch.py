"""The fetch protocol (bridge/fetch.py) and the batch cut (bridge/batches.py), without a server.

The store here is a list that answers the store queries exactly as MessageStore documents them;
the real stores pass the same protocol on their real servers in tests/conformance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from bridge.backend import Backend, FunctionContext, Job, Pager, PermanentError
from bridge.batches import cut_at_reads, read
from bridge.brokers.base import BrokerSource, Delivery, EventSink
from bridge.conf.errors import Position
from bridge.events import ClientConnected, MessagePublish, SessionSubscribed
from bridge.fetch import READERS, Gone, Stored, Window
from bridge.functions import FUNCTIONS
from bridge.rules import FunctionAction, OfflineOpts, Rule
from bridge.topics import matches, matching


def msgid(n: int) -> str:
    return f"{n:032X}"


@dataclass
class ListStore:
    """Stored messages in msgid order; `gone` ones are listed but their record expired."""

    messages: list[tuple[Stored, float]] = field(default_factory=list)  # (message, arrived)
    gone: set[str] = field(default_factory=set)
    retain: dict[str, Stored] = field(default_factory=dict)
    subs: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)
    offsets: dict[tuple[str, str], str] = field(default_factory=dict)
    windows: list[Window] = field(default_factory=list)

    def add(self, n: int, topic: str, qos: int = 1, arrived: float = 0.0) -> Stored:
        message = Stored(msgid(n), topic, f"p{n}".encode(), qos, "pub")
        self.messages.append((message, arrived))
        return message

    async def subscriptions(self, clientid: str) -> list[tuple[str, Any]]:
        return self.subs.get(clientid, [])

    async def retained_topics(self, topic_filter: str) -> list[str]:
        return sorted(t for t in self.retain if matches(topic_filter, t))

    async def retained(self, topic_filter: str, topics: Sequence[str]) -> list[Stored]:
        return [self.retain[t] for t in topics]

    async def message_topics(self, topic_filter: str) -> list[str]:
        return sorted({m.topic for m, _ in self.messages if matches(topic_filter, m.topic)})

    async def page(self, topics: Sequence[str], window: Window, limit: int) -> list[Stored | Gone]:
        self.windows.append(window)
        found: list[Stored | Gone] = []
        for message, arrived in self.messages:
            inside = window.after < message.msgid < window.upper
            recent = window.since is None or arrived >= window.since
            if message.topic in topics and inside and recent:
                found.append(Gone(message.msgid) if message.msgid in self.gone else message)
        return found[:limit]

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        return self.offsets.get((clientid, topic_filter))

    async def start_offset(self, clientid: str, topic_filter: str, topics: Sequence[str], before: str | None) -> None:
        older = [m.msgid for m, _ in self.messages if m.topic in topics and m.msgid < (before or "G")]
        self.offsets.setdefault((clientid, topic_filter), max(older, default=""))


class Broker(BrokerSource):
    def __init__(self) -> None:
        self.delivered: list[Delivery] = []
        self.subscribed: list[tuple[str, str, int]] = []

    async def start(self, sink: EventSink) -> None: ...

    async def stop(self) -> None: ...

    async def subscribe(self, clientid: str, topic: str, qos: int) -> bool:
        self.subscribed.append((clientid, topic, qos))
        return True

    async def deliver(self, clientid: str, deliveries: Sequence[Delivery]) -> None:
        self.delivered.extend(deliveries)


class Pages(Pager):
    def __init__(self) -> None:
        self.tracked: list[tuple[list[str], str]] = []

    def track(self, job: Job, delivered: Sequence[tuple[str, int]], last: str) -> None:
        self.tracked.append(([m for m, _ in delivered], last))


@pytest.fixture
def committed() -> list[int]:
    """The seqs fetches waited on (publishes_committed)."""
    return []


@pytest.fixture
def ctx(committed: list[int]) -> FunctionContext:
    async def publishes_committed(seq: int) -> None:
        committed.append(seq)

    return FunctionContext("node", Broker(), publishes_committed, Pages())


def job(function: str, event: Any, count: int = 500, time_range: float | None = None, **kw: Any) -> Job:
    spec = FUNCTIONS[function]
    rule = Rule(
        f"redis.{event.hookpoint.value}.1",
        "redis",
        "redis.p",
        event.hookpoint,
        1,
        None,
        FunctionAction(spec),
        Position("rules.conf", 1, 1),
        offline_opts=OfflineOpts(count, time_range),
    )
    return Job(rule, event, seq=7, **kw)


def subscribed(topic: str, qos: int = 1, **kw: Any) -> SessionSubscribed:
    return SessionSubscribed("s", None, "node", topic, qos, 0.0, persistent=True, **kw)


def sent(ctx: FunctionContext) -> list[str]:
    assert isinstance(ctx.broker, Broker)
    return [d.msgid for d in ctx.broker.delivered]


def tracked(ctx: FunctionContext) -> list[tuple[list[str], str]]:
    assert isinstance(ctx.pager, Pages)
    return ctx.pager.tracked


async def fetch(store: ListStore, ctx: FunctionContext, job: Job) -> None:
    await READERS[job.rule.action.spec.impl_name](store, ctx, job)  # type: ignore[union-attr]


async def test_a_wildcard_fetch_sends_one_page_oldest_first_and_the_pager_continues_after_it(
    ctx: FunctionContext, committed: list[int]
) -> None:
    store = ListStore()
    for n, topic in enumerate(["a/1", "a/2", "b/1", "a/1", "a/2"], start=1):
        store.add(n, topic)
    first = job("on_message_fetch_for_queue", subscribed("a/+"), count=2)
    await fetch(store, ctx, first)
    assert sent(ctx) == [msgid(1), msgid(2)]
    assert tracked(ctx) == [([msgid(1), msgid(2)], msgid(2))]
    assert committed == [7]

    await fetch(store, ctx, job("on_message_fetch_for_queue", first.event, count=2, cursor=msgid(2)))
    assert sent(ctx) == [msgid(n) for n in (1, 2, 4, 5)]
    assert len(tracked(ctx)) == 1  # nothing after the last page
    assert committed == [7]  # a next page waits for nothing


async def test_a_fetch_stops_before_live_from_msgid_and_inside_time_range(ctx: FunctionContext) -> None:
    store = ListStore()
    store.add(1, "t", arrived=100.0)
    store.add(2, "t", arrived=2e9)
    store.add(3, "t", arrived=2e9)  # routed live by the broker: not fetched
    await fetch(store, ctx, job("on_message_fetch_for_queue", subscribed("t", live_from_msgid=msgid(3)), time_range=60))
    assert sent(ctx) == [msgid(2)]


async def test_the_lower_of_message_and_subscription_qos_and_each_message_once(ctx: FunctionContext) -> None:
    store = ListStore()
    store.add(1, "t", qos=2)
    event = subscribed("t", qos=1)
    await fetch(store, ctx, job("on_message_fetch_for_queue", event))
    await fetch(store, ctx, job("on_message_fetch_for_pubsub", event))  # a second rule, offset before it
    assert isinstance(ctx.broker, Broker)
    assert [(d.msgid, d.qos, d.retain, d.filter) for d in ctx.broker.delivered] == [(msgid(1), 1, False, "t")]


async def test_a_first_pubsub_subscription_starts_at_the_newest_message_and_sends_nothing(
    ctx: FunctionContext,
) -> None:
    store = ListStore()
    store.add(1, "t")
    store.add(2, "t")
    store.add(3, "t")
    await fetch(store, ctx, job("on_message_fetch_for_pubsub", subscribed("t", live_from_msgid=msgid(3))))
    assert sent(ctx) == []
    assert store.offsets == {("s", "t"): msgid(2)}
    store.add(4, "t")
    await fetch(store, ctx, job("on_message_fetch_for_pubsub", subscribed("t", live_from_msgid=msgid(5))))
    assert sent(ctx) == [msgid(3), msgid(4)]


async def test_a_page_of_expired_messages_is_passed_over(ctx: FunctionContext) -> None:
    store = ListStore()
    for n in range(1, 6):
        store.add(n, "t")
    store.gone = {msgid(1), msgid(2)}
    await fetch(store, ctx, job("on_message_fetch_for_queue", subscribed("t"), count=2))
    assert sent(ctx) == [msgid(3), msgid(4)]
    assert tracked(ctx) == [([msgid(3), msgid(4)], msgid(4))]
    assert [w.after for w in store.windows] == ["", msgid(2)]


async def test_a_page_ending_in_expired_messages_continues_after_them(ctx: FunctionContext) -> None:
    store = ListStore()
    for n in range(1, 5):
        store.add(n, "t")
    store.gone = {msgid(2)}
    await fetch(store, ctx, job("on_message_fetch_for_queue", subscribed("t"), count=2))
    assert sent(ctx) == [msgid(1)]
    assert tracked(ctx) == [([msgid(1)], msgid(2))]  # not again from 1: the next page starts after 2


async def test_retain_lookup_sends_what_the_broker_did_not_with_the_retain_flag(ctx: FunctionContext) -> None:
    store = ListStore()
    store.retain = {"r/1": Stored(msgid(1), "r/1", b"x", 2, "a"), "r/2": Stored(msgid(2), "r/2", b"y", 0, "b")}
    await READERS["on_retain_lookup"](store, ctx, job("on_retain_lookup", subscribed("r/#", retained_sent={"r/1"})))
    assert isinstance(ctx.broker, Broker)
    assert [(d.topic, d.payload, d.qos, d.retain) for d in ctx.broker.delivered] == [("r/2", b"y", 0, True)]


async def test_subscribe_lookup_subscribes_the_good_entries_and_reports_the_bad(ctx: FunctionContext) -> None:
    store = ListStore(subs={"c": [("x/#", 1), ("y", "high")]})
    event = ClientConnected("c", None, "node", "127.0.0.1:1", 0.0)
    with pytest.raises(PermanentError, match="'y'='high'"):
        await READERS["on_subscribe_lookup"](store, ctx, job("on_subscribe_lookup", event))
    assert isinstance(ctx.broker, Broker)
    assert ctx.broker.subscribed == [("c", "x/#", 1)]


async def test_an_exact_topic_reads_nothing_and_a_wildcard_keeps_only_what_it_matches() -> None:
    asked: list[str] = []

    async def candidates(topic_filter: str) -> list[str]:
        asked.append(topic_filter)
        return ["a/z", "a/b/c", "a/b", "ab/x", "a"]

    assert await matching("a/b", candidates) == ["a/b"]
    assert asked == []
    assert await matching("a/+", candidates) == ["a/b", "a/z"]
    assert await matching("a/#", candidates) == ["a", "a/b", "a/b/c", "a/z"]


# -- the batch cut -------------------------------------------------------------


class Refused(Exception):
    pass


class Lost(Exception):
    pass


class Recording(Backend):
    db = "redis"

    def __init__(self, ctx: FunctionContext) -> None:
        self.ctx = ctx
        self.calls: list[Any] = []

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        return []

    def is_recoverable(self, exc: BaseException) -> bool:
        return isinstance(exc, Lost)

    async def schema(self, apply: bool) -> str:
        return ""

    async def write_run(self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]) -> None:
        self.calls.append(list(run))
        for index in run:
            outcomes[index] = Refused(index) if index == 0 else None


async def test_the_writes_before_a_read_go_out_before_it_and_each_outcome_lands_in_its_place(
    ctx: FunctionContext,
) -> None:
    backend = Recording(ctx)
    publish = MessagePublish(msgid(1), "p", None, "t", 1, b"x", False, "node", "127.0.0.1:1", 0.0)
    write = job("on_message_publish", publish)
    fetching = job("on_message_fetch_for_queue", subscribed("t"))
    read_error = Refused("read")

    async def run_alone(one: Job) -> BaseException | None:
        backend.calls.append(f"read {batch.index(one)}")
        return read_error if batch.index(one) == 4 else None

    batch = [write, job("on_message_publish", publish), fetching, write, job("on_retain_lookup", subscribed("t"))]
    outcomes = await cut_at_reads(batch, backend.write_run, run_alone)
    assert backend.calls == [[0, 1], "read 2", [3], "read 4", []]
    assert [type(o).__name__ for o in outcomes] == ["Refused", "NoneType", "NoneType", "NoneType", "Refused"]
    assert outcomes[4] is read_error


class Failing(ListStore):
    def __init__(self, raised: Exception) -> None:
        super().__init__()
        self.raised = raised

    async def subscriptions(self, clientid: str) -> list[tuple[str, Any]]:
        raise self.raised


def lookup() -> Job:
    return job("on_subscribe_lookup", ClientConnected("c", None, "node", "127.0.0.1:1", 0.0))


@pytest.mark.parametrize("raised", [Refused("no"), PermanentError("bad")])
async def test_a_refused_read_fails_its_job_only(ctx: FunctionContext, raised: Exception) -> None:
    assert await read(Recording(ctx), Failing(raised), lookup(), refusals=(Refused,)) is raised


@pytest.mark.parametrize("raised", [Lost("gone"), KeyError(1)])
async def test_a_read_raises_what_is_worth_retrying_and_what_is_unknown(
    ctx: FunctionContext, raised: Exception
) -> None:
    with pytest.raises(type(raised)) as caught:
        await read(Recording(ctx), Failing(raised), lookup(), refusals=(Refused,))
    assert caught.value is raised
