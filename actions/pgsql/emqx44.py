"""Bring the PostgreSQL tables EMQX 4.4 Enterprise created (etc/sql/emqx_backend_pgsql.sql) to
hookbridge's (`hookbridge migrate-emqx44 --pool pgsql.<pool>`).

The tables have the same names and mostly the same columns, but not the same types or
constraints (docs/migrate-from-emqx44.md#postgresql-etcsqlemqx_backend_pgsqlsql): `payload` is text
(ours bytea, byte-exact), the timestamps have no time zone, `retain` is an integer, `mqtt_msg.msgid` is
neither unique nor indexed, `mqtt_acked` keeps the offset as `mid` (a row id) only, and `mqtt_topic` is missing. The
statements below change what differs and nothing else, then apply hookbridge's schema (every
statement `IF NOT EXISTS`). They run in one transaction: stopped anywhere, nothing is changed
(PostgreSQL's DDL is transactional), and run again they find nothing left to do.

The msgids are read first, in every form EMQX wrote them (bridge/emqx_msgid.py): one that is no
id stops the migration before any statement, naming the table, the row and the value
(bridge/emqx44/survey.py). Two rows of one msgid (EMQX stored a message twice when
`on_message_store` and `on_message_publish` both ran) become one; any other loss of a row stops it
and the transaction changes nothing.
"""

from __future__ import annotations

from typing import Any

from actions.pgsql import schema
from bridge.emqx44.survey import IdSurvey, check_kept

TABLES = ("mqtt_client", "mqtt_sub", "mqtt_msg", "mqtt_retain", "mqtt_acked")
PAYLOAD_TABLES = ("mqtt_msg", "mqtt_retain")
TIMESTAMPS = {
    "mqtt_client": ("online_at", "offline_at", "created"),
    "mqtt_sub": ("created",),
    "mqtt_msg": ("arrived",),
    "mqtt_retain": ("arrived",),
    "mqtt_acked": ("created",),
}


async def _columns(conn: Any) -> dict[tuple[str, str], str]:
    rows = await conn.fetch(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = ANY($1::text[])",
        list(TABLES),
    )
    return {(row["table_name"], row["column_name"]): row["data_type"] for row in rows}


def _statements(columns: dict[tuple[str, str], str]) -> list[str]:
    out: list[str] = []
    tables = {table for table, _ in columns}
    for (table, column), kind in sorted(columns.items()):
        if kind == "character varying":  # EMQX's varchar(100)/(200) limits: ours are text
            out.append(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE text")
    for table, names in TIMESTAMPS.items():
        for column in names:
            if columns.get((table, column)) == "timestamp without time zone":
                # EMQX wrote the server's local time: read it in the session's (the server's) zone
                out.append(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE timestamptz USING {column}::timestamptz")
    for table in PAYLOAD_TABLES:
        if columns.get((table, "payload")) == "text":
            out.append(f"ALTER TABLE {table} ALTER COLUMN payload TYPE bytea USING convert_to(payload, 'UTF8')")
    if columns.get(("mqtt_msg", "retain")) == "integer":
        out.append("ALTER TABLE mqtt_msg ALTER COLUMN retain TYPE boolean USING retain <> 0")
    if "mqtt_client" in tables and ("mqtt_client", "event_at") not in columns:
        out += [
            "ALTER TABLE mqtt_client ADD COLUMN event_at timestamptz",
            "UPDATE mqtt_client SET event_at = coalesce(greatest(online_at, offline_at), created, now())",
            "ALTER TABLE mqtt_client ALTER COLUMN event_at SET NOT NULL",
        ]
    for table in ("mqtt_client", "mqtt_sub", "mqtt_acked"):
        if (table, "created") in columns:
            out.append(f"ALTER TABLE {table} ALTER COLUMN created SET DEFAULT now()")
    if "mqtt_msg" in tables and ("mqtt_msg", "expires_at") not in columns:
        out.append("ALTER TABLE mqtt_msg ADD COLUMN expires_at timestamptz")
    if columns.get(("mqtt_acked", "mid")) == "integer":
        out.append("ALTER TABLE mqtt_acked ALTER COLUMN mid TYPE bigint")
    if "mqtt_acked" in tables and ("mqtt_acked", "msgid") not in columns:
        out += [
            "ALTER TABLE mqtt_acked ADD COLUMN msgid text NOT NULL DEFAULT ''",
            "UPDATE mqtt_acked SET mid = 0 WHERE mid IS NULL",
            "ALTER TABLE mqtt_acked ALTER COLUMN mid SET DEFAULT 0",
        ]
    return out


# After the ids are hookbridge's: one row per msgid, the offsets as msgids, the topic list.
_AFTER_IDS = (
    "DELETE FROM mqtt_msg a USING mqtt_msg b WHERE a.msgid = b.msgid AND a.id > b.id",
    "CREATE UNIQUE INDEX IF NOT EXISTS mqtt_msg_msgid_key ON mqtt_msg (msgid)",
    "UPDATE mqtt_acked a SET msgid = m.msgid FROM mqtt_msg m WHERE a.msgid = '' AND a.mid > 0 AND m.id = a.mid",
)


async def _survey(
    conn: Any, columns: dict[tuple[str, str], str], survey: IdSurvey
) -> tuple[dict[str, list[tuple[int, str]]], dict[str, int]]:
    """Every msgid of mqtt_msg and mqtt_retain read (nothing changed): {table: [(row id, new msgid)]}
    for the rows whose msgid is not hookbridge's text yet, and {table: how many messages}."""
    messages: dict[str, int] = {}
    changes: dict[str, list[tuple[int, str]]] = {}
    for table in PAYLOAD_TABLES:
        if (table, "msgid") not in columns:
            continue
        survey.note(table)
        rows = await conn.fetch(f"SELECT id, msgid FROM {table} ORDER BY id")
        found = changes[table] = []
        ids = set()
        for row in rows:
            new = survey.convert(table, f"row id {row['id']}", row["msgid"])
            ids.add(new)
            if new is not None and new != row["msgid"]:
                found.append((row["id"], new))
        # mqtt_msg: one row per message (EMQX stored some twice); mqtt_retain: one per topic
        messages[table] = len(ids) if table == "mqtt_msg" else len(rows)
    return changes, messages


async def migrate_pgsql(conn: Any, dry_run: bool = False) -> list[str]:
    """Bring the tables to hookbridge's layout; returns what was (dry run: would be) done."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(727274)")  # the bridges' schema lock
        columns = await _columns(conn)
        if not columns:
            return ["no EMQX 4.4 tables found: nothing to migrate"]
        survey = IdSurvey()
        changes, before = await _survey(conn, columns, survey)
        survey.refuse_unconvertible()  # before the first change
        done = survey.lines()
        for statement in _statements(columns):
            done.append(statement)
            if not dry_run:
                await conn.execute(statement)
        for table, rows in changes.items():
            if rows:
                done.append(f"{table}: {len(rows)} EMQX msgids given hookbridge's form")
                if not dry_run:
                    await conn.executemany(f"UPDATE {table} SET msgid = $2 WHERE id = $1", rows)
        if dry_run:
            return done
        if ("mqtt_msg", "msgid") in columns:
            for statement in _AFTER_IDS:
                await conn.execute(statement)
        for table, count in before.items():
            check_kept(table, count, await conn.fetchval(f"SELECT count(*) FROM {table}"))
        for statement in schema.SCHEMA:  # hookbridge's indexes, mqtt_topic, mqtt_event_log
            await conn.execute(statement)
        if ("mqtt_msg", "topic") in columns:
            await conn.execute(
                "INSERT INTO mqtt_topic (topic) SELECT DISTINCT topic FROM mqtt_msg ON CONFLICT DO NOTHING"
            )
    return done


async def migrate(pool: Any, dry_run: bool) -> list[str]:
    """`hookbridge migrate-emqx44 --pool pgsql.<pool>`: one connection of the pool's own settings."""
    import asyncpg

    from bridge.plugin import settings_context

    host, port = pool["server"]
    conn = await asyncpg.connect(
        host=host,
        port=port,
        user=pool["username"] or None,
        password=pool["password"] or None,
        database=pool["database"],
        ssl=settings_context(pool.settings) or False,
    )
    try:
        return [f"{line};" for line in await migrate_pgsql(conn, dry_run=dry_run)]
    finally:
        await conn.close()
