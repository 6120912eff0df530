"""Bring the MySQL tables EMQX 4.4 Enterprise created (etc/sql/emqx_backend_mysql.sql) to
hookbridge's (`hookbridge migrate-emqx44 --pool mysql.<pool>`).

Same table names, other types (docs/migrate-from-emqx44.md#mysql-etcsqlemqx_backend_mysqlsql): utf8 with a
case-insensitive collation (hookbridge: utf8mb4, binary: `a/B` and `a/b` are two topics), `state` as text,
`mqtt_msg.msgid` neither unique nor padded, times in the server's zone (hookbridge: UTC),
`mqtt_acked` with `mid` only. MySQL commits each DDL statement on its own, so a table is not
altered in place: it is copied into a new table of hookbridge's shape (`INSERT IGNORE`, keyed by
its unique columns, so a copy repeated after an interruption adds only what is missing), then one
`RENAME TABLE` swaps the two at once and keeps EMQX's as `<table>__emqx44`. A table whose
`__emqx44` copy exists is done: a second run changes nothing.

The msgids are read first, in every form EMQX wrote them (bridge/emqx_msgid.py): one that is no
id stops the migration before anything is created, naming the table, the row and the value
(bridge/emqx44/survey.py). A copy holding fewer rows than EMQX's table has keys (messages: distinct
msgids, EMQX stored some twice) is not swapped in: the migration stops there.
"""

from __future__ import annotations

from typing import Any

from actions.mysql import schema
from actions.mysql.reads import query
from bridge.backend import PermanentError
from bridge.emqx44.survey import IdSurvey, check_kept

BACKUP = "__emqx44"
NEW = "__hookbridge"

# Times EMQX wrote in the server's zone, moved to UTC by the server's offset now.
_OFFSET = "TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())"


def _utc(column: str) -> str:
    return f"{column} - INTERVAL {_OFFSET} SECOND"


# EMQX's msgid -> hookbridge's, for every msgid the survey read (bridge/emqx_msgid.py decodes every
# form EMQX wrote; SQL could not). A TEMPORARY table: this connection's own, made again by each run,
# referred to once per statement (a MySQL rule for temporary tables).
ID_MAP = "hookbridge_emqx44_msgids"


# table -> (hookbridge's columns, the SELECT from EMQX's table `src` giving them)
COPIES: dict[str, tuple[str, str]] = {
    "mqtt_client": (
        "clientid, state, node, online_at, offline_at, event_at, created",
        f"SELECT clientid, IF(state = '1', 1, 0), node, {_utc('online_at')}, {_utc('offline_at')},"
        f" COALESCE(GREATEST({_utc('online_at')}, {_utc('offline_at')}), {_utc('online_at')},"
        f" {_utc('offline_at')}, UTC_TIMESTAMP(6)), COALESCE({_utc('created')}, UTC_TIMESTAMP(6))"
        " FROM src WHERE clientid IS NOT NULL",
    ),
    "mqtt_sub": (
        "clientid, topic, qos, created",
        f"SELECT clientid, topic, COALESCE(qos, 1), COALESCE({_utc('created')}, UTC_TIMESTAMP(6))"
        " FROM src WHERE clientid IS NOT NULL AND topic IS NOT NULL",
    ),
    "mqtt_msg": (
        "msgid, sender, topic, qos, retain, payload, arrived",
        f"SELECT ids.new, COALESCE(sender, ''), topic, qos, IF(retain > 0, 1, 0),"
        f" COALESCE(payload, ''), {_utc('arrived')} FROM src"
        f" JOIN {ID_MAP} ids ON ids.old = BINARY src.msgid ORDER BY src.id",
    ),
    "mqtt_retain": (
        "topic, msgid, sender, qos, payload, arrived",
        f"SELECT topic, ids.new, COALESCE(sender, ''), COALESCE(qos, 0), COALESCE(payload, ''),"
        f" {_utc('arrived')} FROM src JOIN {ID_MAP} ids ON ids.old = BINARY src.msgid WHERE topic IS NOT NULL",
    ),
    # The offset: EMQX's `mid` (a row id of its mqtt_msg) becomes that row's msgid and its new id.
    "mqtt_acked": (
        "clientid, topic, msgid, mid, created",
        f"SELECT a.clientid, a.topic, COALESCE(ids.new, ''), COALESCE(n.id, 0),"
        f" COALESCE({_utc('a.created')}, UTC_TIMESTAMP(6)) FROM src a"
        f" LEFT JOIN mqtt_msg{BACKUP} m ON m.id = a.mid"
        f" LEFT JOIN {ID_MAP} ids ON ids.old = BINARY m.msgid"
        " LEFT JOIN mqtt_msg n ON n.msgid = ids.new"
        " WHERE a.clientid IS NOT NULL AND a.topic IS NOT NULL",
    ),
}


def _create(table: str, collation: str) -> str:
    """hookbridge's CREATE TABLE of `table`, under the name `table__hookbridge`."""
    statement = next(s for s in schema.statements(collation) if s.startswith(f"CREATE TABLE IF NOT EXISTS {table} ("))
    return statement.replace(f"EXISTS {table} (", f"EXISTS {table}{NEW} (", 1)


# hookbridge's limits: INSERT IGNORE would cut longer values, so they stop the migration instead.
_LIMITS = {"clientid": 256, "topic": 512}


class TooLong(PermanentError):
    pass


async def _check_lengths(conn: Any, table: str) -> None:
    columns = {str(row[0]) for row in await query(conn, f"SHOW COLUMNS FROM {table}")}
    for column, limit in _LIMITS.items():
        if column in columns:
            rows = await query(conn, f"SELECT COUNT(*) FROM {table} WHERE CHAR_LENGTH({column}) > {limit}")
            if rows[0][0]:
                raise TooLong(f"{table}: {rows[0][0]} rows have a {column} longer than {limit} characters")


async def _tables(conn: Any) -> dict[str, str]:
    rows = await query(
        conn,
        "SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()",
    )
    return {str(name): str(collation or "") for name, collation in rows}


# What one row of a copy is, to count them before and after: every row of EMQX's table, once per
# distinct key. A row without its key (NULL) could not be copied: the survey refuses it.
_KEYS = {
    "mqtt_client": "BINARY clientid",
    "mqtt_sub": "BINARY clientid, BINARY topic",
    "mqtt_retain": "BINARY topic",
    "mqtt_acked": "BINARY clientid, BINARY topic",
}


def _emqx_source(table: str, tables: dict[str, str]) -> str | None:
    """Where EMQX's rows of `table` are: the table itself until it is swapped, then its copy."""
    if table + BACKUP in tables:
        return table + BACKUP
    if table in tables and (table + NEW in tables or not tables[table].endswith("_bin")):
        return table
    return None


async def _survey(conn: Any, tables: dict[str, str], survey: IdSurvey) -> dict[str, str]:
    """Every msgid of EMQX's mqtt_msg and mqtt_retain read and converted, every row without its key
    noted as refused (nothing changed)."""
    ids: dict[str, str] = {}
    for table, key in _KEYS.items():
        source = _emqx_source(table, tables)
        if source is None or source.endswith(BACKUP):
            continue
        columns = [name.split()[-1] for name in key.split(", ")]
        nulls = " OR ".join(f"{column} IS NULL" for column in columns)
        for (row_id,) in await query(conn, f"SELECT id FROM {source} WHERE {nulls} ORDER BY id LIMIT 20"):
            survey.unconvertible.append(f"{table} id {row_id}: no {' / '.join(columns)} (NULL)")
    for table in ("mqtt_msg", "mqtt_retain"):
        source = _emqx_source(table, tables)
        if source is None:
            continue
        survey.note(table)
        key = "id" if table == "mqtt_msg" else "topic"
        for row_key, msgid in await query(conn, f"SELECT {key}, msgid FROM {source} ORDER BY id"):
            new = survey.convert(table, f"{key} {row_key}", msgid)
            if new is not None:
                ids[msgid] = new
    return ids


async def _load_ids(conn: Any, ids: dict[str, str]) -> None:
    await query(conn, f"DROP TEMPORARY TABLE IF EXISTS {ID_MAP}")
    await query(
        conn,
        f"CREATE TEMPORARY TABLE {ID_MAP} (old VARBINARY(255) PRIMARY KEY, new CHAR(32) NOT NULL) CHARACTER SET ascii",
    )
    pairs = list(ids.items())
    for start in range(0, len(pairs), 1000):
        page = pairs[start : start + 1000]
        values = ", ".join(["(%s, %s)"] * len(page))
        await query(conn, f"INSERT INTO {ID_MAP} (old, new) VALUES {values}", [v for pair in page for v in pair])


async def _expected_rows(conn: Any, table: str) -> int:
    """How many rows hookbridge's copy of `table` must hold (`check_kept`)."""
    if table == "mqtt_msg":  # one per message: a msgid EMQX stored twice is one row
        rows = await query(
            conn, f"SELECT COUNT(DISTINCT ids.new) FROM mqtt_msg JOIN {ID_MAP} ids ON ids.old = BINARY mqtt_msg.msgid"
        )
    else:
        rows = await query(conn, f"SELECT COUNT(*) FROM (SELECT DISTINCT {_KEYS[table]} FROM {table}) k")
    return int(rows[0][0])


async def migrate_mysql(conn: Any, collation: str, dry_run: bool = False) -> list[str]:
    """Copy EMQX 4.4's tables into hookbridge's shape; returns what was (dry run: would be) done."""
    await query(conn, "SELECT GET_LOCK('hookbridge_schema', 60)")  # the bridges' schema lock
    try:
        survey = IdSurvey()
        ids = await _survey(conn, await _tables(conn), survey)
        survey.refuse_unconvertible()  # before the first change
        done = survey.lines()
        if not dry_run:
            await _load_ids(conn, ids)
        for table, (columns, select) in COPIES.items():
            tables = await _tables(conn)
            if table + BACKUP in tables:
                continue  # swapped already
            if table not in tables and table + NEW not in tables:
                continue
            if table in tables and tables[table].endswith("_bin") and table + NEW not in tables:
                continue  # hookbridge's own table
            if table in tables:
                await _check_lengths(conn, table)
            done.append(f"{table}: copied into hookbridge's shape; EMQX's kept as {table}{BACKUP}")
            if dry_run:
                continue
            await query(conn, _create(table, collation))
            if table in tables:
                source = select.replace(" FROM src a", f" FROM {table} a").replace(" FROM src", f" FROM {table} src")
                await query(conn, f"INSERT IGNORE INTO {table}{NEW} ({columns}) {source}")
                copied = await query(conn, f"SELECT COUNT(*) FROM {table}{NEW}")
                check_kept(table, await _expected_rows(conn, table), int(copied[0][0]))
                await query(conn, f"RENAME TABLE {table} TO {table}{BACKUP}, {table}{NEW} TO {table}")
            else:  # stopped between the rename's two halves cannot happen (one statement); be safe
                await query(conn, f"RENAME TABLE {table}{NEW} TO {table}")
        if not dry_run and done:
            await query(conn, "SET SESSION sql_notes = 0")
            for statement in schema.statements(collation):
                try:
                    await query(conn, statement)
                except Exception as exc:  # "duplicate column" of the ALTER: already there
                    if not (exc.args and exc.args[0] == 1060):
                        raise
            await query(conn, "INSERT IGNORE INTO mqtt_topic (topic) SELECT DISTINCT topic FROM mqtt_msg")
    finally:
        await query(conn, "SELECT RELEASE_LOCK('hookbridge_schema')")
    return done


async def migrate(pool: Any, dry_run: bool) -> list[str]:
    """`hookbridge migrate-emqx44 --pool mysql.<pool>`: one connection of the pool's own settings, in
    the server's time zone (the bridge's are UTC): EMQX wrote its times in that zone."""
    import asyncmy

    from bridge.plugin import settings_context

    host, port = pool["server"]
    conn = await asyncmy.connect(
        host=host,
        port=port,
        user=pool["username"] or pool["user"] or None,
        password=pool["password"] or "",
        db=pool["database"],
        ssl=settings_context(pool.settings),
        charset="utf8mb4",
        autocommit=True,
    )
    try:
        names = ", ".join(["%s"] * len(schema.COLLATIONS))
        have = {row[0] for row in await query(conn, f"SHOW COLLATION WHERE Collation IN ({names})", schema.COLLATIONS)}
        collation = next((name for name in schema.COLLATIONS if name in have), "utf8mb4_bin")
        return await migrate_mysql(conn, collation, dry_run=dry_run)
    finally:
        await conn.ensure_closed()
