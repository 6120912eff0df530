"""Log lines: JSON when asked, secrets never printed."""

from __future__ import annotations

import json
import logging

import pytest

from bridge import logs


def test_json_lines_and_scrubbed_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("info", "json", secrets=["hunter2"])
    try:
        logging.getLogger("bridge.test").warning("connecting with %s to %s", "hunter2", "redis")
        line = capsys.readouterr().err.strip()
        entry = json.loads(line)
        assert entry["level"] == "warning"
        assert entry["logger"] == "bridge.test"
        assert entry["msg"] == "connecting with *** to redis"
        assert "hunter2" not in line
    finally:
        logging.getLogger().handlers.clear()
