"""The connection class of every Redis pool: commands packed by hiredis, and a lean pipeline.

- Packing: redis-py's asyncio `Connection.pack_command` builds each command in Python;
  measured under the embedded broker's publish path with `rules/redis.conf` it was the largest
  single cost in the bridge process (about 12% of its CPU, py-spy). hiredis, already installed
  for reply parsing, packs the same RESP bytes in C. Arguments here are always bytes, str, int
  or float (what hiredis accepts); a command name of two words ("SCRIPT LOAD") is split as
  redis-py splits it.
- `pipeline`: a batch's commands in one write (packed by resp.py, compiled, which keeps the
  packed form of the strings every command repeats), and their replies read under ONE timeout.
  redis-py's Pipeline enters an asyncio timeout, looks up a reply callback and re-raises
  for every reply; in the mqtt mode's profile that was about a tenth of the bridge's CPU per
  message (py-spy, 100,000 messages through Mosquitto,
  docs/benchmarks.md#external-broker-qos-1-through-mosquitto-into-redis-and-postgresql). The connection is still
  redis-py's (pool, AUTH, SELECT, TLS, health checks), and so are the reply parser and its
  error classes (`pipeline_on` says why it reads the parser directly, and what that asks of the
  redis-py pin).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

from actions.redis.resp import Packed, any_read_only, pack_commands, read_replies


class _HiredisPacking:
    def pack_command(self, *args: Any) -> list[bytes]:
        name = args[0]
        if (isinstance(name, str) and " " in name) or (isinstance(name, bytes) and b" " in name):
            args = (*name.split(), *args[1:])
        return [hiredis.pack_command(args)]


class PackedConnection(_HiredisPacking, aioredis.Connection):
    pass


class PackedSSLConnection(_HiredisPacking, aioredis.SSLConnection):
    pass


class PackedSentinelConnection(_HiredisPacking, SentinelManagedConnection):
    pass


class PackedSentinelSSLConnection(_HiredisPacking, SentinelManagedSSLConnection):
    pass


async def pipeline(
    pool: aioredis.ConnectionPool, commands: Sequence[Sequence[Any] | Packed], reply_within: float
) -> list[Any]:
    """Run `commands` in order on one connection of `pool` (`pipeline_on`)."""
    connection: Any = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        return await pipeline_on(connection, commands, reply_within)
    finally:
        await pool.release(connection)


async def pipeline_on(connection: Any, commands: Sequence[Sequence[Any] | Packed], reply_within: float) -> list[Any]:
    """Run `commands` in order on `connection`; every reply, an error reply as its exception
    object (like redis-py's `execute(raise_on_error=False)`). A connection that fails or times out
    is closed (its replies are unknown) and the error raised, as redis-py does: ConnectionError or
    TimeoutError, both recoverable for the runner.

    Replies are read by redis-py's reply parser of the connection (`connection._parser`, a private
    attribute): its public `read_response` enters a timeout and checks the connection's health per
    reply, which cost 2 µs of CPU per command more (5.4 against 3.4 µs, a pipeline of 500 HSETs;
    about 8 µs per stored message, a seventh of the runner's client CPU, bench/redis_bench.py).
    And the parser's own `read_response`, a coroutine per reply, is itself skipped: `resp.read_replies`
    takes the replies from its hiredis reader in one loop (docs/benchmarks.md#redis-replies-in-one-loop).
    So the redis-py pin in pyproject.toml admits only the versions this is tested with, and
    tests/unit/test_redis_packing.py fails at once if one stops having it."""
    await connection.send_packed_command(pack_commands(commands))
    parser = connection._parser
    try:
        async with asyncio.timeout(reply_within):
            replies = await read_replies(parser, len(commands))
    except TimeoutError:
        await connection.disconnect(nowait=True)
        raise rexc.TimeoutError(f"no reply within {reply_within:g} s") from None
    except OSError as exc:
        await connection.disconnect(nowait=True)
        raise rexc.ConnectionError(f"reading replies: {exc}") from exc
    except BaseException:
        await connection.disconnect(nowait=True)
        raise
    if any_read_only(replies):
        # A primary demoted to a replica (a Sentinel failover while this connection stayed
        # open): reconnect next time, which asks the Sentinels for the primary again.
        await connection.disconnect(nowait=True)
    return replies
