"""The read-then-act functions, once for every backend: proxy subscription, retain lookup, offline fetch.

A backend supplies only its store queries (`MessageStore`): the topics a filter
matches, a page of messages after an id, the retained messages of some topics, a
subscription's pubsub offset. The protocol around them lives here:

- a lookup or a first fetch waits until every publish submitted before its
  subscription is committed, so it sees every message published before it;
- messages go out oldest first, in msgid (publish) order across the matching
  topics, below the subscription's `live_from_msgid` (what the broker's own
  queue delivers from there on) and within `time_range`;
- a first pubsub subscription records its offset at the newest stored message
  and delivers nothing;
- at most `max_returned_count` go out at once; when more wait, the pager runs the
  fetch again after the last id considered, once the page is acked;
- the delivery log drops what the subscription already had (`ctx.deliver`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from bridge.backend import FunctionContext, Job
from bridge.brokers.base import Delivery
from bridge.events import ClientConnected, SessionSubscribed

NO_UPPER = "G"  # sorts after every upper-case hex id: a bound that bounds nothing


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored (or retained) message as the store reads it."""

    msgid: str
    topic: str
    payload: bytes
    qos: int
    sender: str


@dataclass(frozen=True, slots=True)
class Gone:
    """A message the store still lists but whose record has expired: considered, not sent."""

    msgid: str


@dataclass(frozen=True, slots=True)
class Window:
    """Which messages a fetch page may hold."""

    after: str  # ids greater than this ("" = from the first)
    before: str | None  # and smaller than this: the subscription's live_from_msgid
    since: float | None  # arrived at or after this (Unix seconds): time_range

    @property
    def upper(self) -> str:
        """`before` as an exclusive bound that is always a string."""
        return self.before or NO_UPPER


class MessageStore(Protocol):
    """A backend's queries for the read-then-act functions."""

    async def subscriptions(self, clientid: str) -> list[tuple[str, Any]]:
        """The client's stored (topic, qos) subscriptions, by topic."""

    async def retained_topics(self, topic_filter: str) -> list[str]:
        """The topics with a retained message a filter matches (an exact topic is its own answer)."""

    async def retained(self, topic_filter: str, topics: Sequence[str]) -> list[Stored]:
        """The retained messages of `topics`, found for a subscription to `topic_filter`."""

    async def message_topics(self, topic_filter: str) -> list[str]:
        """The topics with stored messages a filter matches (an exact topic is its own answer)."""

    async def page(self, topics: Sequence[str], window: Window, limit: int) -> Sequence[Stored | Gone]:
        """Up to `limit` messages of `topics` inside `window`, in msgid order.

        Expired messages are left out, or listed as Gone where the store finds out only by reading them.
        """

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        """The subscription's pubsub offset ("" = before everything), None before its first fetch."""

    async def start_offset(self, clientid: str, topic_filter: str, topics: Sequence[str], before: str | None) -> None:
        """Record the offset at the newest stored message of `topics` before `before`, unless one exists."""


Reader = Callable[[MessageStore, FunctionContext, Job], Awaitable[None]]


def _delivery(message: Stored, event: SessionSubscribed, retain: bool) -> Delivery:
    qos = min(message.qos, event.qos)
    return Delivery(message.msgid, message.topic, message.payload, qos, retain, message.sender, event.topic)


async def subscribe_lookup(store: MessageStore, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, ClientConnected)
    await ctx.proxy_subscribe(event.clientid, await store.subscriptions(event.clientid))


async def retain_lookup(store: MessageStore, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)  # a new subscription (registry `applies`)
    if ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = [t for t in await store.retained_topics(event.topic) if t not in event.retained_sent]
    found = await store.retained(event.topic, topics)
    await ctx.deliver(event, [_delivery(message, event, retain=True) for message in found])


async def _fetch(store: MessageStore, ctx: FunctionContext, job: Job, pubsub: bool) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)
    # A new persistent QoS>0 subscription (registry `applies`), or the next page (cursor).
    if job.cursor is None and ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = await store.message_topics(event.topic)
    after = job.cursor or ""
    if pubsub and job.cursor is None:
        offset = await store.offset(event.clientid, event.topic)
        if offset is None:
            # First subscription: start after the newest stored message, deliver nothing.
            await store.start_offset(event.clientid, event.topic, topics, event.live_from_msgid)
            return
        after = offset
    opts = job.rule.offline_opts
    since = time.time() - opts.time_range if opts.time_range else None
    window = Window(after, event.live_from_msgid, since)
    while True:
        found = list(await store.page(topics, window, opts.max_returned_count + 1))
        more = len(found) > opts.max_returned_count
        found = found[: opts.max_returned_count]
        messages = [message for message in found if isinstance(message, Stored)]
        if messages or not more or not found:
            break
        window = replace(window, after=found[-1].msgid)  # a whole page expired: the next one
    sent = await ctx.deliver(event, [_delivery(message, event, retain=False) for message in messages])
    if more and found and ctx.pager is not None:
        ctx.pager.track(job, [(d.msgid, d.qos) for d in sent], found[-1].msgid)


async def fetch_for_queue(store: MessageStore, ctx: FunctionContext, job: Job) -> None:
    await _fetch(store, ctx, job, pubsub=False)


async def fetch_for_pubsub(store: MessageStore, ctx: FunctionContext, job: Job) -> None:
    await _fetch(store, ctx, job, pubsub=True)


READERS: dict[str, Reader] = {
    "on_subscribe_lookup": subscribe_lookup,
    "on_retain_lookup": retain_lookup,
    "on_message_fetch_for_queue": fetch_for_queue,
    "on_message_fetch_for_pubsub": fetch_for_pubsub,
}
