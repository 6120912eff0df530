"""actions/redis/runs.py: the Redis backend's loops from a run's jobs to its pipeline's commands
and from the replies back to each job's outcome (compiled in the wheel: the compiled build runs
this file too, tests/packaging/test_compiled_build.py)."""

from __future__ import annotations

import dataclasses

import pytest
from redis import exceptions as rexc

from actions.redis import runs
from actions.redis.functions import WRITERS
from bridge.backend import Job
from support.fake_pool import PUBLISH_RULE, SUBSCRIBE_RULE, publish, rules, subscribed

COMMANDS_RULE = (
    'backend.redis.hook.message.publish.2 = {"topic": "#", "action": '
    '{"commands": ["SET last:${clientid} ${payload}"], "pipeline": %s}}'
)


def recoverable(exc: BaseException) -> bool:
    return isinstance(exc, rexc.ConnectionError)


def test_reads_and_commands_sent_one_by_one_leave_the_pipeline() -> None:
    (store,) = rules(PUBLISH_RULE)
    (fetch,) = rules(SUBSCRIBE_RULE)
    (piped,) = rules(COMMANDS_RULE % "true")
    (one_by_one,) = rules(COMMANDS_RULE % "false")
    assert not runs.alone(Job(store, publish()))
    assert runs.alone(Job(fetch, subscribed()))
    assert not runs.alone(Job(piped, publish()))
    assert runs.alone(Job(one_by_one, publish()))


def test_a_run_gives_each_job_s_commands_in_order_with_its_index() -> None:
    (store,) = rules(PUBLISH_RULE)
    (piped,) = rules(COMMANDS_RULE % "true")
    batch = [
        Job(store, publish("c1", "t/1")),
        Job(piped, publish("c2", "t/2", b"hi")),
        Job(store, publish("c3", "t/3")),
    ]
    outcomes: runs.Outcomes = [None] * 3
    commands, owners = runs.commands_of(batch, [0, 1, 2], outcomes, {}, recoverable)
    first = WRITERS["on_message_publish"](batch[0])
    assert commands[: len(first)] == first  # a function's plain commands go as they are
    assert commands[len(first)] == (b"SET", b"last:c2", b"hi")
    assert owners == [0] * len(first) + [1] + [2] * len(first)
    assert outcomes == [None] * 3


def test_a_script_goes_as_evalsha_of_its_loaded_sha() -> None:
    (store,) = rules(PUBLISH_RULE)
    retained = dataclasses.replace(publish("c1", "r/1"), retain=True)  # a retained message: the store script
    commands, owners = runs.commands_of([Job(store, retained)], [0], [None], {"store": "abc123"}, recoverable)
    (command,) = commands
    assert command[:3] == ("EVALSHA", "abc123", 4) and owners == [0]


def test_a_job_whose_planning_fails_fails_alone_and_a_retryable_error_fails_the_run() -> None:
    (store,) = rules(PUBLISH_RULE)
    broken = dataclasses.replace(publish("c1", "t/1"), topic=None)  # type: ignore[arg-type]
    batch = [Job(store, broken), Job(store, publish("c2", "t/2"))]
    outcomes: runs.Outcomes = [None, None]
    commands, owners = runs.commands_of(batch, [0, 1], outcomes, {}, recoverable)
    assert isinstance(outcomes[0], Exception) and outcomes[1] is None
    assert set(owners) == {1} and commands
    with pytest.raises(type(outcomes[0])):  # the same error, when the backend says it is worth retrying
        runs.commands_of(batch, [0, 1], [None, None], {}, lambda exc: True)


def test_replies_settle_each_job_once_with_its_first_error() -> None:
    refused, later = rexc.ResponseError("WRONGTYPE first"), rexc.ResponseError("WRONGTYPE second")
    outcomes: runs.Outcomes = [None, None, None]
    assert runs.settle([1, refused, later, b"OK"], [0, 1, 1, 2], outcomes, recoverable) is None
    assert outcomes == [None, refused, None]
    with pytest.raises(rexc.ConnectionError):
        runs.settle([rexc.ConnectionError("gone")], [0], [None], recoverable)
    no_script = rexc.NoScriptError("NOSCRIPT")
    assert runs.settle([no_script], [0], [None], recoverable) is no_script
    with pytest.raises(ValueError, match="shorter"):  # one reply per command, never fewer
        runs.settle([1], [0, 0], [None], recoverable)
