"""The runner and its lanes without a database: order per key, retries and backoff,
back-pressure, "publishes committed", commit hooks (tests/support/fake_pool.py's backend)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import pytest

from bridge.backend import Job, PermanentError
from bridge.events import SessionSubscribed
from bridge.ops.metrics import Metrics
from bridge.pipeline.runner import Backoff, Runner, lane_index
from support.fake_pool import (
    PUBLISH_RULE,
    SUBSCRIBE_RULE,
    FakeBackend,
    RecordedBackoff,
    Recoverable,
    pool_config,
    publish,
    rules,
    stays_pending,
    subscribed,
    wait_until,
)


@asynccontextmanager
async def running(**settings: object) -> AsyncIterator[tuple[Runner, FakeBackend]]:
    pool = pool_config(**settings)
    backend = FakeBackend(pool)
    runner = Runner(pool, backend, Metrics())
    runner.backoff = RecordedBackoff()
    runner.rules = {rule.id: rule for rule in rules(PUBLISH_RULE + "\n" + SUBSCRIBE_RULE)}
    await runner.start()
    try:
        yield runner, backend
    finally:
        backend.open()
        backend.down = None
        await runner.stop(drain_timeout=2)


def job(runner: Runner, event: object) -> Job:
    rule = next(r for r in runner.rules.values() if r.hookpoint == event.hookpoint)  # type: ignore[attr-defined]
    return Job(rule, event)  # type: ignore[arg-type]


def committed_log(runner: Runner) -> list[tuple[Job, BaseException | None]]:
    log: list[tuple[Job, BaseException | None]] = []
    runner.commit_hooks.append(lambda j, outcome: log.append((j, outcome)))
    return log


def counts(runner: Runner) -> dict[str, int]:
    return runner.metrics.rules["redis.message.publish.1"]


async def test_each_key_is_written_in_arrival_order_while_keys_spread_over_lanes() -> None:
    async with running(max_inflight=4, batch_size=3) as (runner, backend):
        done = committed_log(runner)
        events = [publish(f"c{n % 5}", f"t/{n % 3}") for n in range(120)]
        # The first batch fails twice (the lane retries it in place): nothing of its key overtakes.
        backend.script = [Recoverable("down"), Recoverable("down")]
        for event in events:
            await runner.submit(job(runner, event))
        await runner.idle()
    by_key: dict[tuple[str, str], list[str]] = defaultdict(list)
    for finished, outcome in done:
        assert outcome is None
        assert isinstance(finished.event, type(events[0]))
        by_key[(finished.event.clientid, finished.event.topic)].append(finished.event.msgid)
    for key, msgids in by_key.items():
        assert msgids == [e.msgid for e in events if (e.clientid, e.topic) == key], key
    assert len(done) == 120
    assert len({lane_index(e, 4) for e in events}) > 1  # the keys did use several lanes
    # Every batch holds one lane's jobs only.
    for batch in backend.batches:
        assert len({lane_index(j.event, 4) for j in batch}) == 1


async def test_a_recoverable_error_retries_the_same_batch_with_growing_backoff() -> None:
    async with running(max_inflight=1, batch_size=10) as (runner, backend):
        backend.script = [Recoverable("refused")] * 3
        for n in range(4):
            await runner.submit(job(runner, publish(topic=f"t/{n}")))
        await runner.idle()
        assert runner.healthy and runner.last_error == ""
    first = backend.batches[0]
    assert [b == first for b in backend.batches] == [True] * 4  # the same batch, three retries, then written
    assert len(first) == 4
    assert isinstance(runner.backoff, RecordedBackoff)
    assert runner.backoff.attempts == [1, 2, 3]
    assert counts(runner) == {"matched": 4, "succeeded": 4, "failed": 0, "retried": 12, "spooled": 0, "dropped": 0}


async def test_a_small_batch_waits_batch_time_to_fill_from_its_oldest_action() -> None:
    """batch_time: actions trickling in within it go out as one batch; none waits longer."""
    async with running(max_inflight=1, batch_size=100, batch_time="300ms") as (runner, backend):
        loop = asyncio.get_running_loop()
        started = loop.time()
        for n in range(5):
            await runner.submit(job(runner, publish(topic=f"t/{n}")))
            await asyncio.sleep(0.02)
        await runner.idle()
        waited = loop.time() - started
    assert [len(batch) for batch in backend.batches] == [5]
    assert waited >= 0.3


async def test_without_batch_time_each_action_goes_out_as_soon_as_the_lane_is_free() -> None:
    async with running(max_inflight=1, batch_size=100, batch_time=0) as (runner, backend):
        for n in range(3):
            await runner.submit(job(runner, publish(topic=f"t/{n}")))
            await wait_until(lambda n=n: sum(len(b) for b in backend.batches) == n + 1, f"action {n} written")
    assert [len(batch) for batch in backend.batches] == [1, 1, 1]


async def test_a_full_batch_does_not_wait_for_batch_time() -> None:
    async with running(max_inflight=1, batch_size=3, batch_time="10s") as (runner, backend):
        for n in range(6):
            await runner.submit(job(runner, publish(topic=f"t/{n}")))
        await wait_until(lambda: sum(len(b) for b in backend.batches) == 6, "both batches written", timeout=5)
    assert [len(batch) for batch in backend.batches] == [3, 3]


def test_backoff_doubles_from_the_first_pause_up_to_its_cap() -> None:
    backoff = Backoff(first=0.1, cap=1.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert Backoff(first=0.1, cap=3600).delay(10_000) == 3600  # no overflow on a long outage


async def test_the_pool_is_down_while_it_retries_and_says_why() -> None:
    async with running(max_inflight=1) as (runner, backend):
        backend.down = Recoverable("connection refused")
        await runner.submit(job(runner, publish()))
        await wait_until(lambda: len(backend.batches) >= 2, "a retry")
        assert not runner.healthy
        assert runner.last_error == "connection refused"
        backend.down = None
        await runner.idle()
        assert runner.healthy


async def test_an_unrecoverable_error_fails_the_batch_without_retrying() -> None:
    async with running(max_inflight=1) as (runner, backend):
        done = committed_log(runner)
        backend.script = [ValueError("bad statement")]
        for n in range(3):
            await runner.submit(job(runner, publish(topic=f"t/{n}")))
        await runner.idle()
    assert len(backend.batches) == 1
    assert [str(outcome) for _, outcome in done] == ["bad statement"] * 3
    assert counts(runner)["failed"] == 3 and counts(runner)["retried"] == 0


async def test_outcomes_are_per_job() -> None:
    async with running(max_inflight=1) as (runner, backend):
        done = committed_log(runner)
        backend.script = [[None, PermanentError("wrong type"), None]]
        for n in range(3):
            await runner.submit(job(runner, publish(topic=f"t/{n}")))
        await runner.idle()
    assert [outcome is None for _, outcome in done] == [True, False, True]
    assert counts(runner)["succeeded"] == 2 and counts(runner)["failed"] == 1


async def test_a_full_queue_makes_submit_wait_until_the_lane_takes_a_batch() -> None:
    async with running(max_inflight=1, queue_size=2, batch_size=1) as (runner, backend):
        backend.hold()  # the database does not answer
        await runner.submit(job(runner, publish(topic="t/0")))
        await backend.called.wait()  # t/0 is being written; t/1 and t/2 fill the queue
        for n in (1, 2):
            await runner.submit(job(runner, publish(topic=f"t/{n}")))
        fourth = asyncio.ensure_future(runner.submit(job(runner, publish(topic="t/3"))))
        assert await stays_pending(fourth)  # back-pressure: the publisher waits
        assert runner.depth == 2
        backend.open()
        await fourth
        await runner.idle()
    assert [j.event.topic for j in backend.written] == ["t/0", "t/1", "t/2", "t/3"]  # type: ignore[union-attr]


async def test_a_fetch_waits_for_every_publish_submitted_before_it() -> None:
    async with running(max_inflight=4) as (runner, backend):
        backend.hold()
        publishes = [job(runner, publish(f"p{n}", f"t/{n}")) for n in range(6)]
        for each in publishes:
            await runner.submit(each)
        fetch = job(runner, subscribed("s1"))
        await runner.submit(fetch)
        later = job(runner, publish("p9", "t/9"))
        await runner.submit(later)
        waiting = asyncio.ensure_future(runner.publishes_committed(fetch.seq))
        assert await stays_pending(waiting)
        committed: list[Job] = []
        runner.commit_hooks.append(lambda j, _outcome: committed.append(j))
        backend.open()
        await waiting
        # It returned once each earlier publish was committed (the later one does not count).
        assert all(p in committed for p in publishes)
        await runner.idle()


async def test_a_publish_in_the_fetchs_own_batch_counts_as_committed() -> None:
    async with running(max_inflight=1, batch_size=10) as (runner, backend):
        backend.hold()
        await runner.submit(job(runner, publish("blocker", "t/0")))
        await backend.called.wait()
        own = job(runner, publish("p1", "t/1"))
        fetch = job(runner, subscribed("p1"))
        await runner.submit(own)
        await runner.submit(fetch)
        backend.called.clear()
        backend.release()  # the blocker is written; the lane takes [own, fetch] as one batch
        await backend.called.wait()
        assert [j.seq for j in backend.batches[-1]] == [own.seq, fetch.seq]
        # The fetch, written right after `own` in the same batch, must not wait for it.
        await asyncio.wait_for(runner.publishes_committed(fetch.seq), 5)
        assert len(backend.batches) == 2  # returned while that batch was still being written
        backend.open()
        await runner.idle()


async def test_the_maintenance_hook_runs_every_trim_interval() -> None:
    calls: list[int] = []
    async with running(trim_interval="100ms") as (_, backend):
        backend.maintenance = lambda: _count(calls)  # type: ignore[method-assign]
        await wait_until(lambda: len(calls) >= 2, "two maintenance rounds")


async def _count(calls: list[int]) -> None:
    calls.append(1)


@pytest.mark.parametrize("lanes", [1, 3, 8])
def test_a_key_always_gets_the_same_lane(lanes: int) -> None:
    first: Callable[[str], int] = lambda topic: lane_index(publish("c", topic), lanes)  # noqa: E731
    assert [first(f"t/{n}") for n in range(50)] == [first(f"t/{n}") for n in range(50)]
    assert {first(f"t/{n}") for n in range(200)} == set(range(lanes))


class ReadingBackend(FakeBackend):
    """Runs a batch as a real backend does (bridge/batches.py): the writes before a read are
    written, then the read waits for the publishes submitted before it, then goes on."""

    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        self.batches.append(list(batch))
        self.called.set()
        if self._gate is not None:
            await self._gate.acquire()
        for each in batch:
            if isinstance(each.event, SessionSubscribed):
                assert self.ctx.publishes_committed is not None
                await self.ctx.publishes_committed(each.seq)
        self.committed += batch
        return [None] * len(batch)


def _clientid_in_lane(lane: int, lanes: int, make: Callable[[str], object]) -> str:
    return next(f"c{n}" for n in range(1000) if lane_index(make(f"c{n}"), lanes) == lane)  # type: ignore[arg-type]


async def test_reads_in_two_lanes_waiting_for_each_others_written_publishes_go_on() -> None:
    """Lane 0 writes [P1, R3], lane 1 [P2, R4]: R3 waits for P2, R4 for P1. Each publish is
    written before its lane's read runs; counted only when the whole batch ended, the two reads
    waited for each other for ever (what the soak test found)."""
    pool = pool_config(max_inflight=2, batch_size=10)
    backend = ReadingBackend(pool)
    runner = Runner(pool, backend, Metrics())
    backend.ctx.publishes_committed = runner.publishes_committed
    runner.rules = {rule.id: rule for rule in rules(PUBLISH_RULE + "\n" + SUBSCRIBE_RULE)}
    await runner.start()
    try:
        pub = [_clientid_in_lane(n, 2, lambda c: publish(c, "t/1")) for n in (0, 1)]
        sub = [_clientid_in_lane(n, 2, lambda c: subscribed(c)) for n in (0, 1)]
        backend.hold()
        for lane in (0, 1):  # a blocker in each lane, so that each takes [publish, read] next
            await runner.submit(job(runner, publish(pub[lane], "t/0")))
        await wait_until(lambda: len(backend.batches) == 2, "both lanes to write their blocker")
        for each in (publish(pub[0], "t/1"), publish(pub[1], "t/1"), subscribed(sub[0]), subscribed(sub[1])):
            await runner.submit(job(runner, each))
        backend.open()
        await asyncio.wait_for(runner.idle(), 5)
        assert sorted(len(batch) for batch in backend.batches) == [1, 1, 2, 2]
    finally:
        backend.open()
        await runner.stop(drain_timeout=2)
