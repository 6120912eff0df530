"""A `type = cluster` pool: redis-py's RedisCluster for the slot map (and the reads), and the
batched writes phase by phase on lean connections (packing.py), one pool of them per master.

A batch holds one connection per master it writes to, from its first phase to its last, and
ends with `WAIT wait_replicas` on each of them: WAIT counts the replicas that hold what THAT
connection wrote, so it must be the connection that wrote the batch (as on a single server,
where the batch is one pipeline). A `MOVED` / `ASK` reply (resharding, or a failover the slot
map has not seen), `CLUSTERDOWN`, `TRYAGAIN` or a master that stopped answering fails the batch
(recoverable: the runner retries it, then spools) and the slot map is read again before the
retry. Every step is idempotent (cluster_functions.py), so a retried batch stores each message
once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.cluster import RedisCluster

from actions.redis.clients import node_pool
from actions.redis.cluster_functions import Step, Then, Touch
from actions.redis.functions import Command, Script
from actions.redis.packing import pipeline_on
from actions.redis.resp import Packed

Outcomes = list[BaseException | None]
# Replies that say the slot map is out of date, or the cluster is changing: read the map again.
_TOPOLOGY = (rexc.AskError, rexc.ClusterDownError, rexc.TryAgainError, rexc.ReadOnlyError)


class ClusterNodes:
    """The masters of a cluster, each with its pool of lean connections, found by key."""

    def __init__(self, cluster: RedisCluster, pool: Any, max_connections: int) -> None:
        self.cluster = cluster
        self._pool = pool
        self._max = max_connections
        self._pools: dict[tuple[str, int], aioredis.ConnectionPool] = {}
        self.stale = False  # read the slot map again before the next batch

    def pool_of(self, key: bytes) -> aioredis.ConnectionPool:
        node = self.cluster.get_node_from_key(key)  # type: ignore[arg-type]
        if node is None:
            raise rexc.SlotNotCoveredError(f"no master holds the slot of {key!r}")
        address = (node.host, int(node.port))
        if address not in self._pools:
            self._pools[address] = node_pool(self._pool, *address, self._max)
        return self._pools[address]

    async def route(self, command: Command) -> aioredis.ConnectionPool:
        """The master a command goes to: by its first key (our own commands name it first; a rule's
        `commands` are parsed as redis-py parses them, COMMAND INFO)."""
        if isinstance(command, Script):
            return self.pool_of(command.keys[0])
        if isinstance(command, Packed):  # only a single server's message store packs its commands
            raise TypeError("a packed command names no key to route it by")
        name = command[0].decode() if isinstance(command[0], bytes) else str(command[0])
        if name.upper() in _OWN:
            return self.pool_of(command[1])  # type: ignore[arg-type]
        nodes = await self.cluster.get_nodes_from_slot(name.upper(), *command[1:])
        return self.pool_of_node(nodes[0])

    def pool_of_node(self, node: Any) -> aioredis.ConnectionPool:
        address = (node.host, int(node.port))
        if address not in self._pools:
            self._pools[address] = node_pool(self._pool, *address, self._max)
        return self._pools[address]

    async def refresh(self) -> None:
        """Read the slot map again (after a failover or a resharding), if a batch saw it change."""
        if self.stale:
            try:
                await self.cluster.nodes_manager.initialize()
            except (rexc.RedisClusterException, rexc.RedisError) as exc:  # no node answered: retry later
                raise rexc.ConnectionError(f"reading the cluster's slot map: {exc}") from exc
            self.stale = False

    async def close(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()
        await self.cluster.aclose()


# The commands cluster_functions.py sends, whose key is always their first argument.
_OWN = frozenset({"HSET", "HSETNX", "HDEL", "HGET", "EXPIRE", "PERSIST", "ZADD", "ZREM", "ZSCORE", "DEL", "XADD"})


class PhasedBatch:
    """One batch of steps on a cluster: phase by phase, each phase on every master at once."""

    def __init__(
        self,
        nodes: ClusterNodes,
        wire: Callable[[Command], tuple[Any, ...] | Packed],
        recoverable: Callable[[BaseException], bool],
        settings: Any,
    ) -> None:
        self.nodes = nodes
        self.wire = wire  # a Script to its EVALSHA
        self.recoverable = recoverable  # an error reply that fails the batch (retried), not one rule
        self.wait = settings["wait_replicas"]
        self.timeout = settings["request_timeout"]
        self.outcomes: Outcomes = []

    async def run(self, steps: Sequence[tuple[int, Step]], outcomes: Outcomes) -> None:
        """`steps`: (owner job, step), in batch order. An error reply becomes its job's outcome; a
        recoverable one (or a lost connection) fails the batch, raised."""
        self.outcomes = outcomes
        pending = sorted((phase, order, owner, step) for order, (owner, (phase, step)) in enumerate(steps))
        async with AsyncExitStack() as held:
            connections: dict[aioredis.ConnectionPool, Any] = {}
            while pending:
                phase = pending[0][0]
                now = [(owner, step) for p, _, owner, step in pending if p == phase]
                later = [item for item in pending if item[0] != phase]
                more = await self._phase(now, connections, held)
                base = len(pending)
                later += [(p, base + i, owner, step) for i, (owner, (p, step)) in enumerate(more)]
                pending = sorted(later)
            if self.wait and connections:
                await self._wait(connections)

    async def _phase(self, now: list[tuple[int, Any]], connections: dict[Any, Any], held: AsyncExitStack) -> list[Any]:
        lanes: dict[aioredis.ConnectionPool, list[tuple[int, Any, tuple[Any, ...] | Packed]]] = {}
        for owner, step in _merge_touches(now):
            command = step.command if isinstance(step, Then) else step
            try:
                pool = await self.nodes.route(command)
            except (rexc.RedisClusterException, rexc.RedisError) as exc:
                if isinstance(exc, rexc.SlotNotCoveredError) or self.recoverable(exc):
                    self.nodes.stale = True
                    raise
                self.outcomes[owner] = self.outcomes[owner] or exc  # keyless, keys of several slots: that rule fails
                continue
            lanes.setdefault(pool, []).append((owner, step, self.wire(command)))
        for pool in lanes:
            if pool not in connections:
                try:
                    connections[pool] = await pool.get_connection()  # type: ignore[no-untyped-call]
                except (rexc.ConnectionError, rexc.TimeoutError, OSError):
                    self.nodes.stale = True  # a master that died: its replica may be promoted by the retry
                    raise
                held.push_async_callback(pool.release, connections[pool])
        replies = await asyncio.gather(
            *(self._send(connections[pool], [c for _, _, c in lane]) for pool, lane in lanes.items()),
            return_exceptions=True,
        )
        more: list[Any] = []
        for lane, answer in zip(lanes.values(), replies, strict=True):
            if isinstance(answer, BaseException):
                raise answer
            for (owner, step, _), reply in zip(lane, answer, strict=True):
                more += self._outcome(owner, step, reply)
        return more

    async def _send(self, connection: Any, commands: list[tuple[Any, ...] | Packed]) -> list[Any]:
        try:
            return await pipeline_on(connection, commands, self.timeout)
        except (rexc.ConnectionError, rexc.TimeoutError, OSError):
            self.nodes.stale = True  # a master down: the retry looks for the replica promoted
            raise

    def _outcome(self, owner: int, step: Any, reply: Any) -> list[Any]:
        if isinstance(reply, Exception):
            if isinstance(reply, _TOPOLOGY):
                self.nodes.stale = True
            if self.recoverable(reply):
                raise reply
            self.outcomes[owner] = self.outcomes[owner] or reply
            return []
        if isinstance(step, Then):
            return [(owner, later) for later in step.after(reply)]
        return []

    async def _wait(self, connections: dict[Any, Any]) -> None:
        """WAIT on every master written, on the connection that wrote (module docstring)."""
        wait = ("WAIT", self.wait, max(1, int(self.timeout * 500)))
        replies = await asyncio.gather(*(self._send(c, [wait]) for c in connections.values()))
        short = [reply[0] for reply in replies if not isinstance(reply[0], int) or reply[0] < self.wait]
        if short:
            raise rexc.TryAgainError(f"{short[0]!r} of {self.wait} replicas acknowledged the batch in time (WAIT)")


def _merge_touches(now: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """One INDEX_TOUCH per index for the phase's topics (its first owner stands for all: the
    touch cannot fail alone)."""
    out: list[tuple[int, Any]] = []
    touches: dict[tuple[bytes, bytes], tuple[int, dict[bytes, None]]] = {}
    for owner, step in now:
        if isinstance(step, Touch):
            touches.setdefault((step.index, step.stamps), (owner, {}))[1][step.topic] = None
        else:
            out.append((owner, step))
    for (index, stamps), (owner, topics) in touches.items():
        out.append((owner, Script("index_touch", (index, stamps), tuple(topics))))
    return out
