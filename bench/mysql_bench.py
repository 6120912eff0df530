"""Messages per second persisted into MySQL / MariaDB by on_message_publish, through the runner.

Compared in the same run, on the same generated events, with two ceilings, the faster of which
counts: a hand-written multi-row INSERT (2,000 rows a statement, each autocommitted, one
connection) and `LOAD DATA LOCAL INFILE` (files of 10,000 rows, payloads hex-encoded and decoded
by the server), both adding the distinct topics to mqtt_topic as the runner does; and the naive
way (one autocommitted INSERT per message, awaited one by one). Every method starts from freshly
created, empty mqtt_* tables.

    .venv/bin/python -m bench.mysql_bench [--messages 50000] [--runs 5] [--port 3307]
        [--batch-size N] [--batch-time 5ms] [--max-inflight N] [--pool-size N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncmy

from actions.mysql.functions import when
from actions.mysql.schema import TABLES, statements
from bench.feed import make_events
from bench.persistence import (
    Method,
    measure,
    parse_args,
    pool_config,
    pool_settings,
    report,
    runner_latency,
    through_runner,
)
from bridge.events import MessagePublish

EXPIRED_TIME = 3600
TOPICS = 100
ROWS_PER_INSERT = 2_000
ROWS_PER_FILE = 10_000
COLUMNS = "msgid, sender, topic, qos, retain, payload, arrived, expires_at"
RULE = (
    'backend.mysql.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, '
    f'"expired_time": {EXPIRED_TIME}}}\n'
)
INSERT = f"INSERT INTO mqtt_msg ({COLUMNS}) VALUES "
ROW_MARKS = "(%s, %s, %s, %s, %s, %s, %s, %s)"
INSERT_TOPICS = "INSERT INTO mqtt_topic (topic) VALUES {rows} ON DUPLICATE KEY UPDATE topic = topic"


def row(event: MessagePublish) -> tuple[Any, ...]:
    arrived = when(event.timestamp)
    expires = arrived + dt.timedelta(seconds=EXPIRED_TIME)
    return (event.msgid, event.clientid, event.topic, event.qos, event.retain, event.payload, arrived, expires)


async def connect(port: int) -> Any:
    return await asyncmy.connect(
        host="127.0.0.1",
        port=port,
        user="hookbridge",
        password="hookbridge",
        db="mqtt",
        autocommit=True,
        local_infile=True,
        init_command="SET time_zone = '+00:00'",
    )


async def run(conn: Any, sql: str, args: Any = None) -> Any:
    async with conn.cursor() as cursor:
        await cursor.execute(sql, args)
        return await cursor.fetchall()


async def fresh_tables(conn: Any) -> None:
    await run(conn, f"DROP TABLE IF EXISTS {', '.join(TABLES)}")
    for statement in statements():
        await run(conn, statement)


def bridge_config(port: int, settings: dict[str, str]) -> str:
    return pool_config(
        "mysql", settings, server=f"127.0.0.1:{port}", username="hookbridge", password="hookbridge", database="mqtt"
    )


async def add_topics(conn: Any, events: list[MessagePublish]) -> None:
    topics = sorted({event.topic for event in events})
    await run(conn, INSERT_TOPICS.format(rows=", ".join(["(%s)"] * len(topics))), topics)


async def multi_row_insert(conn: Any, events: list[MessagePublish]) -> float:
    started = time.perf_counter()
    await add_topics(conn, events)
    for start in range(0, len(events), ROWS_PER_INSERT):
        rows = [row(event) for event in events[start : start + ROWS_PER_INSERT]]
        await run(conn, INSERT + ", ".join([ROW_MARKS] * len(rows)), [value for r in rows for value in r])
    return len(events) / (time.perf_counter() - started)


def _field(value: Any) -> str:
    """One LOAD DATA field: backslash escapes for the default FIELDS ESCAPED BY '\\'."""
    text = str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\0", "\\0")


def _tsv(events: list[MessagePublish]) -> str:
    lines = []
    for event in events:
        msgid, sender, topic, qos, retain, payload, arrived, expires = row(event)
        fields = (msgid, sender, topic, qos, int(retain), payload.hex(), arrived, expires)
        lines.append("\t".join(map(_field, fields)))
    return "\n".join(lines) + "\n"


async def load_data(port: int, conn: Any, events: list[MessagePublish], workdir: Path) -> float:
    """The files are loaded by the `mariadb` command-line client (C, one connection for all of
    them): asyncmy 0.2.18 fails on the server's LOCAL INFILE request (a str/bytes type error)."""
    started = time.perf_counter()
    await add_topics(conn, events)
    loads = []
    for start in range(0, len(events), ROWS_PER_FILE):
        path = workdir / f"rows-{start}.tsv"
        path.write_text(_tsv(events[start : start + ROWS_PER_FILE]))
        loads.append(
            f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE mqtt_msg CHARACTER SET utf8mb4 "
            "(msgid, sender, topic, qos, retain, @payload, arrived, expires_at) SET payload = UNHEX(@payload);"
        )
    client = await asyncio.create_subprocess_exec(
        *("mariadb", "--no-defaults", "--local-infile=1", "--protocol=tcp", "-h", "127.0.0.1", "-P", str(port)),
        *("-u", "hookbridge", "-phookbridge", "mqtt", "-e", "SET time_zone = '+00:00'; " + " ".join(loads)),
    )
    if await client.wait() != 0:
        raise RuntimeError("LOAD DATA LOCAL INFILE failed")
    return len(events) / (time.perf_counter() - started)


async def naive(conn: Any, events: list[MessagePublish]) -> float:
    started = time.perf_counter()
    for event in events:
        await run(conn, INSERT + ROW_MARKS, row(event))
    return len(events) / (time.perf_counter() - started)


async def server(conn: Any) -> str:
    names = ("version", "innodb_flush_log_at_trx_commit", "sync_binlog", "innodb_buffer_pool_size", "log_bin")
    values = (await run(conn, "SELECT " + ", ".join(f"@@{name}" for name in names)))[0]
    return ", ".join(f"{name} {value}" for name, value in zip(names, values, strict=True))


async def main(args: argparse.Namespace) -> int:
    settings = pool_settings(args)
    events = make_events(max(args.messages, args.naive_messages), args.payload, TOPICS)
    conn = await connect(args.port)
    version = await server(conn)
    workdir = Path(tempfile.mkdtemp(prefix="mysql-bench-"))
    runner = Method(
        "hookbridge runner (on_message_publish)",
        args.messages,
        lambda n: through_runner(bridge_config(args.port, settings), RULE, events[:n]),
    )
    insert = Method(
        f"ceiling: multi-row INSERT, {ROWS_PER_INSERT:,} rows a statement (+ topics)",
        args.messages,
        lambda n: multi_row_insert(conn, events[:n]),
    )
    load = Method(
        f"ceiling: LOAD DATA LOCAL INFILE, {ROWS_PER_FILE:,}-row files (+ topics)",
        args.messages,
        lambda n: load_data(args.port, conn, events[:n], workdir),
    )
    slow = Method("naive: one autocommitted INSERT per message", args.naive_messages, lambda n: naive(conn, events[:n]))

    async def stored() -> tuple[int, int]:
        counted = await run(conn, "SELECT (SELECT count(*) FROM mqtt_msg), (SELECT count(*) FROM mqtt_topic)")
        return int(counted[0][0]), int(counted[0][1])

    wrong = await measure([runner, insert, load, slow], args.runs, lambda: fresh_tables(conn), stored)
    best, other = (insert, load) if insert.median >= load.median else (load, insert)
    await fresh_tables(conn)
    latency = await runner_latency(
        bridge_config(args.port, settings), RULE, events[: min(args.messages, 20_000)], runner.median / 2
    )
    await fresh_tables(conn)
    conn.close()
    report(
        [runner, best, slow],
        [
            f"server: {version}",
            f"payload {args.payload} B, {TOPICS} topics, expired_time {EXPIRED_TIME}, {args.runs} runs each",
            f"runner pool settings: {', '.join(f'{k} {v}' for k, v in settings.items()) or 'defaults'}",
            f"the slower ceiling, {other.name}: median {other.median:,.0f} msg/s "
            f"(runs {', '.join(f'{rate:,.0f}' for rate in other.rates)})",
            "both ceilings also insert the distinct topics into mqtt_topic, as the runner does; the naive way does not",
        ],
        ceiling="LOAD DATA" if best is load else "multi-row INSERT",
        naive_target=10,
        latency=latency,
        json_path=args.json,
    )
    for problem in wrong:
        print(f"WRONG ROW COUNT: {problem}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    arguments = parse_args("mysql", port=3307, naive_messages=5_000)
    subprocess.run(["bash", "scripts/mariadb.sh", str(arguments.port)], check=True, capture_output=True)
    sys.exit(asyncio.run(main(arguments)))
