"""Log lines: JSON when asked, secrets never printed."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import pytest

from bridge.ops import logs


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


@pytest.fixture
def text_log(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], str]]:
    """Log lines as `run` writes them (set up on first read: stderr is captured per test phase)."""
    logging.getLogger().handlers.clear()
    lines: list[str] = []

    def read() -> str:
        lines.append(capsys.readouterr().err)
        return lines[-1]

    yield read
    logging.getLogger().handlers.clear()


def setup_text_log() -> None:
    logs.setup("info", "text", secrets=["hookbridge", "s3cr3t pass"])


def test_a_secret_equal_to_a_name_leaves_the_name_readable(text_log: Callable[[], str]) -> None:
    """A regression: with PGPASSWORD=hookbridge the node name and the program name stay as they are."""
    setup_text_log()
    log = logging.getLogger("bridge.app")
    log.info("hookbridge %s running: %d rules, pools %s", "hookbridge@127.0.0.1", 3, "pgsql.pool1")
    log.warning('password authentication failed for user "%s"', "alice")
    err = text_log()
    assert "bridge.app: hookbridge hookbridge@127.0.0.1 running: 3 rules, pools pgsql.pool1\n" in err
    assert 'password authentication failed for user "alice"' in err
    assert "***" not in err


@pytest.mark.parametrize(
    ("printed", "shown"),
    [
        ("connect to redis://app:pw-9x@10.0.0.2:6379/0 failed", "connect to redis://app:***@10.0.0.2:6379/0 failed"),
        ("dsn postgresql://u:p@ss@db/mqtt", "dsn postgresql://u:***@db/mqtt"),
        ("host=db user=u password=pw-9x dbname=mqtt", "host=db user=u password=*** dbname=mqtt"),
        ('{"api_secret": "k3y-9x", "user": "u"}', '{"api_secret": "***", "user": "u"}'),
        ("PGPASSWORD=pw-9x psql", "PGPASSWORD=*** psql"),
        ("password 'hookbridge' is wrong", "password '***' is wrong"),
        ("auth=hookbridge;", "auth=***;"),
        ("with 's3cr3t pass' as the password", "with '***' as the password"),
        ("password: too short", "password: too short"),  # a message about a password, not one
        ("node hookbridge@127.0.0.1 and mqtt:client:bob", "node hookbridge@127.0.0.1 and mqtt:client:bob"),
    ],
)
def test_secrets_printed_as_values_are_masked(text_log: Callable[[], str], printed: str, shown: str) -> None:
    setup_text_log()
    logging.getLogger("bridge.test").error("%s", printed)
    assert text_log().rstrip("\n").endswith(f"bridge.test: {shown}")


def test_a_traceback_is_masked_too(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("info", "json", secrets=["hunter2"])
    try:
        try:
            raise ConnectionError("cannot reach redis://u:hunter2@db:6379 (password=hunter2)")
        except ConnectionError:
            logging.getLogger("bridge.test").exception("pool down")
        line = capsys.readouterr().err
        assert "hunter2" not in line
        assert "redis://u:***@db:6379 (password=***)" in json.loads(line)["exc"]
    finally:
        logging.getLogger().handlers.clear()
