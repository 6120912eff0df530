"""MySQL / MariaDB backend on asyncmy.

Its batches are those of every SQL backend (bridge/batches.py, `SqlBackend`): a batch is cut at
its read-then-act jobs; each run of writes in between goes out in one transaction, with the
message and event-log inserts of the run merged into multi-row statements; a rejected run is
replayed unit by unit so only the culprit fails. Here: the asyncmy pool, MySQL's errors worth
retrying, its transactions, its `%s` paramstyle.

Connections run in autocommit mode (a write run opens its own transaction), so every read sees
what was committed before it, not a REPEATABLE READ snapshot from an earlier statement. Values
always travel as the driver's parameters: asyncmy escapes each one for the connection's
character set; no event value is ever formatted into statement text by the bridge.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

import asyncmy
from asyncmy import errors

from actions.mysql import emqx44, schema
from actions.mysql.functions import WRITERS, Write
from actions.mysql.reads import MysqlStore, query
from bridge.batches import SqlBackend
from bridge.fetch import READERS
from bridge.plugin import settings_context

# Server error codes worth retrying: too many connections, lock wait timeout, deadlock,
# server shutting down / read-only failover, and the client's "server gone / lost / cannot connect".
# Errors of the server's state, not the statement: too many connections (1040, 1203), shutdown
# (1053, 1927), lock wait / deadlock (1205, 1213), read-only (1290, 1792, 1836), disk or table
# full (1021, 1114), out of memory (1037, 1038, 1041), lost connection (2002-2055).
_RETRY_CODES = frozenset(
    {1021, 1037, 1038, 1040, 1041, 1053, 1114, 1203, 1205, 1213, 1290, 1792, 1836, 1927}
    | {2002, 2003, 2006, 2013, 2014, 2055}
)

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


class MysqlBackend(SqlBackend[Write]):
    db = "mysql"
    title = "MySQL"
    emqx44_migration = emqx44.migrate  # hookbridge migrate-emqx44 (docs/migrate-from-emqx44.md)
    functions = frozenset(WRITERS) | frozenset(READERS)
    writers = WRITERS
    refusals = (errors.MySQLError,)

    async def connect(self) -> None:
        host, port = self.pool["server"]
        self.conns = await asyncmy.create_pool(
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
        await self.start()

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

    # -- batches (SqlBackend) ---------------------------------------------------

    def store(self, conn: Any) -> MysqlStore:
        return MysqlStore(conn)

    def statement(self, text: str, args: list[Any]) -> Write:
        compiled = self._sql_text.get(text)
        if compiled is None:
            compiled = self._sql_text[text] = format_markers(text)
        return Write(compiled, args)

    async def transaction(self, conn: Any, writes: Sequence[Write]) -> None:
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
