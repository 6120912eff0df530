"""One bad client: another client's login round trip while one client misbehaves, hookbridge's
embedded broker and Mosquitto in the same run (docs/benchmarks.md#one-bad-client).

    .venv/bin/python -m bench.one_bad_client [--samples 30] [--brokers hookbridge,mosquitto]

For each broker (`python -m bridge run` and Mosquitto 2.0, bench/broker_servers.py), with no
flood first, then while bench/flooder.py (its own process) floods one packet type, reading what
the broker answers or never reading it, and while 40 or 400 connections send wrong passwords:
a good client, from another loopback address (127.0.0.2), connects and sends PINGREQ, again and
again; its round trip (CONNECT to PINGRESP) is printed as p50, p99 and max, with the logins that
failed or took over `--timeout`. Both brokers check the same password file: one user whose hash
is PBKDF2-SHA512 with 30,000 iterations (a `$7$` line as mosquitto_passwd writes them, with
more iterations than its default 101), so every wrong password costs both a real hash.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.broker_servers import HOST, hookbridge_launch, mosquitto_launch, mosquitto_version
from bench.flooder import PACKETS
from bench.machine import describe, table
from bench.services import ROOT
from bridge.brokers.embedded.codec import MQTT_3_1_1, Connect, Pingreq, encode

GOOD_SOURCE = "127.0.0.2"  # the good client's address: another than the flood's (127.0.0.1)
USER, PASSWORD = "alice", b"the-right-password"
# PBKDF2-SHA512 rounds of the one user's hash: tens of milliseconds a check, about what bcrypt's
# usual cost 10 takes, and over hookbridge's 10,000 from which a check leaves the event loop.
ITERATIONS = 30_000
WARM_UP = 1.0  # seconds a flood runs before the first login
PAUSE = 0.05  # seconds between two logins
PASSWORD_FLOODS = (40, 400)


def password_file(path: Path) -> Path:
    """A mosquitto_passwd `$7$` file (PBKDF2-SHA512, 64-byte digest, 12-byte salt) for USER."""
    salt = os.urandom(12)
    digest = hashlib.pbkdf2_hmac("sha512", PASSWORD, salt, ITERATIONS, 64)
    path.write_text(f"{USER}:$7${ITERATIONS}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}\n")
    return path


def login_round_trip(port: int, number: int, timeout: float, user: bool) -> float | None:
    """Seconds from connecting to the PINGRESP, or None if refused, closed or over `timeout`."""
    connect = Connect(f"good-{number}", MQTT_3_1_1, True, 0, USER if user else None, PASSWORD if user else None)
    started = time.perf_counter()
    try:
        with socket.socket() as sock:
            sock.settimeout(timeout)
            sock.bind((GOOD_SOURCE, 0))
            sock.connect((HOST, port))
            sock.sendall(encode(connect, MQTT_3_1_1))
            if _read(sock, 4) != b"\x20\x02\x00\x00":  # CONNACK, accepted
                return None
            sock.sendall(encode(Pingreq(), MQTT_3_1_1))
            if _read(sock, 2) != b"\xd0\x00":
                return None
            elapsed = time.perf_counter() - started
            sock.sendall(b"\xe0\x00")  # DISCONNECT
            return elapsed
    except OSError:  # a timeout included
        return None


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


@dataclass
class Row:
    broker: str
    flood: str
    times: list[float]
    failed: int

    def figures(self) -> dict[str, float]:
        if not self.times:
            return {"p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan"), "failed": self.failed}
        ordered = sorted(self.times)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return {
            "p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": p99 * 1000,
            "max_ms": ordered[-1] * 1000,
            "failed": self.failed,
        }


@contextmanager
def flooding(port: int, kind: str, reading: str, *extra: str) -> Iterator[None]:
    if kind == "none":
        yield
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.flooder", str(port), kind, reading, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(WARM_UP)
        yield
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


def measure(broker: str, port: int, flood: str, samples: int, timeout: float, *args: str, user: bool = False) -> Row:
    kind, _, reading = flood.partition(" ")
    times, failed = [], 0
    with flooding(port, kind, reading or "read", *args):
        for number in range(samples):
            took = login_round_trip(port, number, timeout, user)
            if took is None:
                failed += 1
            else:
                times.append(took)
            time.sleep(PAUSE)
    label = flood + (f" ({args[-1]} connections)" if kind == "password" else "")
    if kind == "none" and user:
        label = "none, logging in with a password"
    row = Row(broker, label, times, failed)
    figures = row.figures()
    print(
        f"{broker:10} {row.flood:34} p50 {figures['p50_ms']:8.1f} ms  p99 {figures['p99_ms']:8.1f} ms  "
        f"max {figures['max_ms']:8.1f} ms  failed {failed}/{samples}",
        flush=True,
    )
    return row


def run_broker(name: str, port: int, samples: int, timeout: float, packets: bool, passwords: bool) -> list[Row]:
    rows = []
    if packets:
        rows.append(measure(name, port, "none", samples, timeout))
        for kind in PACKETS:
            for reading in ("read", "noread"):
                rows.append(measure(name, port, f"{kind} {reading}", samples, timeout, "--level", "5"))
    if not passwords:
        return rows
    rows.append(measure(name, port, "none", samples, timeout, user=True))  # a login with a hash, no flood
    for connections in PASSWORD_FLOODS:
        flood = ("--username", USER, "--connections", str(connections))
        rows.append(measure(name, port, "password read", samples, timeout, *flood, user=True))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30, help="logins measured per flood")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds after which a login counts as failed")
    parser.add_argument("--brokers", default="hookbridge,mosquitto")
    parser.add_argument("--floods", default="packets,passwords", help="packets, passwords or both")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"machine: {describe()}; Mosquitto {mosquitto_version()}", flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-bad-client-") as tmp:
        users = password_file(Path(tmp) / "passwd")
        for name in args.brokers.split(","):
            if name == "hookbridge":
                launch = hookbridge_launch(
                    Path(tmp) / name, extra=(f"broker.auth.password_file = {users}", "broker.allow_anonymous = true")
                )
            else:
                launch = mosquitto_launch(Path(tmp) / name, password_file=users)
            with launch.run() as server:
                floods = args.floods.split(",")
                rows += run_broker(
                    name, server.port, args.samples, args.timeout, "packets" in floods, "passwords" in floods
                )
    header = ("broker", "flood", "p50 ms", "p99 ms", "max ms", "failed")
    lines = []
    for row in rows:
        f = row.figures()
        lines.append(
            (row.broker, row.flood, f"{f['p50_ms']:.1f}", f"{f['p99_ms']:.1f}", f"{f['max_ms']:.1f}", f"{row.failed}")
        )
    print("\n" + table(lines, header))
    if args.json is not None:
        args.json.write_text(json.dumps([{"broker": r.broker, "flood": r.flood, **r.figures()} for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
