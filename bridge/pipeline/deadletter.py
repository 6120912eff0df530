"""The dead-letter store: actions that failed for good, kept on disk instead of dropped.

An action fails for good when the database refuses it for a reason that retrying will not
change (a constraint, a wrong type, a statement error). Its message was acknowledged by then
(docs/architecture.md#acknowledged-means-kept), so it is written here, one JSON line per action,
to `<deadletter.dir>/<pool>.jsonl`:
when it failed, the pool, the rule (id and `path:line`), the reason, and the event with its
payload in base64 (docs/operations.md, "Dead letters", says how to read and replay it).

The files together stay under `deadletter.max_bytes`; past it a failed action is logged and
counted as dropped (never silently lost), and the files are left for the operator to move away.
Each line is one `write` to a file opened for appending, so several workers can share a file.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from bridge.backend import Job
from bridge.ops.metrics import Metrics

log = logging.getLogger(__name__)


def dead_letter_line(job: Job, reason: BaseException, now: float) -> bytes:
    """One JSON line for a failed action (the event's payload in base64)."""
    event: dict[str, Any] = {"hookpoint": str(job.event.hookpoint)}
    for item in fields(job.event):
        value = getattr(job.event, item.name)
        if isinstance(value, bytes):
            event[f"{item.name}_base64"] = base64.b64encode(value).decode("ascii")
        elif isinstance(value, frozenset | tuple):
            event[item.name] = sorted(value) if isinstance(value, frozenset) else list(value)
        else:
            event[item.name] = value
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
        "pool": job.rule.pool,
        "rule": job.rule.id,
        "where": job.rule.where,
        "reason": f"{type(reason).__name__}: {reason}",
        "event": event,
    }
    return json.dumps(record, default=str, ensure_ascii=False).encode() + b"\n"


class DeadLetters:
    """Appends failed actions to the pool's file: `add` is a runner failure hook (`bridge/pipeline/runner.py`)."""

    def __init__(self, directory: Path, max_bytes: int, metrics: Metrics) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.metrics = metrics
        self._used: int | None = None  # bytes of the files, read once

    def add(self, job: Job, reason: BaseException) -> None:
        line = dead_letter_line(job, reason, time.time())
        try:
            if self.used() + len(line) > self.max_bytes:
                raise OSError(f"deadletter.max_bytes ({self.max_bytes} bytes) reached")
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory / f"{job.rule.pool}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError as exc:
            self.metrics.count(job.rule.id, "dropped")
            log.error(
                "rule %s (%s): failed action not kept as a dead letter (%s): %s",
                job.rule.id,
                job.rule.where,
                exc,
                reason,
            )
            return
        self._used = self.used() + len(line)
        self.metrics.count(job.rule.id, "deadlettered")

    def used(self) -> int:
        if self._used is None:
            files = self.directory.glob("*.jsonl") if self.directory.is_dir() else ()
            self._used = sum(path.stat().st_size for path in files)
        return self._used
