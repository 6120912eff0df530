"""The wheel, built once per test session and shared by every test that installs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.installed import clean_environment
from support.services import ROOT


def checkout_files() -> list[Path]:
    """The checkout as git sees it (tracked and new files, nothing ignored: no .venv, no .run)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return [Path(name) for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hookbridge's wheel, built from a copy of the checkout (a build writes build/ and *.egg-info
    beside its sources: not in the checkout, which other sessions may be building at the same time)."""
    source = tmp_path_factory.mktemp("wheel-source")
    for relative in checkout_files():
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, source / relative)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
        check=True,
        env=clean_environment(),
    )
    (built,) = out.glob("hookbridge-*.whl")
    return built
