"""One lane's spool on disk: numbered append-only segment files of checksummed records.

    <dir>/00000001000000000000.seg   "HBSPOOL1", then records: u32 length, u32 crc32, body
    <dir>/position                   "<segment> <offset>": where reading resumes (plus lines
                                     "<segment> <offset>" for segments read partly before
                                     older records were put in front of them)

Records are written with one `write` each (a killed process loses none of the records
it wrote; the file is fsynced at most a second later, so a power loss can lose up to
a second). Reading starts at `position` and never moves it until the records read are
acknowledged (written to the database), so a crash replays them: every write is
idempotent. A torn or corrupt tail (a crash mid-write, a truncated file) is found when
the spool opens: the records before it are kept, the rest of that segment is skipped
and reported, never fatal. A new process always starts a new segment, numbered past
every segment the position file may still name.

A full disk is never fatal either: a failed append or `put_first` leaves nothing behind
and raises OSError; a position that cannot be saved (after records were written out)
is reported, kept in memory and saved again at the next chance: a crash before that
replays records already written, which every write tolerates (idempotent).
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from bridge.pipeline.spool.budget import Budget

MAGIC = b"HBSPOOL1"
_RECORD = struct.Struct("<II")  # body length, crc32 of the body
_MAX_BODY = 256 << 20
_FIRST = 1_000_000_000_000  # segment numbers start high, so a segment can be put before the first
_FSYNC_EVERY = 1.0

Position = tuple[int, int]  # segment number, byte offset in it


def _name(number: int) -> str:
    return f"{number:020d}.seg"


class LaneSpool:
    def __init__(
        self, directory: Path, segment_bytes: int, report: Callable[[str], None], budget: Budget | None = None
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.report = report  # a torn tail or an unreadable file: logged and counted by the owner
        self.ends: dict[int, int] = {}  # segment -> end of its valid records
        self.pending = 0  # records written and not yet acknowledged
        self.bytes = 0  # size of the segment files: change it only through _resized (the budget follows)
        self.budget = budget  # shared with the other lanes and pools; None: unbounded (tools, tests)
        self._position: Position = (0, 0)
        self._starts: dict[int, int] = {}  # segments whose unread records begin past the header
        self._writer: int | None = None  # fd of the segment being appended to
        self._writing = 0
        self._synced = time.monotonic()
        self._newest = _FIRST - 1  # the highest segment number used or named: never reused
        self.unsaved = False  # the position on disk is behind the one in memory (disk full)

    # -- opening -------------------------------------------------------------

    def open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._position, self._starts = self._read_position()
        self._newest = max(self._newest, self._position[0], *self._starts)
        for path in sorted(self.directory.glob("*.seg")):
            number = int(path.stem)
            self._newest = max(self._newest, number)
            start = self._start(number)
            if number < self._position[0]:
                path.unlink()  # acknowledged before a crash, not yet deleted
                continue
            end, count = self._scan(path, start)
            self.ends[number] = end
            self.pending += count
            self._resized(path.stat().st_size)
        if not self.ends or self._position[0] not in self.ends:
            self._position = (min(self.ends), len(MAGIC)) if self.ends else (0, 0)

    def _scan(self, path: Path, start: int) -> tuple[int, int]:
        """The end of the valid records from `start`, and how many there are."""
        data = path.read_bytes()
        if data[: len(MAGIC)] != MAGIC:
            self.report(f"{path}: not a spool segment; skipped")
            return len(data), 0
        offset, count = max(start, len(MAGIC)), 0
        while offset < len(data):
            body = _record_at(data, offset)
            if body is None:
                skipped = len(data) - offset
                self.report(f"{path}: torn or corrupt record at byte {offset}; {skipped} bytes after it skipped")
                break
            offset += _RECORD.size + len(body)
            count += 1
        return offset, count

    def _start(self, number: int) -> int:
        if number == self._position[0]:
            return self._position[1]
        return self._starts.get(number, len(MAGIC))

    def _read_position(self) -> tuple[Position, dict[int, int]]:
        try:
            lines = [line.split() for line in (self.directory / "position").read_text().splitlines() if line]
            pairs = [(int(segment), int(offset)) for segment, offset in lines]
        except (OSError, ValueError):
            return (0, 0), {}
        return (pairs[0] if pairs else (0, 0)), dict(pairs[1:])

    # -- writing -------------------------------------------------------------

    def append(self, body: bytes) -> int:
        """Write one record; returns the bytes it took. Raises OSError (disk full) having written nothing."""
        if self._writer is None or self._writing >= self.segment_bytes:
            self._rotate(self._newest + 1)
        assert self._writer is not None
        record = _RECORD.pack(len(body), zlib.crc32(body)) + body
        number = max(self.ends)
        try:
            written = os.write(self._writer, record)
            if written != len(record):
                raise OSError(28, "short write to the spool (disk full?)")
        except OSError:
            self._undo(number)
            raise
        self._writing += len(record)
        self.ends[number] = self._writing
        self.pending += 1
        self._resized(len(record))
        if time.monotonic() - self._synced > _FSYNC_EVERY:
            os.fsync(self._writer)
            self._synced = time.monotonic()
        return len(record)

    def put_first(self, bodies: list[bytes], mark: int = 0) -> Position:
        """Records older than everything spooled (actions in memory when the pool went down or at
        shutdown). Returns the position after the first `mark` of them."""
        number = min(self.ends, default=_FIRST) - 1
        position, starts = self._position, dict(self._starts)
        if self._position[0] in self.ends and self._position[1] > len(MAGIC):
            self._starts[self._position[0]] = self._position[1]  # its read part stays read
        path = self.directory / _name(number)
        records = [_RECORD.pack(len(b), zlib.crc32(b)) + b for b in bodies]
        data = MAGIC + b"".join(records)
        self._position = (number, len(MAGIC))
        try:
            with open(path, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            self._save_position()  # must be on disk: a position past this segment would delete it
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            self._position, self._starts = position, starts
            raise
        self.unsaved = False
        self.ends[number] = len(data)
        self.pending += len(bodies)
        self._resized(len(data))
        return number, len(MAGIC) + sum(len(r) for r in records[:mark])

    def _rotate(self, number: int) -> None:
        self._close_writer()
        fd = os.open(self.directory / _name(number), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            os.write(fd, MAGIC)
        except OSError:
            os.close(fd)
            (self.directory / _name(number)).unlink(missing_ok=True)
            raise
        self._writer, self._writing = fd, len(MAGIC)
        self._newest = max(self._newest, number)
        self.ends[number] = len(MAGIC)
        self._resized(len(MAGIC))
        if self._position == (0, 0):
            self._position = (number, len(MAGIC))

    def _undo(self, number: int) -> None:
        """Cut a half-written record off, so no torn record stays behind a failed write."""
        try:
            assert self._writer is not None
            os.ftruncate(self._writer, self._writing)
        except OSError:
            self._close_writer()  # could not cut it: never append to this segment again
            self.ends[number] = self._writing

    def _resized(self, delta: int) -> None:
        """The one place the spool's size changes, so the shared budget always matches the files."""
        self.bytes += delta
        if self.budget is not None:
            if delta > 0:
                self.budget.charge(delta)
            else:
                self.budget.release(-delta)

    def close(self) -> None:
        """Stop writing; the files stay (the next open finds them) and leave the budget meanwhile."""
        self._close_writer()
        if self.budget is not None:
            self.budget.release(self.bytes)
            self.budget = None  # its pool stopped: the next start opens a new LaneSpool, which counts the files again

    def _close_writer(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._writer)
            os.close(self._writer)
            self._writer = None

    # -- reading -------------------------------------------------------------

    def read(self, limit: int) -> tuple[list[bytes], Position]:
        """Up to `limit` records from the read position, and the position after them."""
        bodies: list[bytes] = []
        segment, offset = self._position
        for number in sorted(n for n in self.ends if n >= segment):
            if number != segment:
                offset = self._starts.get(number, len(MAGIC))
            end = self.ends[number]
            if offset >= end:
                segment = number
                continue
            with open(self.directory / _name(number), "rb") as file:
                file.seek(offset)
                data = file.read(end - offset)
            at = 0
            while at < len(data) and len(bodies) < limit:
                length, _ = _RECORD.unpack_from(data, at)
                bodies.append(data[at + _RECORD.size : at + _RECORD.size + length])
                at += _RECORD.size + length
            segment, offset = number, offset + at
            if len(bodies) >= limit:
                break
        return bodies, (segment, offset)

    def ack(self, position: Position, count: int) -> int:
        """The records up to `position` are written: move on, delete used segments; returns bytes freed."""
        self._position = position
        self.pending = max(0, self.pending - count)  # records dropped while in flight are not counted twice
        freed = 0
        current = max(self.ends) if self._writer is not None else None
        for number in sorted(self.ends):
            finished = number < position[0] or (number == position[0] and position[1] >= self.ends[number])
            if not finished:
                break
            if number == current:
                self._close_writer()  # read to its end: the next append starts a new segment (frees a full disk)
            freed += self._delete(number)
        if not self.ends:
            self._position = (0, 0)
        self.save_position()
        return freed

    def drop_oldest(self, keep_reading: bool = False) -> tuple[list[bytes], int]:
        """Remove the oldest segment (overflow policy drop_oldest): its unread records and bytes freed.

        `keep_reading`: records of the segment being read are in flight (read, not yet written):
        that segment stays. Returns ([], 0) when there is nothing to drop.
        """
        candidates = sorted(n for n in self.ends if not (keep_reading and n == self._position[0]))
        if not candidates:
            return [], 0
        number = candidates[0]
        if self._writer is not None and number == max(self.ends):
            self._close_writer()  # the segment being written: finish it, the next write starts another
        bodies, _ = LaneSpool._records(self.directory / _name(number), self._start(number), self.ends[number])
        freed = self._delete(number)
        self.pending -= len(bodies)
        if number == self._position[0]:
            following = [n for n in self.ends if n > number]
            self._position = (min(following), self._starts.get(min(following), len(MAGIC))) if following else (0, 0)
        self.save_position()
        return bodies, freed

    @staticmethod
    def _records(path: Path, start: int, end: int) -> tuple[list[bytes], int]:
        data = path.read_bytes()[:end]
        bodies, offset = [], start
        while offset < len(data):
            length, _ = _RECORD.unpack_from(data, offset)
            bodies.append(data[offset + _RECORD.size : offset + _RECORD.size + length])
            offset += _RECORD.size + length
        return bodies, offset

    def _delete(self, number: int) -> int:
        path = self.directory / _name(number)
        size = path.stat().st_size if path.exists() else 0
        path.unlink(missing_ok=True)
        del self.ends[number]
        self._starts.pop(number, None)
        self._resized(-size)
        return size

    def save_position(self) -> bool:
        """Save the read position; on a full disk report it and keep `unsaved` (saved again later)."""
        try:
            self._save_position()
        except OSError as exc:
            if not self.unsaved:
                self.report(f"{self.directory}: cannot save the read position ({exc}); saved again later")
            self.unsaved = True
            return False
        self.unsaved = False
        return True

    def _save_position(self) -> None:
        temporary = self.directory / "position.tmp"
        lines = [self._position, *sorted(self._starts.items())]
        temporary.write_text("".join(f"{segment} {offset}\n" for segment, offset in lines))
        os.replace(temporary, self.directory / "position")


def _record_at(data: bytes, offset: int) -> bytes | None:
    if offset + _RECORD.size > len(data):
        return None
    length, checksum = _RECORD.unpack_from(data, offset)
    start = offset + _RECORD.size
    if length > _MAX_BODY or start + length > len(data):
        return None
    body = data[start : start + length]
    return body if zlib.crc32(body) == checksum else None
