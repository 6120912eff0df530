"""Logging to stderr, one line per event, text or JSON; secrets redacted (bridge/ops/redact.py)."""

from __future__ import annotations

import json
import logging
import sys
import time

from bridge.ops.redact import MASK, Redactor


class _Redact(logging.Filter):
    """Formats the message once with its secret arguments masked, then masks secrets printed as values."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(MASK if self.redactor.is_secret(arg) else arg for arg in args)
        elif isinstance(args, dict):
            record.args = {key: MASK if self.redactor.is_secret(arg) else arg for key, arg in args.items()}
        record.msg, record.args = self.redactor.text(record.getMessage()), None
        return True


class _Text(logging.Formatter):
    def __init__(self, redactor: Redactor, process: str = "") -> None:
        # `process`: which worker of `run --workers N` wrote the line ("worker-1"); "" for one process
        tag = f"{process} " if process else ""
        super().__init__(f"%(asctime)s %(levelname)s {tag}%(name)s: %(message)s")
        self.redactor = redactor
        self.process = process

    def formatException(self, ei: logging._SysExcInfoType) -> str:  # tracebacks quote error texts
        return self.redactor.text(super().formatException(ei))


class _Json(_Text):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if self.process:
            entry["process"] = self.process
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup(
    level: str = "info",
    fmt: str = "text",
    secrets: list[str] | None = None,
    redactor: Redactor | None = None,
    process: str = "",
) -> None:
    """Log to stderr; `redactor` (or one made from `secrets`) masks every secret printed as a value.

    `process` names the process in every line (`worker-1`, `supervisor`) when there are several."""
    redactor = redactor or Redactor(secrets or [])
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Redact(redactor))
    handler.setFormatter(_Json(redactor, process) if fmt == "json" else _Text(redactor, process))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
