"""A run of a batch as one pipeline's commands, and the pipeline's replies back to its jobs.

The per-job and per-command loops of the Redis backend's writes (backend.py), in a module of
their own so that they are compiled (bridge/extensions.py): the backend's class derives from the
interpreted `Backend` and stays interpreted, and these loops run four times per stored message
(rules/redis.conf). The backend calls them once per run of a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis import exceptions as rexc

from actions.redis.functions import WRITERS, Command, Script
from actions.redis.resp import Packed
from bridge.backend import Job
from bridge.batches import is_read
from bridge.plugin import CommandsAction, FunctionAction, TemplateAction

Outcomes = list[BaseException | None]


def alone(job: Job) -> bool:
    """A read, or commands sent one by one (`"pipeline": false`): not in the batch's pipeline."""
    action = job.rule.action
    return is_read(job) or (isinstance(action, CommandsAction) and not action.pipeline)


def plan(job: Job) -> list[Command]:
    """A job's commands, in order: its function's, or its rule's own commands or template."""
    action = job.rule.action
    if isinstance(action, FunctionAction):
        return WRITERS[action.spec.impl_name](job)
    if isinstance(action, CommandsAction):
        return [tuple(command.render(job.values)) for command in action.commands]
    assert isinstance(action, TemplateAction)
    return [tuple(args) for args in action.template.render_lines(job.values)]


def commands_of(
    batch: Sequence[Job],
    run: list[int],
    outcomes: Outcomes,
    shas: dict[str, str],
    recoverable: Callable[[BaseException], bool],
) -> tuple[list[tuple[Any, ...] | Packed], list[int]]:
    """The commands of the run's jobs, in order, and the index of the job each is for. A job
    whose planning raises fails alone, with that error as its outcome, as bridge.batches.planned
    has it for every backend; an error worth retrying fails the batch (raised)."""
    commands: list[tuple[Any, ...] | Packed] = []
    owners: list[int] = []
    for index in run:
        try:
            planned = plan(batch[index])
        except Exception as exc:
            if recoverable(exc):
                raise
            outcomes[index] = exc
            continue
        for command in planned:
            commands.append(as_sent(command, shas))
            owners.append(index)
    return commands, owners


def as_sent(command: Command, shas: dict[str, str]) -> tuple[Any, ...] | Packed:
    """A command as Redis gets it: a script as EVALSHA of its loaded sha (a Packed one as it is)."""
    if isinstance(command, Script):
        return ("EVALSHA", shas[command.name], len(command.keys), *command.keys, *command.args)
    return command


def settle(
    replies: list[Any], owners: list[int], outcomes: Outcomes, recoverable: Callable[[BaseException], bool]
) -> rexc.NoScriptError | None:
    """Each error reply as its job's outcome (the first one a job got). An error worth retrying is
    raised (the batch is retried); a NOSCRIPT reply is returned for the backend to load its
    scripts again before it raises it."""
    for owner, reply in zip(owners, replies, strict=True):
        if not isinstance(reply, Exception):  # the usual reply: one check
            continue
        if isinstance(reply, rexc.NoScriptError):
            return reply
        if outcomes[owner] is None:
            if recoverable(reply):
                raise reply
            outcomes[owner] = reply
    return None
