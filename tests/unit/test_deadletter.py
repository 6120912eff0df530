"""The dead-letter store (bridge/pipeline/deadletter.py): one JSON line per failed action, the payload in
base64, appended per pool; past `deadletter.max_bytes` an action is counted as dropped, not kept."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from bridge.backend import Job, PermanentError
from bridge.ops.metrics import Metrics
from bridge.pipeline.deadletter import DeadLetters
from support.fake_pool import PUBLISH_RULE, publish, rules


def test_failed_actions_are_appended_and_bounded(tmp_path: Path) -> None:
    [rule] = rules(PUBLISH_RULE)
    metrics = Metrics()
    letters = DeadLetters(tmp_path / "dl", 1000, metrics)
    assert not (tmp_path / "dl").exists()  # nothing until a failure (the runner's failure_hooks)
    letters.add(Job(rule, publish(topic="t/1", payload=b"\x00\xff bytes")), PermanentError("refused"))
    [line] = (tmp_path / "dl" / "redis.pool1.jsonl").read_text().splitlines()
    letter = json.loads(line)
    assert (letter["rule"], letter["pool"], letter["reason"]) == (rule.id, "redis.pool1", "PermanentError: refused")
    assert base64.b64decode(letter["event"]["payload_base64"]) == b"\x00\xff bytes"
    assert letter["event"]["topic"] == "t/1" and letter["event"]["hookpoint"] == "message.publish"
    assert metrics.rules[rule.id]["deadlettered"] == 1
    letters.add(Job(rule, publish(topic="t/2", payload=b"x" * 2000)), PermanentError("refused"))  # over the bound
    assert len((tmp_path / "dl" / "redis.pool1.jsonl").read_text().splitlines()) == 1
    assert metrics.rules[rule.id]["dropped"] == 1 and metrics.rules[rule.id]["deadlettered"] == 1
    again = DeadLetters(tmp_path / "dl", 1000, Metrics())  # a restart counts what the files hold
    assert again.used() == len(line) + 1
