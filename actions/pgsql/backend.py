"""PostgreSQL backend on asyncpg.

Its batches are those of every SQL backend (bridge/batches.py, `SqlBackend`): a batch is cut at
its read-then-act jobs; each run of writes in between goes out in one transaction, with the
message / event-log inserts of the run merged into one multi-row statement each; a rejected run
is replayed unit by unit so only the culprit fails. Here: the asyncpg pool, PostgreSQL's
errors worth retrying, COPY into the staging table, the parameter types of user SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from actions.pgsql import emqx44, schema
from actions.pgsql.coerce import converters
from actions.pgsql.functions import STAGE_COLUMNS, STAGE_TABLE, WRITERS, Write
from actions.pgsql.reads import PgsqlStore
from actions.values import Convert
from bridge.batches import SqlBackend
from bridge.fetch import READERS
from bridge.plugin import settings_context

_RECOVERABLE = (
    OSError,
    asyncpg.PostgresConnectionError,  # connection refused / lost, too many clients
    asyncpg.CannotConnectNowError,  # starting up, shutting down
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.InterfaceError,  # connection closed under us
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
    TimeoutError,
)

# SQLSTATEs that describe the server's state, not the statement: the same write succeeds once
# the server is writable again (read-only transaction, insufficient resources such as a full
# disk or too many connections, operator intervention such as a shutdown, connection errors).
_SERVER_STATE_CODES = frozenset({"25006"})
_SERVER_STATE_CLASSES = ("53", "57P", "08")


async def _prepare_connection(conn: Any) -> None:
    # Outside any batch transaction, so a rolled-back batch cannot take the table with it.
    await conn.execute(STAGE_TABLE)


class PgsqlBackend(SqlBackend[Write]):
    db = "pgsql"
    title = "PostgreSQL"
    emqx44_migration = emqx44.migrate  # hookbridge migrate-emqx44 (docs/migrate-from-emqx44.md)
    functions = frozenset(WRITERS) | frozenset(READERS)
    writers = WRITERS
    refusals = (asyncpg.PostgresError,)

    async def connect(self) -> None:
        host, port = self.pool["server"]
        self._converters: dict[str, list[Convert]] = {}
        self.conns = await asyncpg.create_pool(
            host=host,
            port=port,
            user=self.pool["username"] or None,
            password=self.pool["password"] or None,
            database=self.pool["database"],
            ssl=settings_context(self.pool.settings) or False,
            min_size=0,  # connect on first use: a server that is down now must not stop the start
            max_size=max(2, self.pool["pool_size"]),
            command_timeout=60,
            init=_prepare_connection,
        )
        await self.start()

    async def probe(self) -> None:
        await self.conns.fetchval("SELECT 1")

    async def close(self) -> None:
        await self.conns.close()

    def is_recoverable(self, exc: BaseException) -> bool:
        if isinstance(exc, _RECOVERABLE):
            return True
        state = getattr(exc, "sqlstate", None) if isinstance(exc, asyncpg.PostgresError) else None
        return isinstance(state, str) and (state in _SERVER_STATE_CODES or state.startswith(_SERVER_STATE_CLASSES))

    async def schema(self, apply: bool) -> str:
        if apply:
            async with self.conns.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(727274)")  # one bridge migrates at a time
                for statement in schema.SCHEMA:
                    await conn.execute(statement)
        return schema.describe()

    # -- batches (SqlBackend) ---------------------------------------------------

    def store(self, conn: Any) -> PgsqlStore:
        return PgsqlStore(conn)

    def statement(self, text: str, args: list[Any]) -> Write:
        return Write(text, args, coerce=True)

    async def transaction(self, conn: Any, writes: Sequence[Write]) -> None:
        async with conn.transaction():
            for write in writes:
                await self._run(conn, write)

    async def _run(self, conn: Any, write: Write) -> None:
        if write.stage is not None:
            await conn.copy_records_to_table("mqtt_msg_stage", records=write.stage, columns=STAGE_COLUMNS)
        args = write.args
        if write.coerce:
            convert = self._converters.get(write.sql)
            if convert is None:
                statement = await conn.prepare(write.sql)
                convert = self._converters[write.sql] = converters([t.name for t in statement.get_parameters()])
            args = [fn(value) for fn, value in zip(convert, args, strict=True)]
        if write.on_duplicate is None:
            await conn.execute(write.sql, *args)
            return
        try:
            async with conn.transaction():  # a savepoint: a collision undoes only this statement
                await conn.execute(write.sql, *args)
        except asyncpg.UniqueViolationError:
            await conn.execute(write.on_duplicate, *args)

    async def maintenance(self) -> None:
        """Delete expired messages (rules with `expired_time`), in slices.

        `mqtt_topic` keeps topics whose messages are gone: removing them could race a
        concurrent insert of a new message on that topic and hide it from wildcard fetches.
        """
        if not self.trim_enabled:
            return
        while True:
            deleted = await self.conns.execute(
                "DELETE FROM mqtt_msg WHERE id IN "
                "(SELECT id FROM mqtt_msg WHERE expires_at < now() ORDER BY expires_at LIMIT 5000)"
            )
            if deleted != "DELETE 5000":
                break
