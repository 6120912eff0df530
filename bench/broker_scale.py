"""The embedded broker at fleet scale, against Mosquitto in the same run (docs/benchmarks.md#fleet-scale).

A fleet's shape: every device is a connection subscribed to its own `dev/<id>/cmd/#` and to a
broadcast topic. For each fleet size (0, 2,000, 15,000 devices by default) and each broker
(Mosquitto 2, the embedded broker with no rules), a fresh broker process:

- the fleet connects and subscribes (raw MQTT 3.1.1 clients of this process, up to --window
  handshakes at a time): connections per second and the broker's RSS per device;
- one device's throughput: `mosquitto_sub` subscribed to `dev/target/cmd/#` takes --messages
  100 B messages from `mosquitto_pub -l` (QoS 1, up to 1,000 in flight, as bench.broker_bench);
  with the other devices beside it, every publish must find its one subscriber among them;
- a broadcast: --broadcasts messages to the topic every device subscribed to; deliveries per
  second until every device has read them all (this process reads the fleet's sockets, so on
  two cores it shares the machine with the broker: the figure is the same for both brokers);
- a CONNECT storm: --storm idle clients (15,000) opened with up to --storm-window (1,000)
  handshakes at a time, more than the listen backlog: every one must get its CONNACK (a refused
  or reset connection fails the run); connections per second and the broker's RSS per idle
  connection;
- retained lookups: --retained messages retained at `r/<k>/v`, then a SUBSCRIBE `r/<k>/#` for
  20 keys; the median time from SUBSCRIBE to its retained message (TCP_NODELAY on the client;
  Mosquitto's reply may wait out Nagle's delay, as a user would see it).

    .venv/bin/python -m bench.broker_scale [--fleets 0,2000,15000] [--messages 20000] [--retained 1000,200000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from bench.broker_bench import (
    INFLIGHT,
    PAYLOAD,
    PUBLISHER_CONNECT,
    SETTLE,
    _watchdog,
    _write_and_close,
    idle_connections,
    limit_setting,
    raise_fd_limit,
)
from bench.broker_servers import HOST, Server, hookbridge, mosquitto
from bench.broker_servers import mosquitto_version as version
from bench.machine import describe, table
from bridge.brokers.embedded.codec import MQTT_3_1_1, Connect, Publish, Subscribe, Subscription, encode

BROADCAST = "fleet/broadcast"
CONNACK, SUBACK_TYPE, PUBLISH_TYPE, PUBACK_TYPE = 0x20, 0x90, 0x30, 0x40

Start = Callable[[Path], AbstractContextManager[Server]]


def _packet(packet: object) -> bytes:
    return encode(packet, MQTT_3_1_1)  # type: ignore[arg-type]


async def _read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One MQTT packet: (first byte, body)."""
    head = await reader.readexactly(1)
    length, shift = 0, 0
    while True:
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return head[0], await reader.readexactly(length)


class Device:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer


async def connect_fleet(port: int, count: int, window: int) -> tuple[list[Device], float]:
    """`count` devices connected and subscribed to their own commands and the broadcast."""
    gate = asyncio.Semaphore(window)

    async def one(number: int) -> Device:
        async with gate:
            reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 16)
            writer.write(_packet(Connect(client_id=f"dev-{number}", keepalive=0)))
            subscribe = Subscribe(1, [Subscription(f"dev/{number}/cmd/#", 0), Subscription(BROADCAST, 0)])
            writer.write(_packet(subscribe))
            kind, body = await _read_packet(reader)
            if kind != CONNACK or body[1] != 0:
                raise RuntimeError(f"device {number}: CONNACK {body!r}")
            kind, body = await _read_packet(reader)
            if kind != SUBACK_TYPE or body[2:] != b"\x00\x00":
                raise RuntimeError(f"device {number}: SUBACK {body!r}")
            return Device(reader, writer)

    started = time.perf_counter()
    devices = await asyncio.gather(*(one(number) for number in range(count)))
    return list(devices), count / (time.perf_counter() - started) if count else 0.0


async def broadcast(port: int, devices: list[Device], messages: int) -> float:
    """Deliveries per second of `messages` QoS 0 broadcasts to every device."""
    if not devices:
        return 0.0
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(_packet(Connect(client_id="fleet-broadcaster", keepalive=0)))
    await _read_packet(reader)

    async def drain(device: Device) -> None:
        for _ in range(messages):
            kind, _body = await _read_packet(device.reader)
            if kind & 0xF0 != PUBLISH_TYPE:
                raise RuntimeError(f"broadcast: packet type {kind:#x}")

    started = time.perf_counter()
    readers = [asyncio.create_task(drain(device)) for device in devices]
    for _ in range(messages):
        writer.write(_packet(Publish(BROADCAST, PAYLOAD)))
    await asyncio.wait_for(asyncio.gather(*readers), timeout=600)
    elapsed = time.perf_counter() - started
    writer.close()
    return len(devices) * messages / elapsed


def to_one_device(server: Server, messages: int, workdir: Path) -> float:
    """Messages per second from mosquitto_pub to one device's mosquitto_sub (QoS 1)."""
    port = str(server.port)
    topic, ready = "dev/target/cmd/run", "dev/target/cmd/ready"
    subprocess.run(["mosquitto_pub", "-p", port, "-q", "1", "-r", "-t", ready, "-m", "ready"], check=True, timeout=30)
    received = workdir / "received"
    with received.open("wb") as sink:
        sub = subprocess.Popen(
            [
                "mosquitto_sub",
                "-p",
                port,
                "-q",
                "1",
                "-i",
                "dev-target",
                "-t",
                "dev/target/cmd/#",
                "-C",
                str(messages + 1),
            ],
            stdout=sink,
            stderr=subprocess.DEVNULL,
        )
    pub: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 30
        while received.stat().st_size == 0:
            if sub.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the device's mosquitto_sub got no retained message")
            time.sleep(0.01)
        command = ["mosquitto_pub", "-p", port, "-q", "1", "-i", "fleet-pub", "-t", topic, "-l", "-M", str(INFLIGHT)]
        pub = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
        time.sleep(PUBLISHER_CONNECT)
        assert pub.stdin is not None
        feed = threading.Thread(target=_write_and_close, args=(pub.stdin, (PAYLOAD + b"\n") * messages))
        watchdog = threading.Thread(target=_watchdog, args=(pub, [(sub, received)]))
        started = time.perf_counter()
        feed.start()
        watchdog.start()
        sub.wait()
        elapsed = time.perf_counter() - started
        feed.join()
        watchdog.join()
    finally:
        for process in (sub, pub):
            if process is not None:
                process.kill()
                process.wait()
    arrived = sum(line == PAYLOAD for line in received.read_bytes().splitlines())
    if arrived != messages:
        raise RuntimeError(f"{server.name}: {arrived} of {messages} messages reached the device")
    return messages / elapsed


async def retained_lookup(port: int, count: int, lookups: int = 20) -> float:
    """Median seconds from a SUBSCRIBE `r/<k>/#` to its retained message, `count` retained."""
    reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    writer.write(_packet(Connect(client_id="fleet-retainer", keepalive=0)))
    await _read_packet(reader)
    for start in range(0, count, 1000):
        writer.write(
            b"".join(_packet(Publish(f"r/{k}/v", b"v", retain=True)) for k in range(start, min(count, start + 1000)))
        )
        await writer.drain()
    # A QoS 1 publish after them: its PUBACK says every retained message before it was taken.
    writer.write(_packet(Publish("r/done", b"", qos=1, packet_id=1)))
    while (await _read_packet(reader))[0] != PUBACK_TYPE:
        pass
    times = []
    keys = random.Random(7).sample(range(count), min(lookups, count))
    for number, key in enumerate(keys, start=2):
        started = time.perf_counter()
        writer.write(_packet(Subscribe(number, [Subscription(f"r/{key}/#", 0)])))
        while (await _read_packet(reader))[0] & 0xF0 != PUBLISH_TYPE:
            pass
        times.append(time.perf_counter() - started)
    writer.close()
    return statistics.median(times)


def one_fleet(server: Server, fleet: int, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    async def run() -> dict[str, float]:
        await asyncio.sleep(SETTLE)
        before = server.rss()
        devices, rate = await connect_fleet(server.port, fleet, args.window)
        await asyncio.sleep(SETTLE)
        kib = (server.rss() - before) / fleet / 1024 if fleet else 0.0
        one = await asyncio.to_thread(to_one_device, server, args.messages, workdir)
        deliveries = await broadcast(server.port, devices, args.broadcasts)
        for device in devices:
            device.writer.close()
        return {"connect_rate": rate, "kib_per_device": kib, "one_device": one, "broadcast": deliveries}

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fleets", default="0,2000,15000", help="device counts, comma-separated")
    parser.add_argument("--messages", type=int, default=20_000, help="messages to the one device per run")
    parser.add_argument("--broadcasts", type=int, default=5, help="broadcast messages to the whole fleet")
    parser.add_argument("--retained", default="1000,200000", help="retained message counts, comma-separated")
    parser.add_argument("--window", type=int, default=100, help="connection handshakes in progress at a time")
    parser.add_argument("--storm", type=int, default=15_000, help="idle clients of the CONNECT storm (0: none)")
    parser.add_argument("--storm-window", type=int, default=1_000, help="storm handshakes in progress at a time")
    args = parser.parse_args()
    fleets = [int(n) for n in args.fleets.split(",")]
    most = max([*fleets, args.storm])
    raise_fd_limit(most + 100)
    limit = limit_setting(most + 100)
    brokers: list[tuple[str, Start]] = [
        (f"Mosquitto {version()}", mosquitto),
        ("embedded, no rules", lambda d: hookbridge(d, max_connections=limit)),
    ]
    rows: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for fleet in fleets:
            for name, start in brokers:
                workdir = Path(tmp) / f"{name.split()[0]}-{fleet}"
                workdir.mkdir()
                with start(workdir) as server:
                    got = one_fleet(server, fleet, args, workdir)
                rows.append(
                    (
                        f"{fleet:,}",
                        name,
                        f"{got['one_device']:,.0f}",
                        f"{got['broadcast']:,.0f}" if fleet else "-",
                        f"{got['connect_rate']:,.0f}" if fleet else "-",
                        f"{got['kib_per_device']:.1f}" if fleet else "-",
                    )
                )
                print(" | ".join(rows[-1]), flush=True)
        storm_rows: list[tuple[str, ...]] = []
        for name, start in brokers if args.storm else []:
            workdir = Path(tmp) / f"{name.split()[0]}-storm"
            workdir.mkdir()
            with start(workdir) as server:
                rate, per_connection = idle_connections(server, args.storm, args.storm_window)
            storm_rows.append((f"{args.storm:,}", name, f"{rate:,.0f}", f"{per_connection / 1024:.2f}"))
            print(" | ".join(storm_rows[-1]), flush=True)
        retained_rows: list[tuple[str, ...]] = []
        for count in (int(n) for n in args.retained.split(",")):
            for name, start in brokers:
                workdir = Path(tmp) / f"{name.split()[0]}-retained-{count}"
                workdir.mkdir()
                with start(workdir) as server:
                    seconds = asyncio.run(retained_lookup(server.port, count))
                retained_rows.append((f"{count:,}", name, f"{seconds * 1000:.2f}"))
                print(" | ".join(retained_rows[-1]), flush=True)
    print(f"\nmachine: {describe()}")
    print(
        f"\nA fleet: each device subscribed to dev/<id>/cmd/# and {BROADCAST} (QoS 0). One device: "
        f"mosquitto_pub -l -q 1 -M {INFLIGHT} -> mosquitto_sub of dev/target/cmd/#, {args.messages} x "
        f"{len(PAYLOAD)} B. Broadcast: {args.broadcasts} QoS 0 messages to every device.\n"
    )
    print(
        table(
            rows, ("devices", "broker", "msg/s to one device", "broadcast deliveries/s", "connects/s", "KiB per device")
        )
    )
    if storm_rows:
        print(
            f"\nCONNECT storm: {args.storm:,} idle MQTT 3.1.1 clients, up to {args.storm_window:,} handshakes at a "
            "time, every one connected (none refused or reset)\n"
        )
        print(table(storm_rows, ("clients", "broker", "connections/s", "RSS KiB per idle connection")))
    print("\nSUBSCRIBE r/<k>/# to its one retained message, median of 20 keys\n")
    print(table(retained_rows, ("retained", "broker", "ms")))


if __name__ == "__main__":
    main()
