"""The management API's lists at a fleet's size: 300,000 retained messages and 1,000,000
subscriptions (250,000 sessions of 4 filters), put directly in a real bridge's embedded broker (the
wire would take minutes), read over HTTP.

- a page renders what it returns (about `limit` items), not the whole list: the finding was that
  `sessions?limit=10` took 8.7 s, `subscriptions?limit=10` 12.4 s and `retained?filter=#` 3.2 s,
  the broker blocked meanwhile;
- walking every page while the broker changes the lists under the walk (sessions and
  subscriptions come and go, retained messages are set and cleared, between pages and within one)
  returns each item that stayed throughout exactly once, in order, and nothing twice;
- the longest time the event loop was held during each read is measured and printed (`-s`), never
  asserted: a loaded machine must not fail a test.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import random
import time
from typing import Any

import aiohttp
import pytest
import redis as redis_sync

from bridge.api import routes
from bridge.app import Bridge
from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.router import Message
from bridge.brokers.embedded.sessions import Subscription
from support.bridges import BridgeFactory, core

pytestmark = pytest.mark.slow

KEY = "k3y-for-the-size-tests-0123456789"
KEY_LINE = f"api.keys = ops:sha256:{hashlib.sha256(KEY.encode()).hexdigest()}\n"
SESSIONS = 250_000
FILTERS = ("cmd/#", "cfg", "fw/+/state", "$share/g/all/#")  # per session: dev/<id>/<filter>, the last shared
RETAINED = 300_000
MAX_PAGE = 10_000


class LoopWatch:
    """The longest the event loop went without running this task: a read that holds the loop
    shows as a long gap (measured only; a loaded machine adds to it). Python's garbage collector
    stops everything while it looks through a large heap, whoever allocated: its longest pass is
    measured too, to tell the two apart."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_gc = 0.0
        self._gc_started = 0.0
        self._task: asyncio.Task[None] | None = None

    def _gc(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:  # (a pass that started before this watch is not counted)
            self.longest_gc = max(self.longest_gc, time.perf_counter() - self._gc_started)
            self._gc_started = 0.0

    async def __aenter__(self) -> LoopWatch:
        gc.callbacks.append(self._gc)
        self._task = asyncio.create_task(self._watch())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        gc.callbacks.remove(self._gc)

    def __str__(self) -> str:
        return f"longest loop block {self.longest * 1000:.1f} ms (longest GC pass {self.longest_gc * 1000:.1f} ms)"

    async def _watch(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0)
            self.longest = max(self.longest, time.perf_counter() - before)


@pytest.fixture
async def bridge(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> Bridge:
    # broker.sys_interval = 0: the $SYS status counts every session on each tick (systopics.py), a
    # pause of its own at this size that would be taken for the API's
    extra = f"api.enabled = on\n{KEY_LINE}api.max_page = {MAX_PAGE}\nbroker.sys_interval = 0\n"
    return await make_bridge(None, extra, http=True)


def clientid(n: int) -> str:
    return f"dev-{n:07d}"


def add_session(broker: Broker, name: str) -> None:
    """A session as the durable store restores one, with its subscriptions as SUBSCRIBE adds them."""
    state = broker.restored_session(name, 3600, None, None, 4)
    for topic_filter in FILTERS:
        full = topic_filter if topic_filter.startswith("$share/") else f"dev/{name}/{topic_filter}"
        broker.router.subscribe(state, Subscription(full, 1, ""))


def remove_session(broker: Broker, name: str) -> None:
    state = broker.states[name]
    broker.router.unsubscribe_all(state)
    del broker.states[name]


def set_retained(broker: Broker, topic: str, payload: bytes = b"v") -> None:
    broker.router.store_retained(Message(broker.msgids.next(), topic, payload, 0, True, ""), durable=False)


def fill(broker: Broker) -> None:
    for n in range(SESSIONS):
        add_session(broker, clientid(n))
    for n in range(RETAINED):
        set_retained(broker, f"site/{n % 100:02d}/meter/{n:07d}")


class Api:
    def __init__(self, bridge: Bridge, session: aiohttp.ClientSession) -> None:
        assert bridge.status is not None
        self.base = f"http://127.0.0.1:{bridge.status.port}/api/v1"
        self.session = session

    async def get(self, path: str, **params: str) -> Any:
        headers = {"Authorization": f"Bearer {KEY}"}
        async with self.session.get(self.base + path, params=params, headers=headers) as answer:
            body = await answer.json()
            assert answer.status == 200, body
            return body


async def test_pages_cost_what_they_return_and_walks_are_exact_under_change(
    bridge: Bridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = core(bridge)
    started = time.perf_counter()
    fill(broker)
    print(
        f"\nbuilt {SESSIONS:,} sessions, {SESSIONS * len(FILTERS):,} subscriptions, {RETAINED:,} retained "
        f"in {time.perf_counter() - started:.1f} s"
    )
    assert sum(len(s.subscriptions) for s in broker.states.values()) == 1_000_000

    rendered = {"client": 0, "retained": 0}
    client, retained = routes.Api._client, routes.Api._retained

    def counted_client(*args: Any) -> dict[str, Any]:
        rendered["client"] += 1
        return client(*args)

    def counted_retained(*args: Any) -> dict[str, Any]:
        rendered["retained"] += 1
        return retained(*args)

    monkeypatch.setattr(routes.Api, "_client", staticmethod(counted_client))
    monkeypatch.setattr(routes.Api, "_retained", staticmethod(counted_retained))

    async with aiohttp.ClientSession() as session:
        api = Api(bridge, session)
        reads = [
            ("/sessions", {"limit": "10"}, "client"),
            ("/clients", {"limit": "10", "cursor": clientid(SESSIONS // 2)}, "client"),
            ("/clients", {"limit": "10", "prefix": "dev-01"}, "client"),
            ("/retained", {"filter": "#", "limit": "10"}, "retained"),
            ("/retained", {"filter": "site/+/meter/#", "limit": "10"}, "retained"),
            ("/retained", {"filter": "site/42/#", "limit": "10"}, "retained"),
            ("/retained", {"filter": "+/42/meter/#", "limit": "10"}, "retained"),  # jumps to site/NN/42 per site
            ("/subscriptions", {"limit": "10"}, None),
            ("/subscriptions", {"limit": "10", "filter": f"dev/{clientid(SESSIONS - 1)}/cfg"}, None),  # from the tree
            ("/subscriptions", {"limit": "10", "filter": "$share/g/all/#"}, None),  # shared by all: the walk
            ("/clients", {"limit": "10", "connected": "true"}, "client"),  # none connected
            ("/clients", {"limit": "10", "user": "nobody"}, "client"),  # no such user: the index answers at once
        ]
        for path, params, kind in reads:
            before = dict(rendered)
            async with LoopWatch() as watch:
                started = time.perf_counter()
                body = await api.get(path, **params)
                took = time.perf_counter() - started
            print(
                f"GET {path}?{'&'.join(f'{k}={v}' for k, v in params.items())}: {len(body['data'])} items, "
                f"answered in {took * 1000:.0f} ms, {watch}"
            )
            if kind is not None:  # what the page rendered: its items and the one that says more follow
                assert rendered[kind] - before[kind] <= int(params["limit"]) + 1, (path, params, rendered)
        assert [c["clientid"] for c in (await api.get("/clients", limit="3", prefix="dev-01"))["data"]] == [
            clientid(100_000),
            clientid(100_001),
            clientid(100_002),
        ]
        rare = await api.get("/subscriptions", limit="10", filter=f"dev/{clientid(SESSIONS - 1)}/cfg")
        assert rare == {
            "data": [{"clientid": clientid(SESSIONS - 1), "filter": f"dev/{clientid(SESSIONS - 1)}/cfg", "qos": 1}],
            "next": None,
        }
        assert (await api.get("/clients", limit="10", connected="true")) == {"data": [], "next": None}
        assert (await api.get("/clients", limit="10", user="nobody")) == {"data": [], "next": None}

        await walk_subscriptions_under_change(api, broker)
        await walk_retained_under_change(api, broker)


async def walk_subscriptions_under_change(api: Api, broker: Broker) -> None:
    """Every page of /subscriptions while sessions and subscriptions come and go around the walk."""
    rng = random.Random(37)
    volatile = {clientid(n) for n in range(0, SESSIONS, 10)}  # removed and added back meanwhile
    stable = {
        (cid, f)
        for n in range(SESSIONS)
        if (cid := clientid(n)) not in volatile
        for f in broker.states[cid].subscriptions
    }
    ever: set[tuple[str, str]] = {(cid, f) for cid in broker.states for f in broker.states[cid].subscriptions}
    stop = asyncio.Event()
    changes = 0

    async def change() -> None:
        nonlocal changes
        order = sorted(volatile)
        while not stop.is_set():
            for _ in range(50):
                name = rng.choice(order)
                if name in broker.states:
                    remove_session(broker, name)
                else:
                    add_session(broker, name)
                    ever.update((name, f) for f in broker.states[name].subscriptions)
                fresh = f"{name}-new-{changes}"  # a new session just after a volatile one
                add_session(broker, fresh)
                ever.update((fresh, f) for f in broker.states[fresh].subscriptions)
                changes += 1
            await asyncio.sleep(0)

    changer = asyncio.create_task(change())
    seen: list[tuple[str, str]] = []
    cursor: str | None = None
    pages = 0
    longest = longest_gc = 0.0
    try:
        while True:
            params = {"limit": str(MAX_PAGE), **({"cursor": cursor} if cursor else {})}
            async with LoopWatch() as watch:
                page = await api.get("/subscriptions", **params)
            longest, longest_gc = max(longest, watch.longest), max(longest_gc, watch.longest_gc)
            seen.extend((s["clientid"], s["filter"]) for s in page["data"])
            pages += 1
            cursor = page["next"]
            if cursor is None:
                break
    finally:
        stop.set()
        await changer
    print(
        f"walked /subscriptions: {pages} pages, {len(seen):,} items, {changes:,} sessions changed meanwhile, "
        f"longest loop block {longest * 1000:.1f} ms (longest GC pass {longest_gc * 1000:.1f} ms)"
    )
    assert changes > 0
    assert seen == sorted(set(seen)), "out of order or twice"
    assert stable <= set(seen), f"{len(stable - set(seen))} subscriptions missed"
    assert set(seen) <= ever, "an item that never existed"


async def walk_retained_under_change(api: Api, broker: Broker) -> None:
    """Every page of /retained?filter=site/# while retained messages are cleared and set again."""
    rng = random.Random(38)
    topics = [t for t in broker.router.retained.topics.after(None) if t.startswith("site/")]
    volatile = set(topics[::7])
    stable = set(topics) - volatile
    ever = set(topics)
    stop = asyncio.Event()
    changes = 0

    async def change() -> None:
        nonlocal changes
        order = sorted(volatile)
        while not stop.is_set():
            for _ in range(50):
                topic = rng.choice(order)
                if broker.router.retained.get(topic) is not None:
                    set_retained(broker, topic, b"")  # an empty payload clears it
                else:
                    set_retained(broker, topic)
                fresh = f"{topic}/new/{changes}"
                set_retained(broker, fresh)
                ever.add(fresh)
                changes += 1
            await asyncio.sleep(0)

    changer = asyncio.create_task(change())
    seen: list[str] = []
    cursor: str | None = None
    longest = longest_gc = 0.0
    try:
        while True:
            params = {"filter": "site/#", "limit": str(MAX_PAGE), **({"cursor": cursor} if cursor else {})}
            async with LoopWatch() as watch:
                page = await api.get("/retained", **params)
            longest, longest_gc = max(longest, watch.longest), max(longest_gc, watch.longest_gc)
            seen.extend(r["topic"] for r in page["data"])
            cursor = page["next"]
            if cursor is None:
                break
    finally:
        stop.set()
        await changer
    print(
        f"walked /retained?filter=site/#: {len(seen):,} items, {changes:,} changes meanwhile, "
        f"longest loop block {longest * 1000:.1f} ms (longest GC pass {longest_gc * 1000:.1f} ms)"
    )
    assert changes > 0
    assert seen == sorted(set(seen)), "out of order or twice"
    assert stable <= set(seen), f"{len(stable - set(seen))} retained messages missed"
    assert set(seen) <= ever
