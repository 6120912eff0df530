"""A pool without a database, for the runner's own logic (tests/unit/): a backend that records
every batch it is given and answers as the test scripts it, and rules / events built the way
`run` builds them (the real config and rules parsers)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence

from bridge.backend import Backend, FunctionContext, Job
from bridge.conf.config import PoolConfig, parse_config
from bridge.events import MessagePublish, SessionSubscribed
from bridge.pipeline.runner import Backoff
from bridge.rules import Rule, parse_rules
from support.conf import config_text, rule_context
from support.services import ROOT

_MSGIDS = itertools.count(1)


def pool_config(**settings: object) -> PoolConfig:
    """The Redis pool `redis.pool1` with the given pool settings (e.g. max_inflight=1)."""
    lines = "backend.redis.pool1.server = 127.0.0.1:1\n"
    lines += "".join(f"backend.redis.pool1.{key} = {value}\n" for key, value in settings.items())
    return parse_config("config/bridge.conf", config_text(pools=lines)).pools["redis.pool1"]


def rules(text: str) -> list[Rule]:
    """Rules from rules-file text, validated like `check` does."""
    config = parse_config("config/bridge.conf", config_text())
    found, errors = parse_rules("rules/t.conf", text, rule_context(config, ROOT / "templates"))
    assert not errors, errors
    return found


PUBLISH_RULE = 'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}'
SUBSCRIBE_RULE = (
    'backend.redis.hook.session.subscribed.1 = {"topic": "#", "action": {"function": "on_message_fetch_for_queue"}}'
)


def publish(clientid: str = "c1", topic: str = "t/1", payload: bytes = b"x") -> MessagePublish:
    return MessagePublish(
        msgid=f"{next(_MSGIDS):032X}",
        clientid=clientid,
        username=None,
        topic=topic,
        qos=1,
        payload=payload,
        retain=False,
        node="test@127.0.0.1",
        peername="127.0.0.1:1",
        timestamp=1.0,
    )


def subscribed(clientid: str = "c1", topic: str = "t/#") -> SessionSubscribed:
    return SessionSubscribed(clientid=clientid, username=None, node="test@127.0.0.1", topic=topic, qos=1, timestamp=1.0)


class RecordedBackoff(Backoff):
    """The runner's backoff with no pause: records which attempts it was asked to wait for."""

    def __init__(self, pause: float = 0.0) -> None:
        super().__init__(first=0.1, cap=5.0)
        self.pause = pause
        self.attempts: list[int] = []

    def delay(self, attempt: int) -> float:
        self.attempts.append(attempt)
        return self.pause


class Recoverable(ConnectionError):
    """What the fake database raises for "down, try again"."""


class FakeBackend(Backend):
    """Writes nothing; records each batch (the jobs, in order) and answers from `script`.

    `script` holds one entry per coming `execute` call: an exception to raise (the whole batch
    fails), a list of outcomes, or None (all committed). After `hold()` each batch waits for its
    answer until the test lets it go (`release()`: one batch; `open()`: all): a stalled database."""

    db = "redis"

    def __init__(self, pool: PoolConfig) -> None:
        super().__init__(pool, FunctionContext(node="test@127.0.0.1"))
        self.batches: list[list[Job]] = []  # every call, retries included
        self.committed: list[Job] = []  # the jobs of the calls that returned, in order
        self.script: list[BaseException | list[BaseException | None] | None] = []
        self._gate: asyncio.Semaphore | None = None
        self.called = asyncio.Event()  # set by every execute call
        self.down: BaseException | None = None  # raised by every call while set (the database is down)

    @property
    def written(self) -> list[Job]:
        return [job for batch in self.batches for job in batch]

    def hold(self) -> None:
        self._gate = asyncio.Semaphore(0)

    def release(self, batches: int = 1) -> None:
        assert self._gate is not None
        for _ in range(batches):
            self._gate.release()

    def open(self) -> None:
        if self._gate is not None:
            gate, self._gate = self._gate, None
            for _ in range(10_000):
                gate.release()

    async def connect(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        self.batches.append(list(batch))
        self.called.set()
        if self._gate is not None:
            await self._gate.acquire()
        if self.down is not None:
            raise self.down
        answer = self.script.pop(0) if self.script else None
        if isinstance(answer, BaseException):
            raise answer
        self.committed += batch
        return answer if answer is not None else [None] * len(batch)

    def is_recoverable(self, exc: BaseException) -> bool:
        return isinstance(exc, Recoverable)

    async def schema(self, apply: bool) -> str:
        return ""


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Yield to the loop until `condition` holds (each step lets every ready task run)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


async def stays_pending(task: asyncio.Future[object], steps: int = 50) -> bool:
    """True if `task` is still waiting after the loop has run `steps` rounds of every ready task."""
    for _ in range(steps):
        await asyncio.sleep(0)
    return not task.done()
