"""`hookbridge import-emqx`: EMQX 4.4 Enterprise backend files (tests/fixtures/emqx44, written from
its backend pages) become a config and rules that `hookbridge check` accepts; bad keys are refused
at their path:line:col; a second run changes nothing; a changed output is not overwritten."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.emqx44.importer import FILES
from support.services import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "emqx44" / "etc" / "plugins"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the generated spool.dir (data/spool) is relative


def _import(source: Path, out: Path, *extra: str) -> int:
    return main(["import-emqx", str(source), "--out", str(out), *extra])


@pytest.mark.parametrize("db", sorted(FILES))
def test_each_backend_file_imports_and_checks(db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "etc" / "plugins"
    source.mkdir(parents=True)
    shutil.copy(FIXTURES / FILES[db], source)
    assert _import(tmp_path / "etc", tmp_path / "out") == 0
    assert sorted(p.name for p in (tmp_path / "out" / "rules").iterdir()) == [f"{db}.conf"]
    capsys.readouterr()
    config, rules = tmp_path / "out" / "config" / "bridge.conf", tmp_path / "out" / "rules"
    assert main(["check", "-c", str(config), "-r", str(rules)]) == 0
    assert f"pools {db}.pool1" in capsys.readouterr().out


def test_all_five_at_once_with_their_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _import(FIXTURES, tmp_path / "out") == 0
    err = capsys.readouterr().err.splitlines()
    cassa, redis = FIXTURES / FILES["cassa"], FIXTURES / FILES["redis"]
    assert err == [
        f"{cassa}:10:1: warning: the driver's log level is hookbridge's log.level (EMQX's per-pool `logger` is not honoured)",
        f"{cassa}:16:1: warning: EMQX's session.created is hookbridge's client.connected here",
        f"{cassa}:16:68: warning: EMQX's on_subscription_lookup is hookbridge's on_subscribe_lookup",
        f"{redis}:11:1: warning: hookbridge does not subscribe to a Redis channel (EMQX's `channel` is not honoured)",
    ]
    out = tmp_path / "out"
    config = (out / "config" / "bridge.conf").read_text()
    assert "backend.mongo.pool1.pool_size = 8" in config  # c_pool_size
    assert "backend.cassa.pool1.pool_size = 8" in config  # ecql size
    assert "backend.mysql.pool1.user = root" in config
    assert "## emqx_backend_mongo.conf:16: w_mode = safe: honoured" in config
    pgsql = (out / "rules" / "pgsql.conf").read_text()
    # the backend-wide max_returned_count / time_range reach the fetch rule that sets neither
    assert '"offline_opts": {"max_returned_count": 500, "time_range": "2h"}}' in pgsql
    redis_rules = (out / "rules" / "redis.conf").read_text()
    assert (
        '{"topic": "#", "action": {"function": "on_message_publish"}, "pool": "pool1", "expired_time": 3600}'
        in redis_rules
    )
    cassa_rules = (out / "rules" / "cassa.conf").read_text()
    assert 'backend.cassa.hook.client.connected.2 = {"action": {"function": "on_subscribe_lookup"}' in cassa_rules
    assert main(["check", "-c", str(out / "config" / "bridge.conf"), "-r", str(out / "rules")]) == 0


def test_idempotent_and_refuses_to_overwrite_a_changed_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _import(FIXTURES, out) == 0
    before = {p: p.read_text() for p in out.rglob("*.conf")}
    capsys.readouterr()
    assert _import(FIXTURES, out) == 0
    assert capsys.readouterr().out.count("unchanged ") == len(before)
    assert {p: p.read_text() for p in out.rglob("*.conf")} == before

    edited = out / "rules" / "redis.conf"
    edited.write_text(edited.read_text() + "# mine\n")
    assert _import(FIXTURES, out) == 2
    assert f"{edited}: exists and differs" in capsys.readouterr().err
    assert edited.read_text().endswith("# mine\n")
    assert _import(FIXTURES, out, "--force") == 0
    assert edited.read_text() == before[edited]


BAD_REDIS = """\
backend.redis.pool1.type = galaxy
backend.redis.pool1.server = 127.0.0.1:6379
backend.redis.pool1.pool_size = lots
backend.redis.pool1.max_overflow = 3
backend.redis.server = 127.0.0.1:26378
backend.redis.msg.expired_after = soon
backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connectd"}, "pool": "pool1"}
backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, "pool": "pool9"}
"""
BAD_MONGO = """\
backend.mongo.pool1.type = replica
backend.mongo.pool1.srv_record = true
backend.mongo.pool1.w_mode = unsafe
backend.mongo.pool1.r_mode = slave_ok
backend.mongo.topology.pool_size = 1
"""


def test_every_problem_at_its_place_and_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "plugins"
    source.mkdir()
    redis, mongo = source / FILES["redis"], source / FILES["mongo"]
    redis.write_text(BAD_REDIS)
    mongo.write_text(BAD_MONGO)
    assert _import(source, tmp_path / "out") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "9 problems found; nothing written"
    got = "\n".join(err)
    expected = [
        f"{mongo}:1:28: backend.mongo.pool1.type: expected one of single, rs, sharded, unknown, got 'replica'",
        f"{mongo}:2:34: SRV records are not supported",
        f"{mongo}:3:1: warning: hookbridge always writes safe",
        f"{mongo}:4:1: warning: hookbridge reads from the primary",
        f"{mongo}:5:1: warning: pymongo sizes and times its own topology",
        f"{redis}:1:28: backend.redis.pool1.type: expected one of single, sentinel, cluster, got 'galaxy'",
        f"{redis}:3:33: backend.redis.pool1.pool_size: expected an integer",
        f"{redis}:4:1: unknown EMQX 4.4 redis pool key 'max_overflow'",
        f"{redis}:5:1: backend.redis.server names no pool, and backend.redis.pool1.server (line 2) already sets",
        f"{redis}:6:35: expected seconds, got 'soon'",
        f"{redis}:7:65: unknown function 'on_client_connectd'",
        f"{redis}:8:109: unknown redis pool 'pool9'",
    ]
    for start in expected:
        assert any(line.startswith(start) for line in err), (start, got)
    assert not (tmp_path / "out").exists()


def _etc_with_redis(tmp_path: Path, emqx_conf: str | None) -> Path:
    """An EMQX etc/ folder: plugins/emqx_backend_redis.conf and, when given, emqx.conf."""
    plugins = tmp_path / "etc" / "plugins"
    plugins.mkdir(parents=True)
    shutil.copy(FIXTURES / FILES["redis"], plugins)
    if emqx_conf is not None:
        (tmp_path / "etc" / "emqx.conf").write_text(emqx_conf, encoding="utf-8")
    return plugins


@pytest.mark.parametrize(
    ("emqx_conf", "written", "seconds"),
    [
        (None, "broker.persistent_session_expiry = 2h", 7200.0),  # no emqx.conf: EMQX's default
        ("node.name = emqx@127.0.0.1\n", "broker.persistent_session_expiry = 2h", 7200.0),  # key absent
        (
            "zone.external.session_expiry_interval = 2h\nzone.internal.session_expiry_interval = 1d\n"
            "zone.external.session_expiry_interval = 30m\n",  # the last one wins, the internal zone is not the devices'
            "broker.persistent_session_expiry = 30m",
            1800.0,
        ),
    ],
)
def test_the_session_lifetime_of_emqxs_external_zone_is_kept(
    emqx_conf: str | None, written: str, seconds: float, tmp_path: Path
) -> None:
    """EMQX ended a 3.1.1 clean-session-0 session 2h (zone.external.session_expiry_interval) after its
    client went; hookbridge's own default keeps it for ever. The import keeps EMQX's lifetime."""
    from bridge.conf.config import parse_config
    from bridge.emqx44.importer import convert

    for source in (_etc_with_redis(tmp_path, emqx_conf), tmp_path / "etc"):  # pointed at plugins/ or etc/
        result = convert(source, "config/bridge.conf", "rules")
        assert result.errors == [], [str(p) for p in result.problems]
        config = result.files["config/bridge.conf"]
        assert written in config.splitlines()
        assert parse_config("bridge.conf", config)["broker.persistent_session_expiry"] == seconds
        assert (emqx_conf is not None) == (tmp_path / "etc" / "emqx.conf" in result.sources)


def test_a_session_lifetime_hookbridge_cannot_read_is_an_error_at_its_emqx_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _etc_with_redis(tmp_path, "## zones\nzone.external.session_expiry_interval = 2w\n")
    assert _import(tmp_path / "etc", tmp_path / "out") != 0
    err = capsys.readouterr().err
    assert f"{tmp_path / 'etc' / 'emqx.conf'}:2:41: " in err and "'2w'" in err
    assert not (tmp_path / "out").exists()  # nothing written
