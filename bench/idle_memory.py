"""What one idle connection of the embedded broker costs, byte by byte (docs/benchmarks.md#memory-per-idle-connection).

Three measures, each with --clients (15,000) idle MQTT 3.1.1 clients (clean session, no
keepalive, CONNACK received, then silent) opened from this process:

1. **RSS**: the broker process's resident set after minus before, per connection, for the
   embedded broker (`hookbridge run`, no rules) and Mosquitto in the same run
   (bench.broker_bench.idle_connections, which also times the connects).
2. **Where the Python heap goes**: the same broker run under tracemalloc (this module's `serve`
   starts it before `bridge.cli.main`); a snapshot before and one after the clients connected,
   compared line by line (`file:line` of the allocation, bytes per connection).
3. **What each object is**: `sys.getsizeof` of one connection's objects (protocol, transport and
   what it holds, socket, session, event stream, decoder...), read in the broker process.

Snapshots are asked for with SIGUSR2 (nothing else in the bridge uses it) and written beside the
broker's log; tracemalloc slows the broker down and adds its own bookkeeping, so the RSS figure
comes from a run without it.

    .venv/bin/python -m bench.idle_memory [--clients 15000] [--window 100] [--top 25]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.broker_bench import SETTLE, idle_connections, limit_setting, open_idle_clients, raise_fd_limit
from bench.broker_servers import (
    Launch,
    Server,
    bridge_build,
    hookbridge_launch,
    mosquitto,
    mosquitto_version,
    use_installed_bridge,
)
from bench.machine import describe, table

SNAPSHOT_SIGNAL = signal.SIGUSR2
# Frames kept per allocation: the line that allocated, and who called it.
FRAMES = 2


# -- inside the broker process ---------------------------------------------------------------


def serve(out: Path, bridge_args: list[str]) -> int:
    """`hookbridge run` with tracemalloc on; each SIGUSR2 writes snapshot-<n> and objects-<n>
    into `out`, then the file `ready-<n>`."""
    tracemalloc.start(FRAMES)
    taken = 0

    def snapshot(_signum: int, _frame: Any) -> None:
        nonlocal taken
        taken += 1
        tracemalloc.take_snapshot().dump(str(out / f"snapshot-{taken}"))
        (out / f"objects-{taken}.json").write_text(json.dumps(object_sizes()))
        (out / f"ready-{taken}").touch()

    signal.signal(SNAPSHOT_SIGNAL, snapshot)
    from bridge.cli import main

    return main(["run", *bridge_args])


def object_sizes() -> dict[str, str]:
    """sys.getsizeof of the objects one connection holds (the first two connections found: an
    object the second one holds too is shared, and costs a connection nothing)."""
    from bridge.brokers.embedded.connection import Connection

    found = [o for o in gc.get_objects() if isinstance(o, Connection) and o.channel.state is not None][:2]
    if len(found) < 2:
        return {}
    sizes: dict[str, str] = {}
    for (name, mine), theirs in zip(_held(found[0]).items(), _held(found[1]).values(), strict=True):
        if mine is not None:
            sizes[name] = f"{sys.getsizeof(mine):,}" + (" (shared: 0 each)" if mine is theirs else "")
    return sizes


def _held(conn: Any) -> dict[str, object]:
    """What one connection holds, by a name a reader knows it by."""
    transport, channel = conn.transport, conn.channel
    state = channel.state
    extra = getattr(transport, "_extra", None) or {}
    return {
        "Connection (the socket's side)": conn,
        "  its Channel (the MQTT protocol)": channel,
        "  its decoder": conn.decoder,
        "  decoder's partial-packet buffer": getattr(conn.decoder, "_partial", None),
        "  decoder's bounds": getattr(conn.decoder, "_bounds", None),
        "  its Ended (made when first waited on)": getattr(channel, "_done", None),
        "  its Peer": channel.peer,
        "  peer address str": channel.peer.address,
        "transport (tcp.py's, or the loop's for TLS and WebSocket)": transport,
        "  transport __dict__ (asyncio's own loop)": getattr(transport, "__dict__", None),
        "  transport _extra dict (asyncio's own loop)": extra or None,
        "  socket object (asyncio's own loop)": getattr(transport, "_sock", None),
        "SessionState": state,
        "  subscriptions": state.subscriptions,
        "  incoming_qos2": state.incoming_qos2,
        "  InflightWindow": state.inflight,
        "  its dict": getattr(state.inflight, "_messages", None),
        "  EventStream (event stream)": state.stream,
        "  clientid str": state.clientid,
    }


# -- the bench ---------------------------------------------------------------------------------


def traced_launch(workdir: Path, limit: int | None) -> Launch:
    """The embedded broker as bench.broker_servers starts it, under this module's `serve`."""
    plain = hookbridge_launch(workdir, max_connections=limit)
    bridge_args = plain.command[plain.command.index("run") + 1 :]
    command = [sys.executable, "-m", "bench.idle_memory", "serve", str(workdir), *bridge_args]
    return Launch(plain.name, command, workdir, plain.port, plain.log_name)


def take_snapshot(server: Server, number: int) -> tuple[tracemalloc.Snapshot, dict[str, str]]:
    server.process.send_signal(SNAPSHOT_SIGNAL)
    ready = server.log.parent / f"ready-{number}"
    deadline = time.monotonic() + 300
    while not ready.exists():
        if time.monotonic() > deadline or server.process.poll() is not None:
            raise RuntimeError(f"no snapshot {number} from the broker: {server.log.read_text()[-3000:]}")
        time.sleep(0.1)
    objects = json.loads((server.log.parent / f"objects-{number}.json").read_text())
    return tracemalloc.Snapshot.load(str(server.log.parent / f"snapshot-{number}")), objects


def traced(workdir: Path, clients: int, window: int, limit: int | None) -> tuple[tracemalloc.Snapshot, ...]:
    with traced_launch(workdir, limit).run() as server:
        time.sleep(SETTLE)
        before, _ = take_snapshot(server, 1)
        sockets, _rate = asyncio.run(open_idle_clients(server.port, clients, window))
        try:
            time.sleep(SETTLE)
            after, objects = take_snapshot(server, 2)
        finally:
            for sock in sockets:
                sock.close()
    print("\nsys.getsizeof of one idle connection's objects (bytes; a container's size leaves out what it holds)\n")
    print(table(list(objects.items()), ("object", "bytes")))
    return before, after


def by_line(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, clients: int, top: int) -> None:
    noise = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
    before, after = before.filter_traces(noise), after.filter_traces(noise)
    for group in ("filename", "lineno"):
        diffs = [d for d in after.compare_to(before, group) if d.size_diff > 0]
        total = sum(d.size_diff for d in after.compare_to(before, group))
        rows = [
            (
                _where(d.traceback, group),
                f"{d.size_diff / clients:,.1f}",
                f"{d.count_diff / clients:,.2f}",
            )
            for d in diffs[:top]
        ]
        rows.append(("all (net)", f"{total / clients:,.1f}", ""))
        print(f"\nPython heap per idle connection (tracemalloc), by {group}, the {top} largest\n")
        print(table(rows, ("allocated at", "bytes per connection", "blocks per connection")))


def _where(traceback: tracemalloc.Traceback, group: str) -> str:
    frame = traceback[0]
    if frame.filename.endswith("asyncio/runners.py"):
        # uvloop is C: what it allocates has no Python line of its own and is counted at the
        # innermost Python frame, the loop's run_until_complete.
        return "the event loop's C code (uvloop: transport, libuv handle)"
    name = frame.filename.split("/site-packages/")[-1].split("/lib/python3")[-1].removeprefix(str(Path.cwd()) + "/")
    return name if group == "filename" else f"{name}:{frame.lineno}"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "serve":
        sys.exit(serve(Path(sys.argv[2]), sys.argv[3:]))
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=15_000, help="idle connections")
    parser.add_argument("--window", type=int, default=100, help="handshakes in progress at a time")
    parser.add_argument("--top", type=int, default=25, help="lines of the tracemalloc breakdown shown")
    parser.add_argument("--json", help="also write the RSS figures to this file")
    parser.add_argument(
        "--python",
        help="run the bridge with this interpreter's installed hookbridge (e.g. a virtualenv with the compiled "
        "wheel: docs/development.md#the-compiled-build) instead of the checkout's code",
    )
    parser.add_argument(
        "--rss-only", action="store_true", help="only the RSS rows, not the tracemalloc run (which runs the checkout)"
    )
    args = parser.parse_args()
    if args.python:
        use_installed_bridge(args.python)
    raise_fd_limit(args.clients + 100)
    limit = limit_setting(args.clients + 100)
    print(f"machine: {describe()}; the bridge: {bridge_build()}", flush=True)
    rss: dict[str, tuple[float, float]] = {}
    loop_transport = ("broker.listener.tcp.transport = loop",)
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        for name, start in (
            (f"Mosquitto {mosquitto_version()}", mosquitto),
            ("embedded, no rules", lambda d: hookbridge_launch(d, max_connections=limit).run()),
            (
                "embedded, no rules, the loop's transport",
                lambda d: hookbridge_launch(d, max_connections=limit, extra=loop_transport).run(),
            ),
        ):
            workdir = Path(tmp) / f"rss-{len(rss)}"
            with start(workdir) as server:
                rss[name] = idle_connections(server, args.clients, args.window)
        print(f"\n{args.clients:,} idle MQTT 3.1.1 clients, up to {args.window} handshakes at a time\n")
        rows = [(name, f"{rate:,.0f}", f"{per / 1024:.2f}") for name, (rate, per) in rss.items()]
        print(table(rows, ("broker", "connections/s", "RSS KiB per idle connection")))
        if not args.rss_only:
            before, after = traced(Path(tmp) / "traced", args.clients, args.window, limit)
            by_line(before, after, args.clients, args.top)
    if args.json:
        Path(args.json).write_text(json.dumps({name: per for name, (_, per) in rss.items()}))


if __name__ == "__main__":
    main()
