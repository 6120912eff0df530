"""The third way in (README.md, "With pip, outside a checkout"), run as written: the wheel installed
into a fresh virtualenv outside the checkout, `hookbridge init`, `check` and `run` there against
the tests' real Redis, and the README's walkthrough through that bridge."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest
import redis as redis_sync

from support.installed import RunningBridge, bridge_environment, clean_environment, fresh_virtualenv, readme_walkthrough
from support.services import ROOT


def readme_pip_commands() -> list[str]:
    """The two lines of the README's pip block, without their comments."""
    after = (ROOT / "README.md").read_text().split("## With pip, outside a checkout", 1)[1]
    block = after.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh virtualenv where the README's `pip install hookbridge` installed the wheel."""
    install, _ = readme_pip_commands()
    assert install == "pip install hookbridge"
    bin_dir = fresh_virtualenv(tmp_path_factory.mktemp("wheel-venv") / "venv")
    # The package is not on an index here: the wheel built from this checkout stands in for its name.
    subprocess.run([str(bin_dir / "pip"), "install", "--quiet", str(wheel)], check=True, env=clean_environment(bin_dir))
    return bin_dir


def test_the_wheel_carries_the_shipped_config_rules_and_templates(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("config", "rules", "templates"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file():
                assert f"bridge/_shipped/{path.relative_to(ROOT)}" in names
    assert "spark_analytics/cli.py" in names and "bridge/api/static/index.html" in names


def test_readme_pip_way_in_init_check_run_and_the_walkthrough(
    installed: Path, tmp_path: Path, redis_db: redis_sync.Redis, redis_port: int
) -> None:
    _, start = readme_pip_commands()
    assert start == "hookbridge init hookbridge-home && cd hookbridge-home && hookbridge run"
    env = bridge_environment(installed, redis_port)
    bridge = RunningBridge([start], tmp_path, env, tmp_path / "bridge.log", shell=True)
    try:
        home = tmp_path / "hookbridge-home"
        assert (home / "config" / "bridge.conf").read_bytes() == (ROOT / "config" / "bridge.conf").read_bytes()
        log = (tmp_path / "bridge.log").read_text()
        assert "wrote hookbridge-home/rules/redis.conf" in log
        assert "next: cd hookbridge-home && hookbridge check && hookbridge run" in log
        checked = subprocess.run(["hookbridge", "check"], cwd=home, env=env, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout == "ok: config/bridge.conf and rules: 12 rules, pools redis.pool1\n"
        readme_walkthrough(bridge.mqtt_port, redis_db)
    finally:
        code = bridge.stop()
    assert code == 0, (tmp_path / "bridge.log").read_text()[-3000:]
    # A second init refuses to overwrite what the user may have changed.
    (home / "rules" / "redis.conf").write_text("# mine\n")
    again = subprocess.run(["hookbridge", "init"], cwd=home, env=env, capture_output=True, text=True)
    assert again.returncode == 2 and "rules/redis.conf: exists and differs from the shipped file" in again.stderr


def test_the_installed_report_command_says_how_to_get_pyspark(installed: Path, tmp_path: Path) -> None:
    """The wheel without the `spark` extra: `report` explains itself (exit 2), nothing else breaks."""
    env = clean_environment(installed)
    done = subprocess.run(
        ["hookbridge", "report", "sessions", "--source", "pgsql.pool1", "--from", "-1h", "--out", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "pip install 'hookbridge[spark]'" in done.stderr
