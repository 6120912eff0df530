"""What bench.mqtt_bench asks of the database, from outside the subscriber's process: empty it,
count the bench topics' messages, see them committed, read back their payloads.

Commit times (the latency phase only; nothing of this runs while throughput is measured):
- Redis: keyspace notifications for `hset` (`notify-keyspace-events Eh`). Every writer measured
  here sets each message's hash once (the bridge inside its `store` script, the other
  subscribers by a plain HSET), and Redis sends the event when the command runs, which is when
  the write is visible: inside a MULTI it runs at EXEC. The bench reads them on a raw socket
  parsed by hiredis (about a microsecond each), stamps each read with the time it arrived, and
  maps key -> payload afterwards.
- PostgreSQL: a second AFTER INSERT ... FOR EACH STATEMENT trigger with a transition table sends the
  new rows' ids with pg_notify, at most 500 per notification (the payload limit is 8000 bytes);
  PostgreSQL delivers a notification only when its transaction commits. One statement-level
  trigger per batch costs a few pg_notify calls, where a row-level one would queue one
  notification per row inside the writer's transaction. Ids map to payloads afterwards.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

import asyncpg
import hiredis
import redis.asyncio as aioredis

from actions.redis import keys
from bench import pgsql_bench

CHANNEL = "hb_bench_commit"
HSET_EVENTS = b"__keyevent@0__:hset"
READ_CHUNK = 10_000  # payloads read back per pipeline / query


class Store(Protocol):
    name: str

    async def fresh(self) -> None: ...
    async def count(self, topics: Sequence[str]) -> int: ...
    async def watch(self) -> None: ...
    async def commits(self, expected: int) -> list[tuple[int, bytes]]: ...
    async def payloads(self, topics: Sequence[str]) -> list[bytes]: ...
    async def close(self) -> None: ...


class Arrivals:
    """Commit events as they come in: (arrival time ns, what committed, how many messages)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, bytes]] = []
        self.messages = 0
        self._grew = asyncio.Event()

    def add(self, at: int, item: bytes, messages: int = 1) -> None:
        self.events.append((at, item))
        self.messages += messages
        self._grew.set()

    async def wait_for(self, expected: int, patience: float = 2.0) -> None:
        """Until `expected` messages' events are in: the store has answered a count that included
        the last commits, but their events travel on another connection. Fewer after `patience`
        seconds (a message stored twice or lost) is for the exactly-once check to report."""
        try:
            async with asyncio.timeout(patience):
                while self.messages < expected:
                    self._grew.clear()
                    await self._grew.wait()
        except TimeoutError:
            pass


class RedisStore:
    """The bridge's Redis layout (actions/redis/keys.py): `mqtt:msg:<topic>` sorted sets of
    message ids, `mqtt:msg:<msgid>` hashes with the payload."""

    name = "redis"

    def __init__(self, port: int) -> None:
        self.port = port
        self.redis: Any = aioredis.Redis(port=port, protocol=2)
        self.arrivals = Arrivals()
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def fresh(self) -> None:
        await self.redis.flushall()

    async def count(self, topics: Sequence[str]) -> int:
        pipe = self.redis.pipeline(transaction=False)
        for topic in topics:
            pipe.zcard(keys.topic_list(topic))
        return sum(await pipe.execute())

    async def watch(self) -> None:
        await self.redis.config_set("notify-keyspace-events", "Eh")
        reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._writer.write(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(HSET_EVENTS), HSET_EVENTS))
        parser = hiredis.Reader()
        while (confirmed := parser.gets()) is False:
            parser.feed(await reader.read(4096))
        if not isinstance(confirmed, list) or confirmed[0] != b"subscribe":
            raise RuntimeError(f"SUBSCRIBE {HSET_EVENTS!r}: {confirmed!r}")
        self.arrivals = Arrivals()
        self._reader = asyncio.create_task(self._read(reader, parser))

    async def _read(self, reader: asyncio.StreamReader, parser: hiredis.Reader) -> None:
        while data := await reader.read(1 << 16):
            now = time.time_ns()
            parser.feed(data)
            while (reply := parser.gets()) is not False:
                self.arrivals.add(now, reply[2])

    async def commits(self, expected: int) -> list[tuple[int, bytes]]:
        """(commit time ns, payload) of each message hash set since `watch`; stops watching."""
        await self.arrivals.wait_for(expected)
        assert self._reader is not None
        assert self._writer is not None
        self._reader.cancel()
        self._writer.close()
        await self.redis.config_set("notify-keyspace-events", "")
        found = []
        events = self.arrivals.events
        for start in range(0, len(events), READ_CHUNK):
            chunk = events[start : start + READ_CHUNK]
            pipe = self.redis.pipeline(transaction=False)
            for _, key in chunk:
                pipe.hget(key, "payload")
            found += [(at, payload) for (at, _), payload in zip(chunk, await pipe.execute(), strict=True) if payload]
        return found

    async def payloads(self, topics: Sequence[str]) -> list[bytes]:
        found: list[bytes] = []
        for topic in topics:
            ids = await self.redis.zrange(keys.topic_list(topic), 0, -1)
            for start in range(0, len(ids), READ_CHUNK):
                pipe = self.redis.pipeline(transaction=False)
                for msgid in ids[start : start + READ_CHUNK]:
                    pipe.hget(keys.MESSAGE_PREFIX + msgid, "payload")
                found += await pipe.execute()
        return found

    async def close(self) -> None:
        await self.redis.aclose()


# Counting rows in mqtt_msg costs PostgreSQL 20-40 ms at 100,000 rows, longer than the poll
# interval: instead a statement-level trigger adds each statement's rows per topic to a side
# table (one small insert per batch; a single counter row would serialize concurrent writers).
COUNT_TABLE = "CREATE TABLE hb_bench_stored (topic text NOT NULL, n bigint NOT NULL)"
COUNT_FUNCTION = """
CREATE OR REPLACE FUNCTION hb_bench_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO hb_bench_stored SELECT topic, count(*) FROM counted GROUP BY topic;
  RETURN NULL;
END $$"""
COUNT_TRIGGER = """
CREATE TRIGGER hb_bench_count AFTER INSERT ON mqtt_msg REFERENCING NEW TABLE AS counted
FOR EACH STATEMENT EXECUTE FUNCTION hb_bench_count()"""
NOTIFY_FUNCTION = f"""
CREATE OR REPLACE FUNCTION hb_bench_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE chunk text;
BEGIN
  FOR chunk IN SELECT string_agg(id::text, ',') FROM (SELECT id, row_number() OVER () / 500 AS part FROM fresh) s
               GROUP BY part LOOP
    PERFORM pg_notify('{CHANNEL}', chunk);
  END LOOP;
  RETURN NULL;
END $$"""
NOTIFY_TRIGGER = """
CREATE TRIGGER hb_bench_notify AFTER INSERT ON mqtt_msg REFERENCING NEW TABLE AS fresh
FOR EACH STATEMENT EXECUTE FUNCTION hb_bench_notify()"""


class PgsqlStore:
    """The bridge's PostgreSQL tables (actions/pgsql/schema.py), dropped and created afresh."""

    name = "pgsql"

    def __init__(self, conn: asyncpg.Connection, listener: asyncpg.Connection) -> None:
        self.conn, self.listener = conn, listener
        self.arrivals = Arrivals()

    @classmethod
    async def connect(cls, port: int) -> PgsqlStore:
        return cls(await asyncpg.connect(pgsql_bench.dsn(port)), await asyncpg.connect(pgsql_bench.dsn(port)))

    async def fresh(self) -> None:
        await pgsql_bench.fresh_tables(self.conn)
        await self.conn.execute("DROP TABLE IF EXISTS hb_bench_stored")
        for statement in (COUNT_TABLE, COUNT_FUNCTION, COUNT_TRIGGER):
            await self.conn.execute(statement)

    async def count(self, topics: Sequence[str]) -> int:
        query = "SELECT coalesce(sum(n), 0) FROM hb_bench_stored WHERE topic = ANY($1)"
        return int(await self.conn.fetchval(query, list(topics)))

    async def watch(self) -> None:
        await self.conn.execute(NOTIFY_FUNCTION)
        await self.conn.execute(NOTIFY_TRIGGER)
        self.arrivals = Arrivals()
        await self.listener.add_listener(CHANNEL, self._notified)

    def _notified(self, conn: Any, pid: int, channel: str, ids: str) -> None:
        self.arrivals.add(time.time_ns(), ids.encode(), ids.count(",") + 1)

    async def commits(self, expected: int) -> list[tuple[int, bytes]]:
        """(commit time ns, payload head) of each row inserted since `watch`; stops watching."""
        await self.arrivals.wait_for(expected)
        await self.listener.remove_listener(CHANNEL, self._notified)
        await self.conn.execute("DROP TRIGGER hb_bench_notify ON mqtt_msg")
        committed = {int(row_id): at for at, ids in self.arrivals.events for row_id in ids.split(b",")}
        rows = await self.conn.fetch(
            "SELECT id, substring(payload FROM 1 FOR 48) AS head FROM mqtt_msg WHERE id = ANY($1::bigint[])",
            list(committed),
        )
        return [(committed[row["id"]], bytes(row["head"])) for row in rows]

    async def payloads(self, topics: Sequence[str]) -> list[bytes]:
        rows = await self.conn.fetch(
            "SELECT substring(payload FROM 1 FOR 48) AS head FROM mqtt_msg WHERE topic = ANY($1)", list(topics)
        )
        return [bytes(row["head"]) for row in rows]

    async def close(self) -> None:
        await self.listener.close()
        await self.conn.close()
