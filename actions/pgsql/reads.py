"""The store queries of the read-then-act functions on PostgreSQL (the protocol: bridge/fetch.py).

A wildcard filter finds its topics in `mqtt_topic` / `mqtt_retain` by an index
range on its literal prefix (exact MQTT matching on the few candidates), then
each topic's messages are read by the (topic, msgid) index, oldest first, merged
in msgid (publish) order.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from actions.pgsql.functions import when
from bridge.fetch import NO_UPPER, Stored, Window
from bridge.topics import matching, prefix_range

Connection = Any  # asyncpg.Connection (untyped)

_PAGE = """
SELECT m.msgid, m.sender, m.topic, m.qos, m.payload
FROM unnest($1::text[]) AS t(topic)
CROSS JOIN LATERAL (
    SELECT msgid, sender, topic, qos, payload FROM mqtt_msg
    WHERE mqtt_msg.topic = t.topic AND msgid > $2 AND msgid < $3 AND arrived >= $4
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY msgid LIMIT $5
) AS m
ORDER BY m.msgid LIMIT $5"""

_NEWEST = """
SELECT max(m.msgid), max(m.id) FROM unnest($1::text[]) AS t(topic)
CROSS JOIN LATERAL (
    SELECT msgid, id FROM mqtt_msg WHERE mqtt_msg.topic = t.topic AND msgid < $2 ORDER BY msgid DESC LIMIT 1
) AS m"""

_RETAINED = """SELECT topic, msgid, sender, qos, payload FROM mqtt_retain WHERE topic = ANY($1::text[])
    AND (expires_at IS NULL OR expires_at > now()) ORDER BY topic"""


def _stored(row: Any) -> Stored:
    return Stored(row["msgid"], row["topic"], bytes(row["payload"]), row["qos"], row["sender"])


class PgsqlStore:
    """The queries on one connection (the batch's)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def _candidates(self, table: str, topic_filter: str) -> list[str]:
        # `~>=~` / `~<~` rather than LIKE, so that even a generic prepared plan uses the
        # text_pattern_ops index.
        bounds = prefix_range(topic_filter)
        if bounds is None:
            rows = await self.conn.fetch(f"SELECT topic FROM {table}")
        elif bounds[1] is None:
            rows = await self.conn.fetch(f"SELECT topic FROM {table} WHERE topic ~>=~ $1", bounds[0])
        else:
            rows = await self.conn.fetch(f"SELECT topic FROM {table} WHERE topic ~>=~ $1 AND topic ~<~ $2", *bounds)
        return [row["topic"] for row in rows]

    async def subscriptions(self, clientid: str) -> list[tuple[str, Any]]:
        rows = await self.conn.fetch("SELECT topic, qos FROM mqtt_sub WHERE clientid = $1 ORDER BY topic", clientid)
        return [(row["topic"], row["qos"]) for row in rows]

    async def retained_topics(self, topic_filter: str) -> list[str]:
        return await matching(topic_filter, functools.partial(self._candidates, "mqtt_retain"))

    async def retained(self, topic_filter: str, topics: Sequence[str]) -> list[Stored]:
        return [_stored(row) for row in await self.conn.fetch(_RETAINED, topics)]

    async def message_topics(self, topic_filter: str) -> list[str]:
        return await matching(topic_filter, functools.partial(self._candidates, "mqtt_topic"))

    async def page(self, topics: Sequence[str], window: Window, limit: int) -> list[Stored]:
        since = when(window.since if window.since is not None else 0.0)
        return [_stored(row) for row in await self.conn.fetch(_PAGE, topics, window.after, window.upper, since, limit)]

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        query = "SELECT msgid FROM mqtt_acked WHERE clientid = $1 AND topic = $2"
        offset: str | None = await self.conn.fetchval(query, clientid, topic_filter)
        return offset

    async def start_offset(self, clientid: str, topic_filter: str, topics: Sequence[str], before: str | None) -> None:
        newest = await self.conn.fetchrow(_NEWEST, topics, before or NO_UPPER)
        await self.conn.execute(
            "INSERT INTO mqtt_acked (clientid, topic, msgid, mid) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            clientid,
            topic_filter,
            newest[0] or "",
            newest[1] or 0,
        )
