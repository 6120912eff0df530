"""The broker core's MQTT codec (bridge/brokers/embedded/codec/), and a Rust codec beside it when installed.

What a broker does per QoS 1 message: decode the publisher's PUBLISH, encode a PUBACK to it,
encode the PUBLISH to the subscriber, decode the subscriber's PUBACK. Each is timed over N
packets (default 100,000, topic `bench/sensor/<n>`, 100-byte payload), the stream decoded in
64 KiB chunks as `asyncio.Protocol.data_received` delivers it. Figures are CPU time (process time)
per packet, the best of `--runs`, so a busy machine inflates them less than wall-clock would.

If the `mqtt5` package (Rust, MQTT 5.0 only) is importable it is measured too, for the docs'
comparison.

    .venv/bin/python -m bench.codec_bench [--messages 100000] [--runs 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import time
from collections.abc import Callable
from pathlib import Path

from bench.machine import describe, table
from bridge.brokers.embedded.codec import MQTT_3_1_1, MQTT_5, Decoder, Puback, Publish, encode_puback, encode_publish

CHUNK = 65536
PAYLOAD = b"x" * 100


def best(runs: int, count: int, work: Callable[[], object]) -> float:
    """Best CPU microseconds per packet over `runs` runs of `work` (which handles `count`)."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return min(times) / count * 1e6


def chunks(stream: bytes) -> list[bytes]:
    return [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]


def ours(level: int, count: int, runs: int) -> dict[str, float]:
    publishes = [Publish(f"bench/sensor/{n % 1000}", PAYLOAD, 1, packet_id=n % 65535 + 1) for n in range(count)]
    acks = [Puback(n % 65535 + 1) for n in range(count)]
    publish_stream = chunks(b"".join(encode_publish(p, level) for p in publishes))
    ack_stream = chunks(b"".join(encode_puback(a, level) for a in acks))

    def decode(stream: list[bytes]) -> None:
        decoder = Decoder(level=level)
        total = sum(len(decoder.feed(chunk)) for chunk in stream)
        assert total == count

    return {
        "decode PUBLISH": best(runs, count, lambda: decode(publish_stream)),
        "encode PUBLISH": best(runs, count, lambda: [encode_publish(p, level) for p in publishes]),
        "decode PUBACK": best(runs, count, lambda: decode(ack_stream)),
        "encode PUBACK": best(runs, count, lambda: [encode_puback(a, level) for a in acks]),
    }


def rust_mqtt5(count: int, runs: int) -> dict[str, float] | None:
    try:
        import mqtt5  # type: ignore[import-not-found]
    except ImportError:
        return None
    packets = [
        mqtt5.PublishPacket(f"bench/sensor/{n % 1000}", PAYLOAD, qos=mqtt5.QoS.AT_LEAST_ONCE, packet_id=n % 65535 + 1)
        for n in range(count)
    ]
    acks = [mqtt5.PubAckPacket(n % 65535 + 1) for n in range(count)]
    publish_stream, ack_stream = b"".join(p.write() for p in packets), b"".join(a.write() for a in acks)

    def decode(stream: bytes) -> None:
        view, pos, done = memoryview(stream), 0, 0
        while pos < len(stream):
            _, size = mqtt5.read(view[pos:])
            pos, done = pos + size, done + 1
        assert done == count

    return {
        "decode PUBLISH": best(runs, count, lambda: decode(publish_stream)),
        "encode PUBLISH": best(runs, count, lambda: [p.write() for p in packets]),
        "decode PUBACK": best(runs, count, lambda: decode(ack_stream)),
        "encode PUBACK": best(runs, count, lambda: [a.write() for a in acks]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    count, runs = args.messages, args.runs
    columns = {
        "bridge.brokers.embedded.codec 3.1.1": ours(MQTT_3_1_1, count, runs),
        "bridge.brokers.embedded.codec 5.0": ours(MQTT_5, count, runs),
    }
    ours_decode = columns["bridge.brokers.embedded.codec 3.1.1"]["decode PUBLISH"]
    summary = {"decode_311": ours_decode, "decode_5": columns["bridge.brokers.embedded.codec 5.0"]["decode PUBLISH"]}
    figures = rust_mqtt5(count, runs)
    if figures is not None:
        columns[f"mqtt5 {importlib.metadata.version('mqtt5')} (5.0, Rust)"] = figures
        summary["decode_mqtt5"] = figures["decode PUBLISH"]
    operations = list(columns["bridge.brokers.embedded.codec 3.1.1"])
    rows = [(op, *(f"{figures[op]:.2f}" for figures in columns.values())) for op in operations]
    print(f"machine: {describe()}")
    print(f"{count:,} QoS 1 PUBLISH (100 B payload) and PUBACK; CPU microseconds per packet, best of {runs}\n")
    print(table(rows, ("operation", *columns)))
    print(f"\nPUBLISH decode: {ours_decode:.2f} us (target: under 5 us)")
    if args.json:
        args.json.write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
