"""A plug-in whose import fails never takes the other commands down (bridge/conf/registry.py).

Real distributions on sys.path (a dist-info folder with its entry points, as pip writes them) whose
modules cannot be imported: one command plug-in whose package is missing from the installation (the
image that left spark_analytics out), one that needs an optional extra not installed, and a backend
whose module raises while importing. `hookbridge` runs in a subprocess, as a user runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.services import ROOT

ENTRY_POINTS = """\
[hookbridge.commands]
gone = gone_package.cli:COMMAND
fancy = fancy_package.cli:COMMAND

[hookbridge.backends]
brokendb = brokendb_package:PLUGIN
"""

METADATA = """\
Metadata-Version: 2.1
Name: broken-plugins
Version: 1.0
Provides-Extra: fancy
Requires-Dist: not-installed-fancy-lib>=1; extra == "fancy"
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    info = site / "broken_plugins-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(METADATA)
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    # gone_package is not there at all; fancy_package is, and imports its extra's library.
    (site / "fancy_package").mkdir()
    (site / "fancy_package" / "__init__.py").write_text("")
    (site / "fancy_package" / "cli.py").write_text("import not_installed_fancy_lib  # noqa\n")
    (site / "brokendb_package").mkdir()
    (site / "brokendb_package" / "__init__.py").write_text("raise RuntimeError('this backend is broken')\n")
    return site


def hookbridge(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_other_commands_work_and_list_the_broken_ones(site: Path) -> None:
    listed = hookbridge(site, ROOT, "--help")
    assert listed.returncode == 0, listed.stderr
    assert "gone" in listed.stdout and "fancy" in listed.stdout and "report" in listed.stdout
    checked = hookbridge(site, ROOT, "check")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("ok: config/bridge.conf and rules")


def test_a_command_whose_package_is_missing_says_so_and_how_to_reinstall(site: Path) -> None:
    done = hookbridge(site, ROOT, "gone", "--whatever", "args")
    assert done.returncode == 2
    assert (
        "hookbridge gone: gone = gone_package.cli:COMMAND (declared by broken-plugins) cannot be imported"
        in done.stderr
    )
    assert "No module named 'gone_package'" in done.stderr
    assert "lacks its own gone_package package" in done.stderr
    assert "pip install --force-reinstall broken-plugins" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_command_whose_extra_is_missing_names_the_extra(site: Path) -> None:
    done = hookbridge(site, ROOT, "fancy")
    assert done.returncode == 2
    assert "No module named 'not_installed_fancy_lib'" in done.stderr
    assert "pip install 'broken-plugins[fancy]'" in done.stderr


def test_a_config_using_a_broken_backend_says_why(site: Path, tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "bridge.conf").write_text("backend.brokendb.pool1.server = 127.0.0.1:1\n")
    done = hookbridge(site, tmp_path, "check", "-c", "bridge.conf", "-r", "rules")
    assert done.returncode == 2
    assert done.stderr.startswith("bridge.conf:1:1: unknown backend 'brokendb'; it is installed but brokendb = ")
    assert "RuntimeError: this backend is broken" in done.stderr
