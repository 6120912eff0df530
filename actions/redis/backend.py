"""Redis backend: a batch becomes one pipeline, flushed before each read-then-act job."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc

from actions.redis import cluster_scripts, emqx44, runs, scripts
from actions.redis.clients import cluster_client, connection_pool
from actions.redis.cluster import ClusterNodes, PhasedBatch
from actions.redis.cluster_functions import CLUSTER_WRITERS, Steps
from actions.redis.functions import WRITERS, Command
from actions.redis.index import TopicIndex
from actions.redis.packing import pipeline
from actions.redis.reads import RedisStore
from actions.redis.resp import Packed
from actions.redis.schema import describe
from bridge.backend import Backend, Job
from bridge.batches import cut_at_reads, planned, read
from bridge.fetch import READERS
from bridge.plugin import CommandsAction, FunctionAction

log = logging.getLogger(__name__)

_RECOVERABLE = (
    rexc.ConnectionError,
    rexc.TimeoutError,
    rexc.BusyLoadingError,
    rexc.TryAgainError,
    rexc.ReadOnlyError,
    rexc.NoScriptError,
    rexc.OutOfMemoryError,  # maxmemory with noeviction: writes resume once memory is freed
    rexc.MasterDownError,
    rexc.ClusterDownError,
    rexc.AskError,  # MOVED / ASK: a cluster's slot map changed (the batch is retried on the new one)
    rexc.SlotNotCoveredError,
    OSError,
)
# Replies that describe the server's state, not the command (redis-py keeps the prefix of those it
# has no class for): the same command succeeds once the server is back to normal.
_SERVER_STATE_REPLIES = (
    "OOM ",
    "READONLY ",
    "MISCONF ",
    "LOADING ",
    "MASTERDOWN ",
    "BUSY ",
    "TRYAGAIN ",
    "CLUSTERDOWN ",
)


class RedisBackend(Backend):
    db = "redis"
    emqx44_migration = emqx44.migrate  # hookbridge migrate-emqx44 (docs/migrate-from-emqx44.md)
    functions = frozenset(WRITERS) | frozenset(READERS)

    async def connect(self) -> None:
        size = max(2, self.pool["pool_size"])
        # Read once here, not per batch: every write's _flush uses them.
        self.wait_replicas = int(self.pool["wait_replicas"])
        self.request_timeout = float(self.pool["request_timeout"])
        # A request without an answer within request_timeout fails and is retried on a new
        # connection; the runner has counted the pool down by then (bridge/pipeline/runner.py).
        self.nodes: ClusterNodes | None = None
        if self.pool["type"] == "cluster":  # reads through RedisCluster, writes in phases (cluster.py)
            self.redis: Any = cluster_client(self.pool, size, health_check_interval=30)
            self.nodes = ClusterNodes(self.redis, self.pool, size)
        else:
            connections = connection_pool(self.pool, max_connections=size, health_check_interval=30)
            self.redis = aioredis.Redis(connection_pool=connections)  # replies are bytes (protocol 2)
        self.index = TopicIndex(self.redis, cluster=self.nodes is not None)
        self.store = RedisStore(self.index)
        self._index_task: asyncio.Task[None] | None = None
        self._shas: dict[str, str] = {}
        try:
            if self.nodes is not None:
                await self.redis.initialize()  # the slot map, from the seed nodes
            await self._load_scripts()
        except (rexc.ConnectionError, rexc.RedisClusterException) as exc:
            # A wrong password or certificate will not fix itself: refuse to start.
            # Redis merely not up yet: start anyway, writes wait and retry.
            if isinstance(exc, rexc.AuthenticationError) or "certificate verify failed" in str(exc):
                raise
            log.warning("pool %s: Redis not reachable yet (%s); actions wait and retry", self.pool.id, exc)
        self._check_index()

    def _check_index(self) -> None:
        """Complete the topic index in the background (reads SCAN until it is); retried by maintenance."""
        if self._index_task is None or self._index_task.done():
            self._index_task = asyncio.create_task(self._ensure_index(), name=f"index:{self.pool.id}")

    async def _ensure_index(self) -> None:
        try:
            await self.index.ensure()
        except (rexc.RedisError, OSError) as exc:
            log.warning("pool %s: topic index not built yet (%s); retried at the next maintenance", self.pool.id, exc)

    async def _load_scripts(self) -> None:
        # On a cluster SCRIPT LOAD goes to every master (redis-py); a promoted replica may lack
        # them: its NOSCRIPT reply loads them again before the retry.
        for name, source in (cluster_scripts.ALL if self.nodes is not None else scripts.ALL).items():
            self._shas[name] = await self.redis.script_load(source)

    async def probe(self) -> None:
        if self.nodes is not None:  # every master answers (a dead one: down until its replica is promoted)
            await self.redis.ping(target_nodes=self.redis.PRIMARIES)
        else:
            await self.redis.ping()

    async def close(self) -> None:
        if self._index_task is not None:
            self._index_task.cancel()
            await asyncio.gather(self._index_task, return_exceptions=True)
        if self.nodes is not None:
            await self.nodes.close()  # and the RedisCluster
        else:
            await self.redis.aclose()

    def is_recoverable(self, exc: BaseException) -> bool:
        if isinstance(exc, _RECOVERABLE):
            return True
        return isinstance(exc, rexc.ResponseError) and str(exc).startswith(_SERVER_STATE_REPLIES)

    async def schema(self, apply: bool) -> str:
        return describe()

    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        if self.nodes is not None:
            await self.nodes.refresh()
        if not self._shas:
            await self._load_scripts()
        write = self._write_run if self.nodes is None else self._cluster_write_run
        return await cut_at_reads(batch, write, self._run_alone, alone=runs.alone)

    async def _cluster_write_run(
        self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]
    ) -> None:
        """The run's steps on a cluster, phase by phase (cluster.py, cluster_functions.py)."""
        assert self.nodes is not None
        plans = planned(self, batch, run, outcomes, self._cluster_plan)
        steps = [(index, step) for index, plan in plans for step in plan]
        if not steps:
            return
        try:
            await PhasedBatch(self.nodes, self._command, self.is_recoverable, self.pool).run(steps, outcomes)
        except rexc.NoScriptError:
            self._shas.clear()  # a master promoted since the scripts were loaded: load them again
            self.nodes.stale = True
            raise

    def _cluster_plan(self, job: Job) -> Steps:
        action = job.rule.action
        if isinstance(action, FunctionAction):
            return CLUSTER_WRITERS[action.spec.impl_name](job)
        return [(0, command) for command in runs.plan(job)]  # a rule's own commands, in order

    async def _write_run(self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]) -> None:
        """The run's commands in one pipeline (the loops over its jobs and commands: runs.py)."""
        commands, owners = runs.commands_of(batch, run, outcomes, self._shas, self.is_recoverable)
        await self._flush(commands, owners, outcomes)

    async def _run_alone(self, job: Job) -> BaseException | None:
        action = job.rule.action
        if isinstance(action, CommandsAction):
            return await self._one_by_one(job, action)
        failed = await read(self, self.store, job, refusals=(rexc.ResponseError,))
        wrong_type = self.store.take_wrong_type()  # counted for this rule, the others delivered
        return failed or wrong_type

    def _command(self, command: Command) -> tuple[Any, ...] | Packed:
        return runs.as_sent(command, self._shas)

    async def _flush(
        self, commands: list[tuple[Any, ...] | Packed], owners: list[int], outcomes: list[BaseException | None]
    ) -> None:
        if not commands:
            return
        wait = self.wait_replicas
        if wait:  # the batch counts as written once `wait` replicas hold it (docs/backends/redis.md)
            commands.append(("WAIT", wait, max(1, int(self.request_timeout * 500))))
        replies = await pipeline(self.redis.connection_pool, commands, self.request_timeout)
        if wait:
            held = replies.pop()
            commands.pop()
        no_script = runs.settle(replies, owners, outcomes, self.is_recoverable)
        if no_script is not None:
            # Redis restarted and lost its script cache: retry the batch. Its data may be
            # another one too (a restored dump): look at the index marker again.
            self._shas.clear()
            self.index.recheck()
            self._check_index()
            raise no_script
        if wait and (not isinstance(held, int) or held < wait):
            # Written on the primary but not (yet) on enough replicas: a failover now could lose
            # it. Retried (every write is idempotent on its msgid) or spooled, never acknowledged.
            raise rexc.TryAgainError(f"{held!r} of {wait} replicas acknowledged the batch in time (WAIT)")

    async def _one_by_one(self, job: Job, action: CommandsAction) -> BaseException | None:
        for command in action.commands:
            name, *args = command.render(job.values)
            try:  # RedisCluster routes by the command's name as text
                await self.redis.execute_command(name.decode() if isinstance(name, bytes) else name, *args)
            except (rexc.ResponseError, rexc.RedisClusterException) as exc:  # a keyless command on a cluster
                return exc
        return None

    async def maintenance(self) -> None:
        """Complete the topic index if it is not yet; drop ids of expired message hashes (the periodic trim).

        The trim runs only when a rule of this pool sets `expired_time` (`trim_enabled`).
        """
        await self.index.ensure()
        if self.trim_enabled:
            await self.index.trim_expired()
        if self.nodes is not None:
            await self.index.prune()
