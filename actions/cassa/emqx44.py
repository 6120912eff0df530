"""Bring the Cassandra tables EMQX 4.4 Enterprise created (its backend page's `mqtt.client`, `sub`,
`msg`, `retain`, `acked`) into hookbridge's layout (`hookbridge migrate-emqx44 --pool cassa.<pool>`).

Same table names, other keys and columns (docs/migrate-from-emqx44.md#cassandra): EMQX's `msg` is
one partition per topic, `PRIMARY KEY (topic, msgid)` with base62 ids newest first; hookbridge's
is one partition per topic and hour, `((topic, bucket), msgid)` with hex ids oldest first, plus
the `msg_bucket` and `topic` index tables. `client` names its times `connected` / `disconnected`
(ours `online_at` / `offline_at`), `retain` keeps only the msgid (ours the message too), `acked`
holds base62 ids. `sub` is the same.

Cassandra can neither change a primary key nor rename a table, so `client`, `msg` and `retain`
go through a copy of EMQX's table: each is copied as it is into `<table>__emqx44` (kept, like
MySQL's), which is marked done in its table comment only once every row is in; then EMQX's table
is dropped, hookbridge's created under the name, and the rows converted into it from the copy;
then the comment says converted. Every write is an idempotent upsert with fixed values, so a run
stopped anywhere resumes from what the comment and the tables say, and a second run finds nothing
to do. Offsets are changed in place by compare-and-set, as hookbridge moves them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from actions.cassa import schema
from actions.cassa.functions import bucket_of, root_of
from bridge.emqx44.survey import IdSurvey, check_kept
from bridge.emqx_msgid import UnconvertibleId, convert
from bridge.msgid import timestamp_us

BACKUP = "__emqx44"
# Table comments (CQL string literals: no quotes in them)
COPIED = "hookbridge migrate-emqx44: the table of EMQX 4.4, copied whole"
CONVERTED = "hookbridge migrate-emqx44: the table of EMQX 4.4, converted into the table of hookbridge"
_CONCURRENT = 64  # rows written at once


class Session(Protocol):
    """What the migration needs of actions.cassa.session.AsyncSession."""

    async def execute(self, statement: Any, args: Sequence[Any] | None = None) -> list[Any]: ...

    def pages(
        self, statement: str, args: Sequence[Any] | None = None, size: int = 1000
    ) -> AsyncIterator[list[Any]]: ...

    async def prepare(self, text: str) -> Any: ...


def new_id(emqx_id: str | None) -> str | None:
    """The id a message has in hookbridge's layout (also when it has it already); None: no id (the
    survey refused the migration before any row got here)."""
    if not emqx_id:
        return None
    try:
        return convert(emqx_id)[1]
    except UnconvertibleId:
        return None


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    survey: IdSurvey = field(default_factory=IdSurvey)

    def out(self) -> list[str]:
        return [
            *self.survey.lines(),
            *self.lines,
            *(f"left as is (not an EMQX 4.4 or hookbridge id): {i}" for i in self.unknown[:20]),
        ]


def _emqx_msg(columns: dict[str, Any]) -> bool:
    return "bucket" not in columns


def _emqx_retain(columns: dict[str, Any]) -> bool:
    return "payload" not in columns


class Migration:
    def __init__(self, cql: Session, keyspace: str, replication: dict[str, Any], dry_run: bool) -> None:
        self.cql, self.ks, self.replication, self.dry_run = cql, keyspace, replication, dry_run
        self.report = Report()
        self.read: dict[str, int] = {}  # rows of EMQX's table a conversion read
        self.dropped: dict[str, int] = {}  # rows a conversion leaves out on purpose (retain: no message)

    # -- what is there ----------------------------------------------------------------------------

    async def columns(self, table: str) -> dict[str, tuple[str, str, int, str]]:
        """name -> (type, kind, position, clustering order), from the schema tables."""
        rows = await self.cql.execute(
            "SELECT column_name, type, kind, position, clustering_order FROM system_schema.columns"
            " WHERE keyspace_name = %s AND table_name = %s",
            (self.ks, table),
        )
        return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}

    async def comment(self, table: str) -> str | None:
        rows = await self.cql.execute(
            "SELECT comment FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s", (self.ks, table)
        )
        return str(rows[0][0] or "") if rows else None

    async def apply_schema(self) -> None:
        """hookbridge's tables that are missing (an EMQX table of the same name is left alone)."""
        for statement in schema.statements(self.ks, self.replication):
            await self.cql.execute(statement)

    async def emqx_rows(self, table: str, is_emqx: Callable[[dict[str, Any]], bool]) -> str | None:
        """Where EMQX's rows of `table` are still to be converted from: the table, or its copy."""
        mark = await self.comment(table + BACKUP)
        if mark == CONVERTED:
            return None
        if mark == COPIED:
            return table + BACKUP
        columns = await self.columns(table)
        return table if columns and is_emqx(columns) else None

    async def survey(self) -> None:
        """Every msgid EMQX left read and converted (nothing changed); refused if one is no id."""
        survey = self.report.survey
        for table, is_emqx in (("msg", _emqx_msg), ("retain", _emqx_retain)):
            source = await self.emqx_rows(table, is_emqx)
            if source is None:
                continue
            survey.note(table)
            async for rows in self.cql.pages(f"SELECT topic, msgid FROM {self.ks}.{source}"):
                for topic, msgid in rows:
                    survey.convert(table, f"topic {topic!r} msgid", msgid)
        if "clientid" in await self.columns("acked"):
            survey.note("acked")
            for clientid, topic, msgid in await self.cql.execute(f"SELECT clientid, topic, msgid FROM {self.ks}.acked"):
                if msgid:
                    survey.convert("acked", f"clientid {clientid!r} topic {topic!r} msgid", msgid)
        survey.refuse_unconvertible()

    # -- one table: copy whole, drop, create, convert --------------------------------------------

    async def move(
        self, table: str, is_emqx: Callable[[dict[str, Any]], bool], convert: Callable[[str], Awaitable[int]]
    ) -> None:
        backup = table + BACKUP
        mark = await self.comment(backup)
        if mark == CONVERTED:
            return
        columns = await self.columns(table)
        emqx = bool(columns) and is_emqx(columns)
        if mark != COPIED and not emqx:
            return  # hookbridge's table (or none): nothing of EMQX's to move
        self.report.lines.append(
            f"{table}: {'would be ' if self.dry_run else ''}copied to {backup}, replaced by hookbridge's table"
            " and its rows converted"
        )
        if self.dry_run:
            return
        if mark != COPIED:
            await self.copy_whole(table, backup, columns)
            await self.cql.execute(f"ALTER TABLE {self.ks}.{backup} WITH comment = '{COPIED}'")
        if emqx:
            await self.cql.execute(f"DROP TABLE {self.ks}.{table}")
        await self.apply_schema()
        converted = await convert(backup)
        if table in self.read:  # every message and retained topic read is in hookbridge's table now
            check_kept(table, self.read[table] - self.dropped.get(table, 0), converted)
        await self.cql.execute(f"ALTER TABLE {self.ks}.{backup} WITH comment = '{CONVERTED}'")
        self.report.lines.append(f"{table}: {converted} rows converted")

    async def copy_whole(self, table: str, backup: str, columns: dict[str, tuple[str, str, int, str]]) -> None:
        """`backup` with EMQX's columns and keys, and every row of `table` in it."""

        def of_kind(kind: str) -> list[str]:
            return [name for name, c in sorted(columns.items(), key=lambda i: i[1][2]) if c[1] == kind]

        partition, clustering = of_kind("partition_key"), of_kind("clustering")
        key = f"(({', '.join(partition)}){''.join(', ' + c for c in clustering)})"
        order = ", ".join(f"{c} {columns[c][3].upper()}" for c in clustering)
        names = list(columns)
        await self.cql.execute(
            f"CREATE TABLE IF NOT EXISTS {self.ks}.{backup} ("
            + ", ".join(f"{name} {columns[name][0]}" for name in names)
            + f", PRIMARY KEY {key})"
            + (f" WITH CLUSTERING ORDER BY ({order})" if order else "")
        )
        insert = await self.cql.prepare(
            f"INSERT INTO {self.ks}.{backup} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
        )
        async for rows in self.cql.pages(f"SELECT {', '.join(names)} FROM {self.ks}.{table}"):
            await self.write_all(insert, [tuple(row) for row in rows])

    async def write_all(self, statement: Any, rows: Sequence[Sequence[Any]]) -> None:
        for start in range(0, len(rows), _CONCURRENT):
            await asyncio.gather(*(self.cql.execute(statement, row) for row in rows[start : start + _CONCURRENT]))

    # -- the conversions --------------------------------------------------------------------------

    async def convert_clients(self, backup: str) -> int:
        """connected / disconnected -> online_at / offline_at, written at the newest event's time
        (hookbridge's writes carry the event's time: any later event wins)."""
        insert = await self.cql.prepare(
            f"INSERT INTO {self.ks}.client (clientid, state, node, online_at, offline_at)"
            " VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        client_column = "clientid" if "clientid" in await self.columns(backup) else "client_id"
        done = 0
        select = f"SELECT {client_column}, state, node, connected, disconnected FROM {self.ks}.{backup}"
        async for rows in self.cql.pages(select):
            values = []
            for clientid, state, node, online, offline in rows:
                times = [t.replace(tzinfo=dt.UTC).timestamp() for t in (online, offline) if t is not None]
                at = int(max(times) * 1_000_000) if times else int(time.time() * 1_000_000)
                values.append((clientid, int(state or 0), node, online, offline, at))
            await self.write_all(insert, values)
            done += len(values)
        return done

    async def convert_messages(self, backup: str) -> int:
        text_payload = (await self.columns(backup)).get("payload", ("blob",))[0] == "text"
        insert = await self.cql.prepare(
            f"INSERT INTO {self.ks}.msg (topic, bucket, msgid, sender, qos, retain, payload, arrived)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        )
        done, topics = 0, set()
        select = f"SELECT topic, msgid, sender, qos, retain, payload, arrived FROM {self.ks}.{backup}"
        self.read["msg"] = 0
        async for rows in self.cql.pages(select):
            self.read["msg"] += len(rows)
            values = []
            for topic, msgid, sender, qos, retain, payload, arrived in rows:
                new = new_id(msgid)
                if new is None:
                    self.report.unknown.append(f"msg {topic!r} {msgid!r}")
                    continue
                if text_payload and payload is not None:
                    payload = payload.encode()
                bucket = bucket_of(new)
                values.append((topic, bucket, new, sender or "", int(qos or 0), bool(retain), payload or b"", arrived))
                topics.add((topic, bucket))  # one per topic and hour: small beside the messages
            await self.write_all(insert, values)
            done += len(values)
        await self.index(topics)
        return done

    async def index(self, topics: set[tuple[str, int]]) -> None:
        """The index rows a fetch and a retain lookup find topics and hours by."""
        bucket = await self.cql.prepare(f"INSERT INTO {self.ks}.msg_bucket (topic, bucket) VALUES (?, ?)")
        topic = await self.cql.prepare(f"INSERT INTO {self.ks}.topic (root, topic) VALUES (?, ?)")
        await self.write_all(bucket, sorted(pair for pair in topics if pair[1] >= 0))
        await self.write_all(topic, sorted({(root_of(name), name) for name, _ in topics}))

    async def convert_retained(self, backup: str) -> int:
        """EMQX kept only the msgid: the message comes from EMQX's msg (its copy). A retained message
        whose message is gone cannot be served and is dropped."""
        messages = await self.comment("msg" + BACKUP) in (COPIED, CONVERTED)
        insert = await self.cql.prepare(
            f"INSERT INTO {self.ks}.retain (topic, msgid, sender, qos, payload, arrived)"
            " VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        values, topics, gone = [], set(), 0
        rows = await self.cql.execute(f"SELECT topic, msgid FROM {self.ks}.{backup}")
        self.read["retain"] = len(rows)
        for topic, msgid in rows:
            new = new_id(msgid)
            if new is None:
                self.report.unknown.append(f"retain {topic!r} {msgid!r}")
                continue
            found = []
            if messages:
                found = await self.cql.execute(
                    f"SELECT sender, qos, payload, arrived FROM {self.ks}.msg{BACKUP} WHERE topic = %s AND msgid = %s",
                    (topic, msgid),
                )
            if not found:
                gone += 1
                continue
            sender, qos, payload, arrived = found[0]
            if isinstance(payload, str):
                payload = payload.encode()
            values.append((topic, new, sender or "", int(qos or 0), payload or b"", arrived, timestamp_us(new)))
            topics.add((topic, -1))  # the topic index only
        await self.write_all(insert, values)
        await self.index(topics)
        self.dropped["retain"] = gone
        if gone:
            self.report.lines.append(f"retain: {gone} retained messages whose message EMQX no longer had, dropped")
        return len(values)

    async def offsets(self) -> None:
        """acked's shape is hookbridge's; its ids move by compare-and-set (only if unchanged meanwhile)."""
        if "clientid" not in await self.columns("acked"):
            return
        update = await self.cql.prepare(
            f"UPDATE {self.ks}.acked SET msgid = ? WHERE clientid = ? AND topic = ? IF msgid = ?"
        )
        changes = []
        for clientid, topic, msgid in await self.cql.execute(f"SELECT clientid, topic, msgid FROM {self.ks}.acked"):
            new = new_id(msgid)
            if msgid and new is None:
                self.report.unknown.append(f"acked {clientid!r} {topic!r} {msgid!r}")
            elif new is not None and new != msgid:
                changes.append((new, clientid, topic, msgid))
        if changes:
            self.report.lines.append(f"acked: {len(changes)} offsets {'would be ' if self.dry_run else ''}converted")
        if not self.dry_run:
            await self.write_all(update, changes)

    async def run(self) -> list[str]:
        await self.survey()  # before the first change
        if not self.dry_run:
            await self.apply_schema()
        await self.move("client", lambda c: "connected" in c or "client_id" in c, self.convert_clients)
        await self.move("msg", _emqx_msg, self.convert_messages)
        await self.move("retain", _emqx_retain, self.convert_retained)
        for table in ("sub", "acked"):
            if "client_id" in await self.columns(table):  # the column's name on pages before 4.4
                self.report.lines.append(f"{table}: has client_id, not clientid (EMQX before 4.4): left as is")
        await self.offsets()
        return self.report.out()


async def migrate_cassa(
    cql: Session, keyspace: str, replication: dict[str, Any] | None = None, dry_run: bool = False
) -> list[str]:
    replication = replication or {"class": "SimpleStrategy", "replication_factor": 1}
    return await Migration(cql, keyspace, replication, dry_run).run()


async def migrate(pool: Any, dry_run: bool) -> list[str]:
    """`hookbridge migrate-emqx44 --pool cassa.<pool>`: a session of the pool's own settings."""
    from actions.cassa.session import AsyncSession, build_cluster

    cluster = build_cluster(pool)
    try:
        cql = AsyncSession(await asyncio.to_thread(cluster.connect))
        return await migrate_cassa(cql, str(pool["keyspace"]), pool["replication"], dry_run=dry_run)
    finally:
        await asyncio.to_thread(cluster.shutdown)
