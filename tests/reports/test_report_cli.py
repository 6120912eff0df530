"""`hookbridge report`'s errors: each one line a person can act on, before any Spark starts."""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path

import pytest

from bridge.cli import main
from spark_analytics.window import parse_window
from support.conf import BASE_CONFIG
from support.services import start_postgres

NOW = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)


def report(tmp_path: Path, pools: str, *args: str) -> list[str]:
    (tmp_path / "bridge.conf").write_text(BASE_CONFIG + pools)
    return ["report", *args, "-c", str(tmp_path / "bridge.conf"), "--out", str(tmp_path / "out")]


def test_windows() -> None:
    window = parse_window("-24h", "now", NOW)
    assert (window.start, window.end) == (NOW - dt.timedelta(hours=24), NOW)
    window = parse_window("2026-05-01T02:00:00+02:00", "2026-05-01T01:30:00Z", NOW)
    assert window.start == dt.datetime(2026, 5, 1, 0, 0, tzinfo=dt.UTC) and window.seconds == 5400
    assert parse_window("-90m", "-30m", NOW).seconds == 3600
    assert parse_window("2026-04-30T23:00:00Z", "2026-05-01T01:00:00Z", NOW).days() == [
        dt.date(2026, 4, 30),
        dt.date(2026, 5, 1),
    ]


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("-1h", "-2h", "report sessions: empty window: --from '-1h' is not before --to '-2h'"),
        ("yesterday", "now", "report sessions: --from 'yesterday': not a time; give ISO 8601 with an offset"),
        ("2026-05-01T00:00:00", "now", "report sessions: --from '2026-05-01T00:00:00': add a UTC offset (Z or +02:00)"),
    ],
)
def test_bad_window(tmp_path: Path, capsys: pytest.CaptureFixture[str], start: str, end: str, message: str) -> None:
    args = report(tmp_path, "", "sessions", "--source", "pgsql.pool1", "--from", start, "--to", end)
    assert main(args) == 2
    assert capsys.readouterr().err.startswith(message)


def test_unknown_and_unsupported_pools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pools = "backend.redis.r1.server = 127.0.0.1:6391\nbackend.pgsql.p1.server = 127.0.0.1:5439\n"
    assert main(report(tmp_path, pools, "traffic", "--source", "pgsql.pool1", "--from", "-1h")) == 2
    assert "no pool 'pgsql.pool1' to read (reportable pools: pgsql.p1)" in capsys.readouterr().err
    assert main(report(tmp_path, pools, "traffic", "--source", "redis.r1", "--from", "-1h")) == 2
    assert "reports read PostgreSQL, MySQL, Cassandra or MongoDB pools, not redis" in capsys.readouterr().err


def test_unreachable_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pools = "backend.pgsql.pool1.server = 127.0.0.1:1\n"
    assert main(report(tmp_path, pools, "sessions", "--source", "pgsql.pool1", "--from", "-1h")) == 1
    progress, err = capsys.readouterr().err.splitlines()  # the step it was at, then the error
    assert progress == "[1/4] check pgsql.pool1 (mqtt_event_log) ..."
    assert err.startswith("report sessions: source pgsql.pool1 (127.0.0.1:1/mqtt) is not reachable: ")


def test_missing_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start_postgres(5439)
    pools = (
        "backend.pgsql.pool1.server = 127.0.0.1:5439\nbackend.pgsql.pool1.username = hookbridge\n"
        "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = postgres\n"
    )
    assert main(report(tmp_path, pools, "traffic", "--source", "pgsql.pool1", "--from", "-1h")) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "report traffic: source pgsql.pool1 (127.0.0.1:5439/postgres) has no table mqtt_event_log: bind on_event_log "
        "in the rules (or run `hookbridge schema --pool pgsql.pool1 --apply`)"
    )


def test_without_pyspark_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    assert main(report(tmp_path, "", "sessions", "--source", "pgsql.pool1", "--from", "-1h")) == 2
    assert "pip install 'hookbridge[spark]'" in capsys.readouterr().err
