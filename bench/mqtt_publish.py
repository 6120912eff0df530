"""The publishing side of bench.mqtt_bench: `mosquitto_pub -l -q 1` processes, one topic each.

Every line a publisher reads is one QoS 1 message: `<publish time ns>|<sequence number>|<pad>`.
The sequence numbers of one configuration are unique across its publishers and phases, so what
the database holds can be checked message by message (payload_fields reads them back).
"""

from __future__ import annotations

import subprocess
import threading
import time

PAD = b"x" * 150
CHUNK = 1000  # lines per write when the publishers go as fast as they can
# Seconds between writes when they are paced. At 1 ms the four publishers woke 4,000 times a
# second, and with the pacer they took about half a core at 12,000 msg/s: on 2 cores that starved
# the subscriber under test (the latency measured grew without bound). At 5 ms they write bursts
# of rate/200 lines; each line's publish time is the time of its write, so none is early.
TICK = 0.005


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
        take them (rate None, one thread per publisher) or paced at `rate` msg/s in all."""
        if rate is not None:
            self._paced(seqs, rate)
            return
        shares = [seqs[k :: len(self.procs)] for k in range(len(self.procs))]
        threads = [
            threading.Thread(target=self._flood, args=(proc, share))
            for proc, share in zip(self.procs, shares, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    @staticmethod
    def _flood(proc: subprocess.Popen[bytes], share: range) -> None:
        assert proc.stdin is not None
        for start in range(0, len(share), CHUNK):
            now = time.time_ns()
            proc.stdin.write(b"".join(b"%d|%d|%s\n" % (now, seq, PAD) for seq in share[start : start + CHUNK]))
        proc.stdin.flush()

    def _paced(self, seqs: range, rate: float) -> None:
        """One thread for all publishers: every TICK, the lines due by then, dealt round-robin.
        (A thread per publisher waking for each line made the publishers' own delay the larger
        part of the latency measured on a busy 2-core machine.)"""
        started, sent = time.perf_counter(), 0
        while sent < len(seqs):
            due = min(len(seqs), int((time.perf_counter() - started) * rate) + 1)
            now = time.time_ns()
            for k, proc in enumerate(self.procs):
                assert proc.stdin is not None
                lines = seqs[sent + k : due : len(self.procs)]
                if lines:
                    proc.stdin.write(b"".join(b"%d|%d|%s\n" % (now, seq, PAD) for seq in lines))
                    proc.stdin.flush()
            sent = due
            time.sleep(TICK)

    def close(self) -> None:
        """End the input; mosquitto_pub exits once its last message is acknowledged."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(120)


def probe(port: int, topic: str) -> None:
    """One QoS 1 message `probe` on `topic` (waits for its PUBACK)."""
    subprocess.run(["mosquitto_pub", "-p", str(port), "-q", "1", "-t", topic, "-m", "probe"], check=True)
