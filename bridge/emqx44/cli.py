"""`hookbridge import-emqx DIR --out DIR [--force]` and `hookbridge migrate-emqx44 --pool <db>.<pool> [--dry-run]`
(`hookbridge.commands` entry points)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bridge.conf.registry import CommandPlugin

EXIT_CONFIG = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory", help="EMQX 4.4's etc/ or etc/plugins/ (the emqx_backend_<db>.conf files are found in either)"
    )
    parser.add_argument("--out", required=True, help="where config/bridge.conf and rules/<db>.conf are written")
    parser.add_argument("--force", action="store_true", help="overwrite files that differ from what would be written")


def run(args: argparse.Namespace) -> int:
    from bridge.conf.errors import printable
    from bridge.emqx44.importer import convert
    from bridge.emqx44.output import Refused, read_existing, write_inside

    out = Path(args.out)
    result = convert(Path(args.directory), str(out / "config" / "bridge.conf"), str(out / "rules"))
    for problem in result.problems:
        print(problem, file=sys.stderr)
    if result.errors:
        count = len(result.errors)
        print(f"{count} problem{'s' if count != 1 else ''} found; nothing written", file=sys.stderr)
        return EXIT_CONFIG
    existing: dict[str, str | None] = {}
    refused: list[Refused] = []
    for path in result.files:
        try:
            existing[path] = read_existing(out, Path(path))
        except Refused as exc:
            refused.append(exc)
        except OSError as exc:
            refused.append(Refused(Path(path), f"cannot read: {exc.strerror}"))
    for refusal in refused:
        print(f"{printable(str(refusal.path))}: {refusal.why}", file=sys.stderr)
    if refused:
        return EXIT_CONFIG
    different = [path for path, text in result.files.items() if existing[path] not in (None, text)]
    if different and not args.force:
        for path in different:
            print(
                f"{printable(path)}: exists and differs from what import-emqx writes (--force overwrites it)",
                file=sys.stderr,
            )
        return EXIT_CONFIG
    for path, text in result.files.items():
        if existing[path] == text:
            print(f"unchanged {printable(path)}")
            continue
        try:
            write_inside(out, Path(path), text)
        except Refused as exc:  # planted between the check above and now
            print(f"{printable(str(exc.path))}: {exc.why}", file=sys.stderr)
            return EXIT_CONFIG
        except OSError as exc:
            print(f"{printable(path)}: cannot write: {exc.strerror}", file=sys.stderr)
            return 1
        print(f"wrote {printable(path)}")
    config, rules = printable(str(out / "config" / "bridge.conf")), printable(str(out / "rules"))
    print(f"check it: hookbridge check -c {config} -r {rules}")
    return 0


COMMAND = CommandPlugin(
    name="import-emqx",
    help="write config/ and rules/ from EMQX 4.4 Enterprise's emqx_backend_<db>.conf files",
    add_arguments=add_arguments,
    run=run,
)


def add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default="config/bridge.conf")
    parser.add_argument(
        "--pool",
        required=True,
        help="the pool EMQX 4.4 wrote to, e.g. redis.pool1 (Redis, PostgreSQL, MySQL, MongoDB, Cassandra)",
    )
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
    from bridge.backend import backend_class

    pool = config.pools.get(args.pool)
    migration = backend_class(pool.db).emqx44_migration if pool is not None else None
    if pool is None or migration is None:
        known = [name for name, p in config.pools.items() if backend_class(p.db).emqx44_migration is not None]
        print(
            f"{args.config}: no pool {args.pool!r} that migrate-emqx44 knows"
            " (Redis, PostgreSQL, MySQL, MongoDB, Cassandra);"
            f" those configured: {', '.join(sorted(known)) or 'none'}",
            file=sys.stderr,
        )
        return EXIT_CONFIG

    from bridge.emqx44.survey import MigrationRefused

    try:
        lines = asyncio.run(migration(pool, args.dry_run))
    except MigrationRefused as exc:  # data it cannot convert: named, nothing changed
        print(f"migrate-emqx44 {args.pool}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except Exception as exc:  # unreachable server: one line; rerunning resumes
        print(f"migrate-emqx44 {args.pool}: {exc} (run it again: it resumes)", file=sys.stderr)
        return 1
    for line in lines or ["nothing to migrate: the data is in hookbridge's layout"]:
        print(line)
    return 0


MIGRATE_COMMAND = CommandPlugin(
    name="migrate-emqx44",
    help="bring what EMQX 4.4 stored in Redis, PostgreSQL, MySQL, MongoDB or Cassandra into hookbridge's layout",
    add_arguments=add_migrate_arguments,
    run=run_migrate,
)
