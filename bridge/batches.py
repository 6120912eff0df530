"""A batch cut at its read-then-act jobs, once for every backend.

A read-then-act job (fetch, lookups; bridge/fetch.py) must see everything the
jobs before it wrote, so a backend writes the run of jobs before it first, then
reads, then goes on with the next run. How a run is written (one transaction,
bulk writes, a pipeline, concurrent statements) is the backend's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

from bridge.backend import Backend, Job, PermanentError
from bridge.fetch import READERS, MessageStore
from bridge.rules import FunctionAction

T = TypeVar("T")
Outcomes = list[BaseException | None]
WriteRun = Callable[[Sequence[Job], list[int], Outcomes], Awaitable[None]]
RunAlone = Callable[[Job], Awaitable[BaseException | None]]


def reader_of(job: Job) -> str | None:
    """The read-then-act function a job runs, if it runs one."""
    action = job.rule.action
    if isinstance(action, FunctionAction) and action.spec.impl_name in READERS:
        return action.spec.impl_name
    return None


def is_read(job: Job) -> bool:
    return reader_of(job) is not None


def planned(
    backend: Backend, batch: Sequence[Job], run: list[int], outcomes: Outcomes, plan: Callable[[Job], T]
) -> Iterator[tuple[int, T]]:
    """(index, plan(job)) for each job of `run` whose plan could be made. A job whose planning
    raises (a value that does not fit, a bug, a payload that breaks a parser) fails alone, with
    that error as its outcome: the other jobs of the batch, other clients' acknowledged messages
    among them, are still written. Only an error worth retrying fails the batch (raised)."""
    for index in run:
        try:
            yield index, plan(batch[index])
        except Exception as exc:
            if backend.is_recoverable(exc):
                raise
            outcomes[index] = exc


async def cut_at_reads(
    batch: Sequence[Job], write_run: WriteRun, run_alone: RunAlone, alone: Callable[[Job], bool] = is_read
) -> Outcomes:
    """Write each run of jobs with `write_run`; run every `alone` job by itself, after what precedes it.

    Returns one outcome per job (None: committed); `write_run` fills in those of its run.
    """
    outcomes: Outcomes = [None] * len(batch)
    run: list[int] = []
    for index, job in enumerate(batch):
        if alone(job):
            await write_run(batch, run, outcomes)
            run = []
            outcomes[index] = await run_alone(job)
        else:
            run.append(index)
    await write_run(batch, run, outcomes)
    return outcomes


async def read(
    backend: Backend, store: MessageStore, job: Job, refusals: tuple[type[BaseException], ...]
) -> BaseException | None:
    """Run a job's read-then-act function on `store`.

    An error worth retrying raises (the runner retries the batch); a refusal (`refusals`, the
    database saying no, or a PermanentError) fails this job only; anything else raises.
    """
    name = reader_of(job)
    assert name is not None
    try:
        await READERS[name](store, backend.ctx, job)
    except Exception as exc:
        if backend.is_recoverable(exc) or not isinstance(exc, (PermanentError, *refusals)):
            raise
        return exc
    return None
