"""deploy/hookbridge.service, the unit for a plain VM (docs/operations.md, "Under systemd"): what
systemd itself says of it (`systemd-analyze verify`, and `security --offline` for its hardening),
and what it does with the bridge's signals and exit codes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.services import ROOT

UNIT = ROOT / "deploy" / "hookbridge.service"
INSTALLED = "/opt/hookbridge/bin/hookbridge"  # where the unit expects the virtualenv's hookbridge

needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")


def settings() -> dict[str, list[str]]:
    """Every `Key=value` of the unit, a key that repeats (ExecReload) keeping each value in order."""
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        match = re.match(r"^(\w+)=(.*)$", line)
        if match:
            found.setdefault(match[1], []).append(match[2])
    return found


def analyzable(tmp_path: Path, text: str) -> Path:
    """The unit with its ExecStart pointing at a hookbridge that exists here (verify checks that)."""
    unit = tmp_path / "hookbridge.service"
    unit.write_text(text.replace(INSTALLED, str(Path(sys.executable).parent / "hookbridge")))
    return unit


def verify(unit: Path) -> str:
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}".strip()


@needs_systemd
def test_systemd_verifies_the_unit_without_a_warning(tmp_path: Path) -> None:
    assert verify(analyzable(tmp_path, UNIT.read_text())) == "exit 0"


@needs_systemd
def test_the_verify_check_catches_a_mistake(tmp_path: Path) -> None:
    broken = UNIT.read_text().replace("Restart=on-failure", "Restart=sometimes").replace("KillSignal", "KillSignl")
    said = verify(analyzable(tmp_path, broken))
    assert "Failed to parse service restart specifier" in said and "Unknown key 'KillSignl'" in said


@needs_systemd
def test_the_hardening_is_what_systemd_rates_ok(tmp_path: Path) -> None:
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(analyzable(tmp_path, UNIT.read_text()))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", done.stdout)
    assert level is not None, done.stdout + done.stderr
    # systemd's scale: 0-10, "OK" below 2.0; an unhardened service rates 9.6 UNSAFE
    assert float(level[1]) < 2.0 and level[2] == "OK", done.stdout


def test_reload_stop_and_restart_are_the_bridges_own() -> None:
    unit = settings()
    start = unit["ExecStart"][0].split()
    assert start[:2] == [INSTALLED, "run"]
    assert unit["ExecReload"] == [f"{INSTALLED} check {' '.join(start[2:])}", "/bin/kill -HUP $MAINPID"]
    # SIGTERM is the bridge's graceful drain (docs/operations.md#running), given time to finish
    assert unit["KillSignal"] == ["SIGTERM"] and unit["KillMode"] == ["mixed"]
    assert int(unit["TimeoutStopSec"][0]) > 10  # the drain writes queued actions for up to 10 s
    assert unit["Restart"] == ["on-failure"] and unit["RestartPreventExitStatus"] == ["2"]  # 2: config error
    assert unit["User"] == ["hookbridge"] and unit["WorkingDirectory"] == ["/var/lib/hookbridge"]
    assert unit["StateDirectory"] == ["hookbridge"] and unit["ProtectSystem"] == ["strict"]
    assert unit["NoNewPrivileges"] == ["yes"] and unit["CapabilityBoundingSet"] == [""]
