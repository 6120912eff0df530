"""`hookbridge run | check | schema | init | ctl | report` (also `python -m bridge`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bridge.app import Bridge, Paths, load_all
from bridge.brokers.embedded.durable.check import check_durable
from bridge.brokers.embedded.openfiles import open_file_problems, raise_soft_limit
from bridge.conf import registry
from bridge.conf.config import Config, load_config
from bridge.conf.errors import ConfErrors
from bridge.ops import ctl as ctl_commands
from bridge.ops import init as init_command
from bridge.ops import logs
from bridge.ops.gcfreeze import SlowCollectionFreezer, freeze_startup, set_young_threshold
from bridge.ops.redact import Redactor
from bridge.rules import Rule
from bridge.workers import child
from bridge.workers.checks import ordering_warnings, worker_problems
from bridge.workers.layout import become_worker, clear_retired, leftover_warning

log = logging.getLogger("hookbridge")

EXIT_CONFIG = 2


def _paths(args: argparse.Namespace) -> Paths:
    return Paths(Path(args.config), Path(args.rules))


def _print_errors(exc: ConfErrors) -> int:
    for error in exc.errors:
        print(error, file=sys.stderr)
    print(f"{len(exc.errors)} problem{'s' if len(exc.errors) != 1 else ''} found", file=sys.stderr)
    return EXIT_CONFIG


def _load(args: argparse.Namespace) -> tuple[Config, list[Rule]]:
    """Config and rules, and what `--workers N` asks of them: every problem at once (ConfErrors)."""
    config, rules = load_all(_paths(args))
    problems = worker_problems(config, args.workers) + open_file_problems(config)
    if problems:
        raise ConfErrors(problems)
    return config, rules


def cmd_check(args: argparse.Namespace) -> int:
    try:
        _config, rules = _load(args)
    except ConfErrors as exc:
        return _print_errors(exc)
    for warning in ordering_warnings(rules, args.workers):
        print(warning, file=sys.stderr)
    pools = sorted({rule.pool for rule in rules})
    print(f"ok: {args.config} and {args.rules}: {len(rules)} rules, pools {', '.join(pools) or 'none'}")
    if args.durable:  # the full integrity check of the durable store (docs/brokers.md#a-damaged-store)
        if not _config["broker.durable_sessions"]:
            print("broker.durable_sessions is off: no durable store to check", file=sys.stderr)
            return 1
        sound, lines = check_durable(_config["broker.durable_dir"])
        print("\n".join(lines), file=sys.stdout if sound else sys.stderr)
        return 0 if sound else 1
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (the `fast` extra), else asyncio's own.

    Measured with the embedded broker (bench/broker_bench.py, docs/benchmarks.md): the loop's
    socket writes, reads and callbacks are a large share of a message's cost, and uvloop does
    them in C. HOOKBRIDGE_LOOP=asyncio forces asyncio's loop (to compare, or to rule it out).
    """
    if os.environ.get("HOOKBRIDGE_LOOP", "") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def cmd_run(args: argparse.Namespace) -> int:
    try:
        config, rules = _load(args)
    except ConfErrors as exc:
        return _print_errors(exc)
    worker = args.worker_index
    if worker is None and args.workers > 1:
        return _supervise(args, config, rules)
    companion: Callable[[], Coroutine[Any, Any, None]] | None = None
    if worker is not None:  # one of `run --workers N`'s processes (bridge/workers/)
        child.hold_signals_until_serving()
        child.die_with_supervisor(args.supervisor_pid)
        become_worker(config, worker, args.workers)
    bridge = Bridge(config, rules, _paths(args))
    process = f"worker-{worker}" if worker is not None else ""
    logs.setup(bridge.config["log.level"], bridge.config["log.format"], redactor=bridge.redactor, process=process)
    if config["broker.mode"] == "embedded":  # one descriptor per client: as many as the hard limit allows
        before, after = raise_soft_limit()
        if after != before:
            log.info("open-file limit raised from %d to %d (the hard limit)", before, after)
    if worker is None:
        _warn_leftovers(config, 1)
    else:
        companion = child.channel_task(args.control_fd, bridge)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(_serve(bridge, companion))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a port in use, a refused password: say it in one line
        log.error("cannot start: %s", exc)
        return 1
    return 0


def _supervise(args: argparse.Namespace, config: Config, rules: list[Rule]) -> int:
    from bridge.workers.supervisor import supervise

    logs.setup(config["log.level"], config["log.format"], redactor=Redactor(config.secrets), process="supervisor")
    for warning in ordering_warnings(rules, args.workers):
        log.warning("%s", warning)
    _warn_leftovers(config, args.workers)
    try:
        supervise(_paths(args), config, args.workers)
    except KeyboardInterrupt:  # before its signal handlers were installed: nothing started yet
        pass
    except Exception as exc:  # the metrics port in use: one line
        log.error("cannot start: %s", exc)
        return 1
    return 0


def _warn_leftovers(config: Config, workers: int) -> None:
    warning = leftover_warning(config, workers)
    if warning is not None:
        log.warning("%s", warning)


async def _serve(bridge: Bridge, companion: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
    """Run the bridge until SIGINT / SIGTERM, or until `companion` (a worker's channel to its
    supervisor, started before the bridge so it can answer while the bridge starts) returns."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reloads: set[asyncio.Task[bool]] = set()

    def reloaded(task: asyncio.Task[bool]) -> None:
        reloads.discard(task)
        # Bridge.reload reports rule errors itself; anything else it raises (a new pool that
        # cannot connect, a bug) must not end as "Task exception was never retrieved".
        if not task.cancelled() and task.exception() is not None:
            log.error("reload refused: %s; keeping the rules loaded before", task.exception())

    def reload() -> None:
        task = loop.create_task(bridge.reload())
        reloads.add(task)
        task.add_done_callback(reloaded)

    retire = False

    def retire_and_stop() -> None:
        nonlocal retire
        retire = True
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload)
    beside: asyncio.Task[None] | None = None
    thawing: asyncio.Task[None] | None = None  # frozen objects collected now and then (bridge/ops/gcfreeze.py)
    if companion is not None:
        # A worker the supervisor scales down or stops for good (bridge/workers/supervisor.py).
        loop.add_signal_handler(child.RETIRE, retire_and_stop)
        beside = loop.create_task(companion())
        beside.add_done_callback(lambda _: stop.set())
    try:
        set_young_threshold(bridge.config["gc.young_threshold"])
        await bridge.start()
        freezer = _freeze_startup_objects(bridge.config["gc.freeze_after"])
        if freezer is not None and bridge.config["gc.thaw_interval"]:
            thawing = loop.create_task(freezer.thaw_every(bridge.config["gc.thaw_interval"]))
        if child.retire_asked:
            retire_and_stop()
        await stop.wait()
        log.info("stopping: draining queues%s", "; retiring (ending the broker session)" if retire else "")
    finally:
        with contextlib.suppress(Exception):
            await bridge.stop(retire=retire)
        if retire and bridge.config.worker > 0 and not clear_retired(bridge.config["spool.dir"]):
            log.warning(
                "retired with unwritten actions in %s: run this worker again to write them", bridge.config["spool.dir"]
            )
        if thawing is not None:
            thawing.cancel()
        if beside is not None:
            beside.cancel()
            await asyncio.gather(beside, return_exceptions=True)


def _freeze_startup_objects(freeze_after: float) -> SlowCollectionFreezer | None:
    """Keep what start-up built (modules, rules, pools: ~50,000 objects; the durable sessions it
    restored) out of every later full garbage collection. Messages in flight outlive the young
    generations, so full collections come every few seconds under load, and each walked all of
    those objects: a 30-45 ms pause of the event loop, in the p99 of publish-to-commit
    (docs/benchmarks.md#results). Then, unless `gc.freeze_after` is 0, what survives a slow full
    collection is frozen too (bridge/ops/gcfreeze.py): seconds at a million subscriptions otherwise."""
    freeze_startup()
    if not freeze_after:
        return None
    freezer = SlowCollectionFreezer(freeze_after)
    freezer.install()
    return freezer


def cmd_schema(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfErrors as exc:
        return _print_errors(exc)
    pool = config.pools.get(args.pool)
    if pool is None:
        known = ", ".join(sorted(config.pools)) or "none"
        print(f"{args.config}: no pool {args.pool!r} (configured: {known})", file=sys.stderr)
        return EXIT_CONFIG
    from bridge.backend import FunctionContext, backend_class

    backend_type = backend_class(pool.db)  # the config takes installed backends only

    logs.setup("error")  # the command's own one-line error says it; no "will retry" warnings

    async def describe() -> str:
        backend = backend_type(pool, FunctionContext(node=config["node.name"]))
        if not args.apply:
            return await backend.schema(apply=False)
        await backend.connect()
        try:
            return await backend.schema(apply=True)
        finally:
            await backend.close()

    try:
        print(asyncio.run(describe()), end="")
    except Exception as exc:  # unreachable server, refused login: one line, no traceback
        print(f"schema for {args.pool}: {Redactor(config.secrets).text(str(exc))}", file=sys.stderr)
        return 1
    return 0


MAX_WORKERS = 64


def _worker_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= count <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{count} is not between 1 and {MAX_WORKERS}")
    return count


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hookbridge", description="MQTT hook events into databases")
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("-c", "--config", default="config/bridge.conf", help="config file")
        sub.add_argument("-r", "--rules", default="rules", help="rules directory (templates/ beside it)")
        sub.add_argument(
            "--workers",
            type=_worker_count,
            default=1,
            metavar="N",
            help="bridge processes on one shared subscription (mqtt and emqx modes; needs broker.shared_group)",
        )

    run = commands.add_parser("run", help="start the bridge")
    common(run)
    # How the supervisor of `--workers N` starts each worker (bridge/workers/); not for people.
    run.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--control-fd", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--supervisor-pid", type=int, default=None, help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)
    check = commands.add_parser("check", help="validate config, rules and templates")
    common(check)
    check.add_argument("--durable", action="store_true", help="also run the full integrity check of the durable store")
    check.set_defaults(func=cmd_check)
    schema = commands.add_parser("schema", help="print (and create) what a pool needs")
    schema.add_argument("-c", "--config", default="config/bridge.conf")
    schema.add_argument("--pool", required=True, help="<db>.<pool>, e.g. redis.pool1")
    schema.add_argument("--apply", action="store_true", help="create it")
    schema.set_defaults(func=cmd_schema)
    init = commands.add_parser("init", help="write the shipped config/, rules/ and templates/ into a folder")
    init_command.add_arguments(init)
    init.set_defaults(func=init_command.run)
    ctl = commands.add_parser("ctl", help="the management API from the command line, against a running bridge")
    ctl_commands.add_arguments(ctl)
    ctl.set_defaults(func=ctl_commands.run)
    # Sub-commands other packages add through the `hookbridge.commands` entry point group: the
    # Spark reports' `report` (spark_analytics/cli.py), whose module imports no PySpark until a
    # report runs, so this parser works without the `spark` extra installed.
    for plugin in registry.commands().values():
        extra = commands.add_parser(plugin.name, help=plugin.help)
        plugin.add_arguments(extra)
        extra.set_defaults(func=plugin.run)
    # A command whose package does not import (an image that left it out, a broken plug-in) stays
    # listed; run, it says what is missing (main, before parsing its arguments). The others work.
    for name in _unavailable_commands():
        commands.add_parser(name, help="(cannot be loaded: run it to see why)")
    return parser


def _unavailable_commands() -> dict[str, registry.UnavailablePlugin]:
    broken = registry.unavailable(registry.COMMANDS_GROUP)
    return {name: plugin for name, plugin in broken.items() if name not in registry.commands()}


def prepared(argv: list[str]) -> list[str]:
    """argv with a plug-in command's own arguments rewritten as that command asks."""
    plugin = registry.commands().get(argv[0]) if argv else None
    if plugin is None or plugin.prepare_argv is None:
        return argv
    return [argv[0], *plugin.prepare_argv(argv[1:])]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    broken = _unavailable_commands().get(argv[0]) if argv else None
    if broken is not None:  # whatever its arguments: they belong to a parser that could not be loaded
        print(f"hookbridge {broken.name}: {broken.explanation()}", file=sys.stderr)
        return EXIT_CONFIG
    args = build_parser().parse_args(prepared(argv))
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
