"""`hookbridge import-emqx DIR --out DIR [--force]` and `hookbridge migrate-emqx44 --pool <db>.<pool> [--dry-run]`
(`hookbridge.commands` entry points)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bridge.registry import CommandPlugin

EXIT_CONFIG = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory", help="EMQX 4.4's etc/ or etc/plugins/ (the emqx_backend_<db>.conf files are found in either)"
    )
    parser.add_argument("--out", required=True, help="where config/bridge.conf and rules/<db>.conf are written")
    parser.add_argument("--force", action="store_true", help="overwrite files that differ from what would be written")


def run(args: argparse.Namespace) -> int:
    from bridge.emqx44.importer import convert

    out = Path(args.out)
    result = convert(Path(args.directory), str(out / "config" / "bridge.conf"), str(out / "rules"))
    for problem in result.problems:
        print(problem, file=sys.stderr)
    if result.errors:
        count = len(result.errors)
        print(f"{count} problem{'s' if count != 1 else ''} found; nothing written", file=sys.stderr)
        return EXIT_CONFIG
    different = [
        path for path, text in result.files.items() if Path(path).exists() and Path(path).read_text("utf-8") != text
    ]
    if different and not args.force:
        for path in different:
            print(f"{path}: exists and differs from what import-emqx writes (--force overwrites it)", file=sys.stderr)
        return EXIT_CONFIG
    for path, text in result.files.items():
        file = Path(path)
        if file.exists() and file.read_text("utf-8") == text:
            print(f"unchanged {path}")
            continue
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    print(f"check it: hookbridge check -c {out / 'config' / 'bridge.conf'} -r {out / 'rules'}")
    return 0


COMMAND = CommandPlugin(
    name="import-emqx",
    help="write config/ and rules/ from EMQX 4.4 Enterprise's emqx_backend_<db>.conf files",
    add_arguments=add_arguments,
    run=run,
)


def add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default="config/bridge.conf")
    parser.add_argument("--pool", required=True, help="the Redis pool EMQX 4.4 wrote to, e.g. redis.pool1")
    parser.add_argument("--dry-run", action="store_true", help="count what would move, change nothing")


def run_migrate(args: argparse.Namespace) -> int:
    from bridge.conf.config import load_config
    from bridge.conf.errors import ConfErrors

    try:
        config = load_config(args.config)
    except ConfErrors as exc:
        for problem in exc.errors:
            print(problem, file=sys.stderr)
        return EXIT_CONFIG
    pool = config.pools.get(args.pool)
    if pool is None or pool.db not in MIGRATES:
        known = ", ".join(sorted(name for name, p in config.pools.items() if p.db in MIGRATES)) or "none"
        print(
            f"{args.config}: no Redis, PostgreSQL or MySQL pool {args.pool!r} (those configured: {known})",
            file=sys.stderr,
        )
        return EXIT_CONFIG

    try:
        lines = asyncio.run(MIGRATES[pool.db](pool, args.dry_run))
    except Exception as exc:  # unreachable server: one line; rerunning resumes
        print(f"migrate-emqx44 {args.pool}: {exc} (run it again: it resumes)", file=sys.stderr)
        return 1
    for line in lines or ["nothing to migrate: the data is in hookbridge's layout"]:
        print(line)
    return 0


async def _migrate_redis(pool: Any, dry_run: bool) -> list[str]:
    import redis.asyncio as aioredis

    from actions.redis.connection import connection_pool
    from bridge.emqx44.migrate import migrate_redis

    client = aioredis.Redis(connection_pool=connection_pool(pool, max_connections=2))
    try:
        return (await migrate_redis(client, dry_run=dry_run)).lines(dry_run)
    finally:
        await client.aclose()


async def _migrate_pgsql(pool: Any, dry_run: bool) -> list[str]:
    import asyncpg

    from bridge.emqx44.migrate_pgsql import migrate_pgsql
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


async def _migrate_mysql(pool: Any, dry_run: bool) -> list[str]:
    import asyncmy

    from actions.mysql import schema
    from actions.mysql.reads import query
    from bridge.emqx44.migrate_mysql import migrate_mysql
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


MIGRATES: dict[str, Callable[[Any, bool], Coroutine[Any, Any, list[str]]]] = {
    "redis": _migrate_redis,
    "pgsql": _migrate_pgsql,
    "mysql": _migrate_mysql,
}


MIGRATE_COMMAND = CommandPlugin(
    name="migrate-emqx44",
    help="give the messages, retained messages and offsets EMQX 4.4 stored in Redis hookbridge's ids",
    add_arguments=add_migrate_arguments,
    run=run_migrate,
)
