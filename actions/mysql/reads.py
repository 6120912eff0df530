"""The store queries of the read-then-act functions on MySQL / MariaDB (the protocol: bridge/fetch.py).

A wildcard filter finds its topics in `mqtt_topic` / `mqtt_retain` by an index range on its
literal prefix (exact MQTT matching on the few candidates, with a binary collation), then each
topic's messages are read by the (topic, msgid) index, oldest first, merged in msgid (publish)
order. MariaDB has no LATERAL join: the per-topic reads are one UNION ALL statement per slice of
topics, merged here.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from actions.mysql.functions import when
from bridge.fetch import NO_UPPER, Stored, Window
from bridge.topics import matching, prefix_range

Connection = Any  # asyncmy.Connection (untyped)
Row = tuple[Any, ...]

_SLICE = 100  # topics per UNION ALL statement

_PAGE_ONE = """(SELECT msgid, sender, topic, qos, payload FROM mqtt_msg
    WHERE topic = %s AND msgid > %s AND msgid < %s AND arrived >= %s
      AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(6))
    ORDER BY msgid LIMIT %s)"""

_NEWEST_ONE = "(SELECT msgid, id FROM mqtt_msg WHERE topic = %s AND msgid < %s ORDER BY msgid DESC LIMIT 1)"

_RETAINED_ONE = (
    "(SELECT msgid, sender, topic, qos, payload FROM mqtt_retain WHERE topic = %s"
    " AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(6)))"
)


async def query(conn: Connection, sql: str, args: Sequence[Any] = ()) -> list[Row]:
    async with conn.cursor() as cursor:
        await cursor.execute(sql, tuple(args))
        return list(await cursor.fetchall())


def _stored(row: Row) -> Stored:
    msgid, sender, topic, qos, payload = row
    return Stored(msgid, topic, bytes(payload), qos, sender)


class MysqlStore:
    """The queries on one connection (the batch's)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def _candidates(self, table: str, topic_filter: str) -> list[str]:
        bounds = prefix_range(topic_filter)
        if bounds is None:
            rows = await query(self.conn, f"SELECT topic FROM {table}")
        elif bounds[1] is None:
            rows = await query(self.conn, f"SELECT topic FROM {table} WHERE topic >= %s", (bounds[0],))
        else:
            rows = await query(self.conn, f"SELECT topic FROM {table} WHERE topic >= %s AND topic < %s", bounds)
        return [row[0] for row in rows]

    async def _per_topic(self, one: str, topics: Sequence[str], args: Sequence[Any]) -> list[Row]:
        """`one` (a parenthesised SELECT taking the topic, then `args`) for every topic, UNION ALL."""
        rows: list[Row] = []
        for start in range(0, len(topics), _SLICE):
            part = topics[start : start + _SLICE]
            sql = " UNION ALL ".join([one] * len(part))
            rows += await query(self.conn, sql, [value for topic in part for value in (topic, *args)])
        return rows

    async def subscriptions(self, clientid: str) -> list[tuple[str, Any]]:
        rows = await query(self.conn, "SELECT topic, qos FROM mqtt_sub WHERE clientid = %s ORDER BY topic", (clientid,))
        return [(row[0], row[1]) for row in rows]

    async def retained_topics(self, topic_filter: str) -> list[str]:
        return await matching(topic_filter, functools.partial(self._candidates, "mqtt_retain"))

    async def retained(self, topic_filter: str, topics: Sequence[str]) -> list[Stored]:
        rows = await self._per_topic(_RETAINED_ONE, topics, ())
        return [_stored(row) for row in sorted(rows, key=lambda row: row[2])]

    async def message_topics(self, topic_filter: str) -> list[str]:
        return await matching(topic_filter, functools.partial(self._candidates, "mqtt_topic"))

    async def page(self, topics: Sequence[str], window: Window, limit: int) -> list[Stored]:
        since = when(window.since if window.since is not None else 0.0)
        rows = await self._per_topic(_PAGE_ONE, topics, (window.after, window.upper, since, limit))
        return [_stored(row) for row in sorted(rows, key=lambda row: row[0])[:limit]]

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        sql = "SELECT msgid FROM mqtt_acked WHERE clientid = %s AND topic = %s"
        rows = await query(self.conn, sql, (clientid, topic_filter))
        return str(rows[0][0]) if rows else None

    async def start_offset(self, clientid: str, topic_filter: str, topics: Sequence[str], before: str | None) -> None:
        newest = await self._per_topic(_NEWEST_ONE, topics, (before or NO_UPPER,))
        await query(
            self.conn,
            "INSERT INTO mqtt_acked (clientid, topic, msgid, mid) VALUES (%s, %s, %s, %s)"
            " ON DUPLICATE KEY UPDATE clientid = clientid",
            (
                clientid,
                topic_filter,
                max((row[0] for row in newest), default=""),
                max((row[1] for row in newest), default=0),
            ),
        )
