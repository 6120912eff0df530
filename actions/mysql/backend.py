"""MySQL / MariaDB backend on asyncmy.

A batch is cut at its read-then-act jobs; each run of writes in between goes out in one
transaction, with the message and event-log inserts of the run merged into multi-row
statements. If the database rejects something in that transaction, the run is replayed unit by
unit (each in its own transaction) so only the culprit fails. Connection loss raises, and the
runner retries the whole batch: every write is idempotent.

Connections run in autocommit mode (a write run opens its own transaction), so every read sees
what was committed before it, not a REPEATABLE READ snapshot from an earlier statement. Values
always travel as the driver's parameters: asyncmy escapes each one for the connection's
character set; no event value is ever formatted into statement text by the bridge.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import ssl
from collections.abc import Callable, Sequence
from typing import Any

import asyncmy
from asyncmy import errors

from actions.mysql import emqx44, schema
from actions.mysql.functions import GROUPED, SINGLE, Write
from actions.mysql.reads import MysqlStore, query
from bridge.backend import Backend, Job
from bridge.batches import cut_at_reads, planned, read
from bridge.fetch import READERS
from bridge.plugin import FunctionAction, SqlAction, TemplateAction, settings_context
from bridge.sql import render_sql

log = logging.getLogger(__name__)

# Server error codes worth retrying: too many connections, lock wait timeout, deadlock,
# server shutting down / read-only failover, and the client's "server gone / lost / cannot connect".
# Errors of the server's state, not the statement: too many connections (1040, 1203), shutdown
# (1053, 1927), lock wait / deadlock (1205, 1213), read-only (1290, 1792, 1836), disk or table
# full (1021, 1114), out of memory (1037, 1038, 1041), lost connection (2002-2055).
_RETRY_CODES = frozenset(
    {1021, 1037, 1038, 1040, 1041, 1053, 1114, 1203, 1205, 1213, 1290, 1792, 1836, 1927}
    | {2002, 2003, 2006, 2013, 2014, 2055}
)

Unit = tuple[list[int], list[Write]]  # job indexes and the statements that write them

_MARKER = re.compile(r"\$(\d+)")


def format_markers(text: str) -> str:
    """A statement compiled with `$n` markers, in the driver's `%s` paramstyle.

    The rules loader puts markers outside single-quoted literals only; `%` elsewhere is
    doubled, since the driver formats the text with its escaped arguments.
    """
    out: list[str] = []
    for index, piece in enumerate(re.split(r"('(?:[^']|'')*')", text)):
        piece = piece.replace("%", "%%")
        out.append(piece if index % 2 else _MARKER.sub("%s", piece))
    return "".join(out)


class MysqlBackend(Backend):
    db = "mysql"
    emqx44_migration = emqx44.migrate  # hookbridge migrate-emqx44 (docs/migrate-from-emqx44.md)
    functions = frozenset(GROUPED) | frozenset(SINGLE) | frozenset(READERS)

    async def connect(self) -> None:
        host, port = self.pool["server"]
        self.conns: Any = await asyncmy.create_pool(
            minsize=0,  # connect on first use: a server that is down now must not stop the start
            maxsize=max(2, self.pool["pool_size"]),
            host=host,
            port=port,
            user=self.pool["username"] or self.pool["user"] or None,
            password=self.pool["password"] or "",
            db=self.pool["database"],
            ssl=settings_context(self.pool.settings),
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=10,
            init_command="SET time_zone = '+00:00'",  # DATETIME(6) values are UTC
        )
        self._sql_text: dict[str, str] = {}
        self._schema_pending = bool(self.pool["auto_schema"])
        try:
            await self._ensure_schema()
        except Exception as exc:
            # A wrong password or certificate will not fix itself: refuse to start.
            # The server merely not up yet: start anyway; batches wait and retry.
            if isinstance(exc, ssl.SSLError) or not self.is_recoverable(exc):
                raise
            log.warning("pool %s: MySQL not reachable yet (%s); actions wait and retry", self.pool.id, exc)

    async def _ensure_schema(self) -> None:
        if self._schema_pending:
            await self.schema(apply=True)
            self._schema_pending = False
        else:
            async with self.conns.acquire() as conn:  # connect now, so bad credentials show at start
                await query(conn, "SELECT 1")

    async def probe(self) -> None:
        async with self.conns.acquire() as conn:
            await query(conn, "SELECT 1")

    async def close(self) -> None:
        self.conns.close()
        await self.conns.wait_closed()

    def is_recoverable(self, exc: BaseException) -> bool:
        if isinstance(exc, errors.MySQLError):
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            return isinstance(exc, errors.InterfaceError) or code in _RETRY_CODES
        return isinstance(exc, OSError | TimeoutError | ConnectionError)

    async def _collation(self, conn: Any) -> str:
        names = ", ".join(["%s"] * len(schema.COLLATIONS))
        rows = await query(conn, f"SHOW COLLATION WHERE Collation IN ({names})", schema.COLLATIONS)
        have = {row[0] for row in rows}
        return next((name for name in schema.COLLATIONS if name in have), "utf8mb4_bin")

    async def schema(self, apply: bool) -> str:
        if not apply:
            return schema.describe()
        async with self.conns.acquire() as conn:
            collation = await self._collation(conn)
            # One bridge migrates at a time (DDL commits implicitly: a named lock, not a transaction).
            await query(conn, "SELECT GET_LOCK('hookbridge_schema', 60)")
            await query(conn, "SET SESSION sql_notes = 0")  # "table already exists" is the expected case
            try:
                for statement in schema.statements(collation):
                    await _apply(conn, statement)
            finally:
                await query(conn, "SET SESSION sql_notes = 1")
                await query(conn, "SELECT RELEASE_LOCK('hookbridge_schema')")
        return schema.describe(collation)

    # -- batches -------------------------------------------------------------

    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        if self._schema_pending:
            await self._ensure_schema()
        async with self.conns.acquire() as conn:
            store = MysqlStore(conn)
            return await cut_at_reads(
                batch,
                functools.partial(self._write_run, conn),
                lambda job: read(self, store, job, refusals=(errors.MySQLError,)),
            )

    def _units(self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]) -> list[Unit]:
        """The run's writes in order, except that every job of a merged kind (message and event
        log inserts) joins the multi-row statements of its kind, at the kind's first place.

        Moving those inserts earlier is safe: they only add rows keyed by msgid (or append to the
        log), and a publish with both `on_message_publish` and `on_event_log` alternates the two kinds.
        """
        units: list[Unit] = []
        merged: dict[Callable[[Sequence[Job]], list[Write]], int] = {}  # kind -> its unit's index
        members: list[list[int]] = []
        for index in run:
            job = batch[index]
            action = job.rule.action
            group = GROUPED.get(action.spec.impl_name) if isinstance(action, FunctionAction) else None
            if group is not None:
                if group not in merged:
                    merged[group] = len(units)
                    units.append(([], []))
                    members.append([])
                members[merged[group]].append(index)
                continue
            for _, writes in planned(self, batch, [index], outcomes, self._writes):
                units.append(([index], writes))
                members.append([index])
        for group, position in merged.items():
            jobs = members[position]
            units[position] = (jobs, group([batch[i] for i in jobs]))
        return units

    def _writes(self, job: Job) -> list[Write]:
        action = job.rule.action
        if isinstance(action, FunctionAction):
            return SINGLE[action.spec.impl_name](job)
        if isinstance(action, SqlAction):
            return [Write(self._text(s.text), s.bind(job.values)) for s in action.statements]
        assert isinstance(action, TemplateAction)
        return [Write(self._text(text), args) for text, args in render_sql(action.template, job.values)]

    def _text(self, compiled: str) -> str:
        text = self._sql_text.get(compiled)
        if text is None:
            text = self._sql_text[compiled] = format_markers(compiled)
        return text

    async def _transaction(self, conn: Any, writes: Sequence[Write]) -> None:
        await conn.begin()
        try:
            async with conn.cursor() as cursor:
                for write in writes:
                    await cursor.execute(write.sql, tuple(write.args))
            await conn.commit()
        except BaseException:
            with contextlib.suppress(Exception):  # the connection is gone; the first error says why
                await conn.rollback()
            raise

    async def _write_run(
        self, conn: Any, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]
    ) -> None:
        units = self._units(batch, run, outcomes)
        if not units:
            return
        try:
            await self._transaction(conn, [write for _, writes in units for write in writes])
            return
        except Exception as exc:
            if self.is_recoverable(exc):
                raise
        for members, writes in units:  # find the culprit: one transaction per unit
            try:
                await self._transaction(conn, writes)
            except Exception as exc:
                if self.is_recoverable(exc):
                    raise
                for member in members:
                    outcomes[member] = exc

    async def maintenance(self) -> None:
        """Delete expired messages (rules with `expired_time`), in slices.

        `mqtt_topic` keeps topics whose messages are gone: removing them could race a
        concurrent insert of a new message on that topic and hide it from wildcard fetches.
        """
        if not self.trim_enabled:
            return
        async with self.conns.acquire() as conn, conn.cursor() as cursor:
            while True:
                deleted = await cursor.execute(
                    "DELETE FROM mqtt_msg WHERE expires_at < UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT 5000"
                )
                if deleted != 5000:
                    break


_DUPLICATE_COLUMN = 1060  # ER_DUP_FIELDNAME: an ADD COLUMN that an earlier run applied already


async def _apply(conn: Any, statement: str) -> None:
    """One schema statement; an ADD COLUMN already applied is fine (MySQL 8 has no IF NOT EXISTS there)."""
    try:
        await query(conn, statement)
    except errors.MySQLError as exc:
        if not (exc.args and exc.args[0] == _DUPLICATE_COLUMN and "ADD COLUMN" in statement):
            raise
