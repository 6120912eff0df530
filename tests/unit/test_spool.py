"""The spool's file format on real files: order, acknowledgement, restart, torn tails, full disks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from bridge.events import MessageAcked, MessagePublish, SessionSubscribed
from bridge.pipeline.spool import LaneSpool, decode, encode
from support.services import ROOT


def opened(directory: Path, problems: list[str] | None = None, segment_bytes: int = 1 << 20) -> LaneSpool:
    spool = LaneSpool(directory, segment_bytes, (problems if problems is not None else []).append)
    spool.open()
    return spool


def read_all(spool: LaneSpool, limit: int = 1000) -> list[bytes]:
    bodies, position = spool.read(limit)
    spool.ack(position, len(bodies))
    return bodies


def test_records_come_back_in_order_across_segments_and_restarts(tmp_path: Path) -> None:
    spool = opened(tmp_path, segment_bytes=100)  # a few records per segment
    bodies = [f"record {n}".encode() * (n % 5 + 1) for n in range(50)]
    for body in bodies[:30]:
        spool.append(body)
    first, position = spool.read(10)
    assert first == bodies[:10]
    spool.ack(position, 10)
    spool.close()

    again = opened(tmp_path, segment_bytes=100)  # a restart: reading resumes after the acknowledged ones
    assert again.pending == 20
    for body in bodies[30:]:
        again.append(body)
    assert read_all(again) == bodies[10:]
    assert again.pending == 0
    # Used segments are deleted, the one being written too once it is read to its end: a full disk
    # gets its space back as soon as everything spooled is written.
    assert list(tmp_path.glob("*.seg")) == []
    again.append(b"next")
    assert read_all(opened(tmp_path)) == [b"next"]


def test_unacknowledged_records_are_read_again_after_a_crash(tmp_path: Path) -> None:
    spool = opened(tmp_path)
    for n in range(5):
        spool.append(b"%d" % n)
    assert spool.read(3)[0] == [b"0", b"1", b"2"]  # read, never acknowledged: the writer crashed
    assert read_all(opened(tmp_path)) == [b"0", b"1", b"2", b"3", b"4"]


def test_a_torn_tail_keeps_every_record_before_it_and_is_reported(tmp_path: Path) -> None:
    spool = opened(tmp_path)
    for n in range(10):
        spool.append(b"payload %d" % n)
    spool.close()
    segment = next(tmp_path.glob("*.seg"))
    data = segment.read_bytes()
    segment.write_bytes(data[:-5])  # the last record cut in the middle
    problems: list[str] = []
    again = opened(tmp_path, problems)
    assert again.pending == 9
    assert read_all(again) == [b"payload %d" % n for n in range(9)]
    assert len(problems) == 1 and "torn or corrupt record" in problems[0]
    again.append(b"after the tear")  # a new segment: never appended behind a torn tail
    assert read_all(again) == [b"after the tear"]


def test_a_flipped_byte_is_caught_by_the_checksum(tmp_path: Path) -> None:
    spool = opened(tmp_path)
    for n in range(3):
        spool.append(b"record %d" % n)
    spool.close()
    segment = next(tmp_path.glob("*.seg"))
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF  # inside the last record's body
    segment.write_bytes(bytes(data))
    problems: list[str] = []
    assert read_all(opened(tmp_path, problems)) == [b"record 0", b"record 1"]
    assert problems


def test_put_first_goes_before_everything_not_yet_read(tmp_path: Path) -> None:
    spool = opened(tmp_path)
    for n in range(6):
        spool.append(b"new %d" % n)
    read, position = spool.read(2)
    assert read == [b"new 0", b"new 1"]
    spool.ack(position, 2)  # written
    spool.put_first([b"old a", b"old b"])  # what was still in memory at shutdown
    spool.close()
    assert read_all(opened(tmp_path)) == [b"old a", b"old b", b"new 2", b"new 3", b"new 4", b"new 5"]


def test_drop_oldest_removes_the_oldest_segment(tmp_path: Path) -> None:
    spool = opened(tmp_path, segment_bytes=60)
    for n in range(12):
        spool.append(b"r%02d" % n + b"." * 20)
    dropped, freed = spool.drop_oldest()
    assert dropped and freed > 0
    remaining = read_all(spool)
    assert dropped + remaining == [b"r%02d" % n + b"." * 20 for n in range(12)]
    assert spool.pending == 0


def test_a_full_disk_fails_the_write_and_leaves_no_torn_record(tmp_path: Path) -> None:
    # A file-size limit (RLIMIT_FSIZE) stands in for a full disk: writes past it fail with EFBIG.
    script = textwrap.dedent(
        f"""
        import resource, sys
        sys.path[:0] = [{str(ROOT)!r}]
        from pathlib import Path
        from bridge.pipeline.spool import LaneSpool
        spool = LaneSpool(Path({str(tmp_path)!r}), 1 << 20, print)
        spool.open()
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        written = 0
        try:
            while True:
                spool.append(b"x" * 100)
                written += 1
        except OSError as exc:
            print("refused after", written, exc.errno)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    refused_after = int(out.split("refused after ")[1].split()[0])
    assert 30 < refused_after < 41  # 4096 bytes of 108-byte records, after the 8-byte header
    problems: list[str] = []
    again = opened(tmp_path, problems)
    assert read_all(again) == [b"x" * 100] * refused_after
    assert problems == []


def block_position_file(directory: Path) -> Path:
    """Make saving the read position fail with an OSError, as on a full disk."""
    blocker = directory / "position.tmp"
    blocker.mkdir()
    return blocker


def test_a_position_that_cannot_be_saved_is_reported_and_saved_later(tmp_path: Path) -> None:
    spool = opened(tmp_path, segment_bytes=60)
    for n in range(6):
        spool.append(b"r%d" % n + b"." * 20)
    blocker = block_position_file(tmp_path)
    problems: list[str] = []
    spool.report = problems.append
    _, position = spool.read(3)
    spool.ack(position, 3)  # does not raise: the records are written, only the position lags
    assert spool.unsaved and len(problems) == 1 and "cannot save the read position" in problems[0]
    assert read_all(spool) == [b"r%d" % n + b"." * 20 for n in range(3, 6)]
    assert len(problems) == 1  # reported once, not per record
    spool.append(b"later")  # a segment number never reused, though the position on disk names old ones
    blocker.rmdir()
    assert spool.save_position() and not spool.unsaved
    spool.close()
    assert read_all(opened(tmp_path)) == [b"later"]


def test_an_unsaved_position_replays_but_never_skips_after_a_crash(tmp_path: Path) -> None:
    spool = opened(tmp_path)
    spool.append(b"first")
    spool.append(b"second")
    assert read_all(spool, limit=1) == [b"first"]  # the position on disk: after "first"
    block_position_file(tmp_path)
    assert read_all(spool) == [b"second"]  # the segment is deleted; its position stays on disk
    spool.append(b"new record")  # a crash now: the old position must not skip into "new record"
    assert read_all(opened(tmp_path)) == [b"new record"]


def test_put_first_that_cannot_save_its_position_leaves_nothing_behind(tmp_path: Path) -> None:
    spool = opened(tmp_path)
    spool.append(b"spooled")
    block_position_file(tmp_path)
    try:
        spool.put_first([b"in memory"])
    except OSError:
        pass
    else:
        raise AssertionError("put_first must fail when its position cannot be saved")
    assert spool.pending == 1
    assert read_all(spool) == [b"spooled"]


def test_codec_round_trips_every_event_kind() -> None:
    events = [
        MessagePublish("0" * 32, "c\x00lient", None, "t/ü", 1, b"\x00\xff" * 1000, True, "n", "p:1", 1.5),
        SessionSubscribed(
            "c", "u", "n", "a/#", 2, 2.0, is_new=True, live_from_msgid="A" * 32, retained_sent=frozenset({"a/b"})
        ),
        MessageAcked("1" * 32, "c", None, "from", "t", 1, b"", False, "n", 3.0, filters=("t", "#")),
    ]
    for event in events:
        record = decode(encode("redis.message.publish.1", event, "CURSOR", 7, "proc"))
        assert (record.rule_id, record.event, record.cursor, record.seq, record.process) == (
            "redis.message.publish.1",
            event,
            "CURSOR",
            7,
            "proc",
        )
