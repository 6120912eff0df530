"""`hookbridge init [DIR] [--force]` (bridge/ops/init.py): the shipped config/, rules/ and templates/."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.cli import main
from support.services import ROOT

SHIPPED = sorted(
    path.relative_to(ROOT)
    for folder in ("config", "rules", "templates")
    for path in (ROOT / folder).rglob("*")
    if path.is_file()
)


def written(target: Path) -> list[Path]:
    return sorted(path.relative_to(target) for path in target.rglob("*") if path.is_file())


def test_init_writes_the_shipped_files_and_says_what_next(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "home"
    assert main(["init", str(target)]) == 0
    assert written(target) == SHIPPED
    for relative in SHIPPED:
        assert (target / relative).read_bytes() == (ROOT / relative).read_bytes()
    out = capsys.readouterr().out.splitlines()
    assert out[: len(SHIPPED)] == [f"wrote {target / relative}" for relative in SHIPPED]
    assert out[len(SHIPPED)] == f"next: cd {target} && hookbridge check && hookbridge run"
    assert main(["check", "-c", str(target / "config/bridge.conf"), "-r", str(target / "rules")]) == 0


def test_init_refuses_to_overwrite_an_edited_file_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path)]) == 0
    edited = tmp_path / "rules" / "redis.conf"
    edited.write_text("# my own rules\n")
    (tmp_path / "config" / "secure.conf").unlink()
    capsys.readouterr()

    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{edited}: exists and differs from the shipped file" in err
    assert "nothing written: add --force to overwrite these files" in err
    assert edited.read_text() == "# my own rules\n"
    assert not (tmp_path / "config" / "secure.conf").exists()  # nothing at all was written

    assert main(["init", str(tmp_path), "--force"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {edited}" in out and f"wrote {tmp_path / 'config' / 'secure.conf'}" in out
    assert f"wrote {tmp_path / 'config' / 'bridge.conf'}" not in out  # unchanged files stay as they are
    assert edited.read_bytes() == (ROOT / "rules" / "redis.conf").read_bytes()
