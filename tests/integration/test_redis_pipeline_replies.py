"""actions/redis/packing.py reads a pipeline's replies straight from redis-py's hiredis reader
(`resp.read_replies`, compiled in the wheel): against a real Redis, every kind of reply comes back as redis-py's own
pipeline gives it, including replies that take many socket reads and error replies in the
middle of a batch."""

from __future__ import annotations

from typing import Any

import pytest
import redis as redis_sync
import redis.asyncio as aioredis
from redis import exceptions as rexc

from actions.redis.packing import PackedConnection, pipeline, pipeline_on

BIG = b"v" * 3_000_000  # one reply of many socket reads (redis-py reads 64 KiB at a time)


def _commands() -> list[tuple[Any, ...]]:
    commands: list[tuple[Any, ...]] = [("SET", "big", BIG), ("SET", "text", "not a number")]
    commands += [("RPUSH", "list", *range(5)), ("LRANGE", "list", 0, -1), ("INCR", "text"), ("GET", "missing")]
    commands += [("HSET", "h", "f", n) for n in range(2_000)]
    commands += [("GET", "big"), ("HGETALL", "h"), ("EVAL", "return {1, 'two', redis.error_reply('ERR inner')}", 0)]
    commands += [("PING",), ("NO-SUCH-COMMAND",), ("ECHO", "last")]
    return commands


def _shape(reply: Any) -> Any:
    """A reply with exception objects as (class name, message): comparable."""
    if isinstance(reply, Exception):
        return (type(reply).__name__, str(reply))
    if isinstance(reply, list):
        return [_shape(item) for item in reply]
    return reply


async def _reference(pool: aioredis.ConnectionPool, commands: list[tuple[Any, ...]]) -> list[Any]:
    """The same commands' replies as redis-py's parser gives them, one `read_response` each (the
    way packing.py read them before)."""
    connection: Any = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await connection.send_packed_command(connection.pack_commands(commands))
        return [await connection._parser.read_response() for _ in commands]
    finally:
        await pool.release(connection)


async def test_a_pipelines_replies_are_redis_pys_own(redis_db: redis_sync.Redis, redis_port: int) -> None:
    pool = aioredis.ConnectionPool(port=redis_port, connection_class=PackedConnection, protocol=2)
    try:
        ours = await pipeline(pool, _commands(), reply_within=30)
        redis_db.flushall()
        theirs = await _reference(pool, _commands())
    finally:
        await pool.disconnect()
    assert len(ours) == len(_commands())
    assert ours[-6] == BIG and _shape(ours[4])[0] == "ResponseError"  # the big GET; INCR on text
    assert _shape(ours[-2])[0] == "ResponseError" and ours[-1] == b"last"  # an error, then the rest
    assert [_shape(reply) for reply in ours] == [_shape(reply) for reply in theirs]


async def test_a_connection_killed_before_its_replies_raises_connection_error(redis_port: int) -> None:
    pool = aioredis.ConnectionPool(port=redis_port, connection_class=PackedConnection, protocol=2)
    admin = redis_sync.Redis(port=redis_port, protocol=2)
    try:
        connection: Any = await pool.get_connection()  # type: ignore[no-untyped-call]
        await connection.send_command("CLIENT", "ID")
        client_id = await connection.read_response()
        admin.execute_command("CLIENT", "KILL", "ID", client_id)
        with pytest.raises(rexc.ConnectionError):
            await pipeline_on(connection, [("PING",)], reply_within=10)
    finally:
        admin.close()
        await pool.disconnect()
