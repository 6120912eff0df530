"""The runner's lanes over the on-disk spool, without a database: spilling when the pool goes
down, order across memory and disk, the shared byte budget with its overflow policies (block,
drop_oldest) and counters, and shutdown leftovers replayed first at the next start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bridge.backend import Job
from bridge.events import MessagePublish
from bridge.ops.metrics import Metrics
from bridge.pipeline.runner import Runner, lane_index
from bridge.pipeline.spool import Budget
from support.fake_pool import (
    PUBLISH_RULE,
    FakeBackend,
    RecordedBackoff,
    Recoverable,
    pool_config,
    publish,
    rules,
    stays_pending,
)
from support.fake_pool import wait_until as wait

RULE = "redis.message.publish.1"
PAYLOAD = b"p" * 2000  # ~2.2 kB spooled: a 64 kB segment holds about 29 actions


def on_disk(spool: Path) -> int:
    """Bytes of the spool's segment files, as the budget should count them."""
    return sum(path.stat().st_size for path in spool.rglob("*.seg"))


@asynccontextmanager
async def spooling(
    tmp_path: Path, budget: Budget, metrics: Metrics | None = None, **settings: object
) -> AsyncIterator[tuple[Runner, FakeBackend]]:
    pool = pool_config(**{"max_inflight": 1, "batch_size": 10, **settings})
    backend = FakeBackend(pool)
    runner = Runner(pool, backend, metrics or Metrics(), tmp_path / "spool", budget)
    runner.backoff = RecordedBackoff(pause=0.002)
    runner.rules = {rule.id: rule for rule in rules(PUBLISH_RULE)}
    await runner.start()
    try:
        yield runner, backend
    finally:
        await runner.stop(drain_timeout=0)


def submitting(runner: Runner, events: list[MessagePublish]) -> asyncio.Task[None]:
    async def submit_all() -> None:
        for event in events:
            await runner.submit(Job(runner.rules[RULE], event))

    return asyncio.ensure_future(submit_all())


async def take_down(runner: Runner, backend: FakeBackend) -> None:
    """The database refuses; a first action finds out, so from now on the lane spools."""
    backend.down = Recoverable("refused")
    await runner.submit(Job(runner.rules[RULE], publish("c1", "t/first")))
    await wait(lambda: not runner.healthy, "the pool to be down")


def topics(jobs: list[Job]) -> list[str]:
    return [job.event.topic for job in jobs]  # type: ignore[union-attr]


async def test_a_down_pool_spills_to_disk_and_writes_everything_in_order_once_back(tmp_path: Path) -> None:
    budget = Budget(10 << 20, "block")
    async with spooling(tmp_path, budget) as (runner, backend):
        handed: list[Job] = []
        runner.commit_hooks.append(lambda job, outcome: handed.append(job))
        backend.down = Recoverable("refused")
        events = [publish("c1", f"t/{n}", PAYLOAD) for n in range(40)]
        await submitting(runner, events)  # never waits: a down pool's actions go to disk
        assert runner.spool is not None
        await wait(lambda: runner.spool is not None and runner.spool.pending == 40, "all 40 on disk")
        assert len(handed) == 40  # spooled counts as done for the broker's acknowledgement
        assert budget.used == on_disk(tmp_path / "spool") > 40 * 2000
        assert runner.metrics.rules[RULE]["spooled"] == 40
        backend.down = None
        await runner.idle()
        assert topics(backend.committed) == [e.topic for e in events]  # the failed batch first, then the rest
        assert budget.used == on_disk(tmp_path / "spool") == 0
        assert runner.metrics.rules[RULE]["succeeded"] == 40


async def test_overflow_block_makes_submit_wait_until_the_spool_is_written(tmp_path: Path) -> None:
    budget = Budget(150_000, "block")
    async with spooling(tmp_path, budget) as (runner, backend):
        await take_down(runner, backend)
        events = [publish("c1", f"t/{n}", PAYLOAD) for n in range(100)]
        task = submitting(runner, events)
        await wait(lambda: runner.spool is not None and runner.spool.pending > 50, "the spool to fill")
        assert await stays_pending(task)  # the budget is used up: the publisher waits
        assert budget.used <= budget.max_bytes
        assert budget.used == on_disk(tmp_path / "spool")
        backend.down = None
        await task
        await runner.idle()
        assert topics(backend.committed) == ["t/first"] + [e.topic for e in events]
        counts = runner.metrics.rules[RULE]
        assert counts["dropped"] == 0 and counts["succeeded"] == 101
        assert budget.used == on_disk(tmp_path / "spool") == 0


async def test_overflow_drop_oldest_drops_whole_old_segments_and_counts_them(tmp_path: Path) -> None:
    budget = Budget(150_000, "drop_oldest")
    async with spooling(tmp_path, budget) as (runner, backend):
        await take_down(runner, backend)
        events = [publish("c1", f"t/{n}", PAYLOAD) for n in range(200)]
        await submitting(runner, events)  # never blocks
        assert budget.used <= budget.max_bytes
        assert budget.used == on_disk(tmp_path / "spool")
        backend.down = None
        await runner.idle()
        counts = runner.metrics.rules[RULE]
        assert counts["dropped"] > 0
        assert counts["dropped"] + counts["succeeded"] == 201
        assert counts["spooled"] == 201  # t/first spilled when the pool went down under it
        written = topics(backend.committed[1:])
        # What is left is in order, and it is the newest: the oldest were dropped.
        assert written == sorted(written, key=lambda t: int(t[2:]))
        assert written[-1] == "t/199"
        assert budget.used == on_disk(tmp_path / "spool") == 0


async def test_drop_oldest_keeps_only_the_batch_in_flight_of_what_was_in_memory_when_the_pool_went_down(
    tmp_path: Path,
) -> None:
    """What is in flight when the pool goes down is the one batch being written (at most
    `batch_size`); the lane's memory queue behind it is spilled too, but it is not in flight: it
    holds the oldest actions, so drop_oldest drops it first, and never the batch."""
    budget = Budget(150_000, "drop_oldest")
    async with spooling(tmp_path, budget) as (runner, backend):
        backend.hold()
        await submitting(runner, [publish("c1", f"t/{n}", PAYLOAD) for n in range(60)])
        await backend.called.wait()  # the lane took a batch of 10; 50 wait in memory
        assert [len(batch) for batch in backend.batches] == [10]
        backend.down = Recoverable("refused")
        backend.open()
        await wait(lambda: runner.spool is not None and runner.spool.pending == 60, "the spill")
        await submitting(runner, [publish("c1", f"t/{n}", PAYLOAD) for n in range(60, 200)])
        backend.down = None
        await runner.idle()
        written = topics(backend.committed)
        assert written[:10] == [f"t/{n}" for n in range(10)]  # the batch in flight: kept
        assert "t/10" not in written and "t/59" not in written  # the spilled queue: the oldest, dropped
        assert written[10:] == [f"t/{n}" for n in range(200 - len(written) + 10, 200)]  # then the newest
        counts = runner.metrics.rules[RULE]
        assert counts["dropped"] + counts["succeeded"] == 200


async def test_shutdown_spools_what_is_in_memory_and_the_next_start_writes_it_first(tmp_path: Path) -> None:
    budget = Budget(10 << 20, "block")
    async with spooling(tmp_path, budget, queue_size=100) as (runner, backend):
        backend.hold()  # the database never answers: the first batch and the queue stay in memory
        await submitting(runner, [publish("c1", f"t/{n}") for n in range(5)])
        await backend.called.wait()
        assert runner.spool is not None and runner.spool.pending == 0
    assert budget.used == 0  # a stopped pool's spool no longer counts
    assert on_disk(tmp_path / "spool") > 0
    again = Budget(10 << 20, "block")
    async with spooling(tmp_path, again) as (runner, backend):
        assert again.used == on_disk(tmp_path / "spool")
        await submitting(runner, [publish("c1", "t/new")])
        await runner.idle()
        assert topics(backend.committed) == ["t/0", "t/1", "t/2", "t/3", "t/4", "t/new"]
        assert again.used == 0


async def test_a_spooled_action_whose_rule_is_gone_is_dropped_and_counted(tmp_path: Path) -> None:
    budget = Budget(10 << 20, "block")
    async with spooling(tmp_path, budget) as (runner, backend):
        await take_down(runner, backend)
        await submitting(runner, [publish("c1", f"t/{n}") for n in range(3)])
        assert runner.spool is not None and runner.spool.pending == 4  # t/first (spilled) and these
        runner.rules = {}  # a reload removed the rule: t/first, being retried, is still written
        backend.down = None
        await runner.idle()
        assert topics(backend.committed) == ["t/first"]
        assert runner.metrics.rules[RULE]["dropped"] == 3
        assert budget.used == 0


async def test_once_the_pool_is_down_every_lane_spools_without_trying_the_database(tmp_path: Path) -> None:
    budget = Budget(10 << 20, "block")
    async with spooling(tmp_path, budget, max_inflight=2) as (runner, backend):
        await take_down(runner, backend)  # found down by the lane of c1 / t/first
        handed: list[Job] = []
        runner.commit_hooks.append(lambda job, outcome: handed.append(job))
        backend.hold()
        first_lane = lane_index(publish("c1", "t/first"), 2)
        other = next(e for e in (publish("c2", f"t/{n}") for n in range(100)) if lane_index(e, 2) != first_lane)
        calls = len(backend.batches)
        job = Job(runner.rules[RULE], other)
        await runner.submit(job)
        assert handed == [job]  # on disk at once: its publisher is acknowledged while the database is down
        assert runner.spool is not None and runner.spool.lanes[1 - first_lane].pending == 1
        tried = [(j.rule, j.event, j.seq) for batch in backend.batches[calls:] for j in batch]
        assert (job.rule, job.event, job.seq) not in tried
        backend.down = None
        backend.open()
        await runner.idle()
        # Written from the spool: a job read back, with the rule, event and number of this one.
        assert (job.rule, job.event, job.seq) in [(j.rule, j.event, j.seq) for j in backend.committed]
