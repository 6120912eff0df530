"""The on-disk spool behind each pool's runner queues
(docs/operations.md#the-spool-what-keeps-actions-across-an-outage-and-a-restart).

    <spool.dir>/<pool>/layout        how many lanes wrote it (a different count redistributes)
    <spool.dir>/<pool>/lane-<n>/     one LaneSpool per ordering lane (segments.py)

A lane spools an action instead of queueing it in memory while its pool is down or its
memory queue is full, and keeps spooling while anything of it is spooled, so nothing
overtakes: the lane writes what is in memory (older), then the spool (newer), in order.
All pools share one byte budget (`spool.max_bytes`); when it is used up, the overflow
policy applies: `block` (default: the action waits, back-pressure reaches the broker)
or `drop_oldest` (the lane's oldest segment is deleted, its actions counted `dropped`).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from bridge.pipeline.spool.budget import Budget
from bridge.pipeline.spool.codec import Record, RecordError, decode, encode
from bridge.pipeline.spool.segments import LaneSpool

log = logging.getLogger(__name__)

__all__ = ["Budget", "LaneSpool", "PoolSpool", "Record", "RecordError", "decode", "encode"]

_LAYOUT = "lanes {lanes} hash crc32-fibonacci\n"


class PoolSpool:
    """The lane spools of one pool."""

    def __init__(self, root: Path, pool_id: str, lanes: int, budget: Budget, report: Callable[[str], None]) -> None:
        self.directory = root / pool_id
        self.budget = budget
        self.report = report
        segment_bytes = max(64 << 10, min(16 << 20, budget.max_bytes // 16))
        self.lanes = [LaneSpool(self.directory / f"lane-{n}", segment_bytes, report, budget) for n in range(lanes)]

    def open(self, lane_of: Callable[[Record], int]) -> None:
        """Open every lane's spool; re-spread the records of a spool written with another lane count."""
        layout = self.directory / "layout"
        expected = _LAYOUT.format(lanes=len(self.lanes))
        old = sorted(p for p in self.directory.glob("lane-*") if p.is_dir()) if self.directory.exists() else []
        if old and (not layout.exists() or layout.read_text() != expected):
            moved = self.directory.with_name(self.directory.name + ".old")
            shutil.rmtree(moved, ignore_errors=True)
            self.directory.rename(moved)
            self._open_lanes()
            count = self._respread(moved, lane_of)
            shutil.rmtree(moved)
            log.warning("spool of %s was written with another lane count: %d actions re-spread", self.directory, count)
        else:
            self._open_lanes()
        layout.write_text(expected)

    def _open_lanes(self) -> None:
        for lane in self.lanes:
            lane.open()

    def _respread(self, moved: Path, lane_of: Callable[[Record], int]) -> int:
        count = 0
        for directory in sorted(p for p in moved.glob("lane-*") if p.is_dir()):
            source = LaneSpool(directory, 1 << 30, self.report)
            source.open()
            for body in _all(source):
                try:
                    target = self.lanes[lane_of(decode(body))]
                except RecordError as exc:
                    self.report(f"{directory}: {exc}")
                    continue
                target.append(body)
                count += 1
            source.close()
        return count

    def close(self) -> None:
        """Close every lane's spool; its files stay for the next start and no longer count."""
        for lane in self.lanes:
            lane.close()

    @property
    def bytes(self) -> int:
        return sum(lane.bytes for lane in self.lanes)

    @property
    def pending(self) -> int:
        return sum(lane.pending for lane in self.lanes)


def _all(spool: LaneSpool) -> Iterator[bytes]:
    while spool.pending:
        bodies, position = spool.read(1000)
        if not bodies:
            return
        yield from bodies
        spool.ack(position, len(bodies))
