"""Time to decode an MQTT 5 property block of N user properties (tests/unit/test_mqtt_user_properties.py).

    .venv/bin/python bench/properties_bench.py [N]      # default 40,000

Decoding was quadratic in the number of properties (a tuple rebuilt per property); it is linear.
"""

from __future__ import annotations

import sys
import time

from bridge.brokers.embedded.codec import properties, wire
from bridge.brokers.embedded.codec.kinds import PacketType


def main(count: int) -> None:
    body = b"".join(b"\x26" + wire.string(f"k{i}") + wire.string("v") for i in range(count))
    block = wire.varint(len(body)) + body
    start = time.perf_counter()
    decoded, _ = properties.decode(block, 0, len(block), PacketType.CONNECT)
    elapsed = time.perf_counter() - start
    assert len(decoded.user_property) == count
    print(f"{count} user properties ({len(block)} bytes): {elapsed:.3f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40_000)
