"""The switch from EMQX 4.4 as a user makes it, for the migration tests: `hookbridge import-emqx` on
one of EMQX's backend files (tests/fixtures/emqx44, pointed at a test server), `hookbridge
migrate-emqx44` with the config it wrote, then a bridge started from that config and rules."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bridge.app import Bridge, Paths
from bridge.cli import main
from support.services import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "emqx44" / "etc" / "plugins"


def import_emqx(tmp_path: Path, name: str, replace: dict[str, str]) -> Paths:
    """import-emqx of the fixture file `name` with `replace` applied (each must be in it)."""
    source = tmp_path / "emqx" / "etc" / "plugins"
    source.mkdir(parents=True)
    text = (FIXTURES / name).read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    (source / name).write_text(text)
    out = tmp_path / "hookbridge"
    assert main(["import-emqx", str(tmp_path / "emqx"), "--out", str(out)]) == 0
    paths = Paths(out / "config" / "bridge.conf", out / "rules")
    assert main(["check", "-c", str(paths.config), "-r", str(paths.rules)]) == 0
    return paths


async def migrate(paths: Paths, pool: str, *options: str) -> int:
    return await asyncio.to_thread(main, ["migrate-emqx44", "-c", str(paths.config), "--pool", pool, *options])


@asynccontextmanager
async def imported_bridge(paths: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bridge]:
    """A bridge of the imported config; its listeners and spool through the variables it reads."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOOKBRIDGE_MQTT_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("HOOKBRIDGE_METRICS_LISTEN", "off")
    monkeypatch.setenv("HOOKBRIDGE_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("HOOKBRIDGE_DEADLETTER_DIR", str(tmp_path / "deadletter"))
    bridge = Bridge.load(paths)
    await bridge.start()
    try:
        yield bridge
    finally:
        await bridge.stop(drain_timeout=5)
