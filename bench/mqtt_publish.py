"""The publishing side of bench.mqtt_bench: `mosquitto_pub -l -q 1` processes, one topic each.

Every line a publisher reads is one QoS 1 message: `<publish time ns>|<sequence number>|<pad>`.
The sequence numbers of one configuration are unique across its publishers and phases, so what
the database holds can be checked message by message (payload_fields reads them back).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator

PAD = b"x" * 150
CHUNK = 1000  # lines per write when the publishers go as fast as they can


def payload_fields(payload: bytes) -> tuple[int, int] | None:
    """(publish time ns, sequence number) of a bench payload, None for anything else (a probe)."""
    parts = payload.split(b"|", 2)
    if len(parts) < 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


class Publishers:
    """`count` mosquitto_pub processes on `<prefix>/0` .. `<prefix>/<count - 1>`, connected at
    construction (so that connecting is not part of any measurement)."""

    def __init__(self, port: int, prefix: str, count: int) -> None:
        self.topics = [f"{prefix}/{k}" for k in range(count)]
        self.procs = [
            subprocess.Popen(
                ["mosquitto_pub", "-p", str(port), "-q", "1", "-M", "1000", "-l", "-t", topic],
                stdin=subprocess.PIPE,
            )
            for topic in self.topics
        ]

    def send(self, seqs: range, rate: float | None) -> None:
        """Publish one message per sequence number, spread over the publishers: as fast as they
        take them (rate None) or paced at `rate` msg/s in all, the publish time taken per line."""
        shares = [seqs[k :: len(self.procs)] for k in range(len(self.procs))]
        threads = [
            threading.Thread(target=self._write, args=(proc, share, rate and rate / len(self.procs)))
            for proc, share in zip(self.procs, shares, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    @staticmethod
    def _write(proc: subprocess.Popen[bytes], share: range, rate: float | None) -> None:
        assert proc.stdin is not None
        for lines in _paced(share, rate):
            now = time.time_ns()
            proc.stdin.write(b"".join(b"%d|%d|%s\n" % (now, seq, PAD) for seq in lines))
            proc.stdin.flush()

    def close(self) -> None:
        """End the input; mosquitto_pub exits once its last message is acknowledged."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(120)


def _paced(share: range, rate: float | None) -> Iterator[range]:
    """Slices of `share`: CHUNK lines at a time, or at `rate` per second a millisecond's worth
    at a time (sleeping until each one is due)."""
    if rate is None:
        for start in range(0, len(share), CHUNK):
            yield share[start : start + CHUNK]
        return
    step = max(1, int(rate / 1000))
    started = time.perf_counter()
    for start in range(0, len(share), step):
        delay = started + start / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        yield share[start : start + step]


def probe(port: int, topic: str) -> None:
    """One QoS 1 message `probe` on `topic` (waits for its PUBACK)."""
    subprocess.run(["mosquitto_pub", "-p", str(port), "-q", "1", "-t", topic, "-m", "probe"], check=True)
