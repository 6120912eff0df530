"""`hookbridge import-emqx` on hostile input: no traceback whatever the files hold, no
write outside --out (a symlink planted in it is refused), and no control character reaches the
terminal from a path or value it echoes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.emqx44.importer import FILES
from support.services import ROOT

PAGES = ROOT / "tests" / "fixtures" / "emqx44" / "pages" / "en_US"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _source(tmp_path: Path, name: str = "plugins", **files: str | bytes) -> Path:
    source = tmp_path / name
    source.mkdir()
    for db, text in files.items():
        target = source / FILES[db]
        if isinstance(text, bytes):
            target.write_bytes(text)
        else:
            target.write_text(text, encoding="utf-8")
    return source


DEEP = 200_000


@pytest.mark.parametrize(
    "line",
    [
        'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, "x": '
        + "[" * DEEP
        + "]" * DEEP
        + "}",
        "backend.redis.hook.message.publish.1 = " + "[" * DEEP,
        "backend.redis.pool1.server = " + "{" * DEEP,
        "backend.redis.msg.expired_after = " + "9" * DEEP,
        "backend.redis.pool1.pool_size = " + "9" * DEEP,
        'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"},'
        ' "expired_time": ' + "9" * 5000 + "}",
        "backend.redis.pool1.server = 127.0.0.1:6379\x00",
    ],
    ids=[
        "deep-json-in-a-rule",
        "deep-json-unclosed",
        "deep-pool-value",
        "huge-expiry",
        "huge-int",
        "long-number",
        "nul",
    ],
)
def test_no_traceback_on_hostile_values(line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _source(tmp_path, redis=f"backend.redis.pool1.server = 127.0.0.1:6379\n{line}\n")
    assert main(["import-emqx", str(source), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{source / FILES['redis']}:2:" in err
    assert err.rstrip().endswith("nothing written")
    assert not (tmp_path / "out").exists()


def test_no_traceback_on_files_that_are_not_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _source(tmp_path, redis=b"\xff\xfe" + os.urandom(2000), mysql="\x00" * 100, pgsql="=" * 10)
    (source / FILES["mongo"]).mkdir()  # a directory where a file is expected: not an EMQX file
    assert main(["import-emqx", str(source), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for db in ("redis", "mysql", "pgsql"):
        assert f"{source / FILES[db]}:1:" in err


def test_a_symlink_planted_in_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.conf"
    victim.write_text("mine\n")
    out = tmp_path / "out"
    (out / "config").mkdir(parents=True)
    (out / "config" / "bridge.conf").symlink_to(victim)  # a file through a link
    (out / "rules").symlink_to(outside, target_is_directory=True)  # a directory through a link

    assert main(["import-emqx", str(PAGES), "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'config' / 'bridge.conf'}: a symbolic link" in err
    assert f"{out / 'rules'}: a symbolic link" in err
    assert victim.read_text() == "mine\n"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.conf"]


def test_control_characters_in_paths_and_values_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "etc\x1b]0;owned\x07\x1b[2J\u202e"
    source = _source(tmp_path, name, redis="backend.redis.pool1.type = \x1b[31mred\nbackend.redis.pool1.bad\x9b = 1\n")
    assert main(["import-emqx", str(source), "--out", str(tmp_path / "out")]) == 2
    empty = tmp_path / "nothing\x1b[1A"
    empty.mkdir()
    assert main(["import-emqx", str(empty), "--out", str(tmp_path / "out\x07")]) == 2
    assert main(["import-emqx", str(PAGES), "--out", str(tmp_path / "out\x1b[K")]) == 0
    captured = capsys.readouterr()
    for stream in (captured.err, captured.out):
        assert not any(c in stream for c in "\x1b\x07\x9b\u202e"), stream
    assert "etc\\x1b]0;owned\\x07\\x1b[2J\\u202e" in captured.err
    assert "nothing\\x1b[1A" in captured.err
    assert "out\\x1b[K" in captured.out


_NASTY = ["[" * 5000, "{", "}", '"', "\\", "\x00", "\x1b[2J", "9" * 5000, "=", "#", "\udcff", "\u202e", "\n", " "]


@pytest.mark.parametrize("seed", range(4))
def test_no_exception_on_mutated_page_files(seed: int, tmp_path: Path) -> None:
    """The English and Chinese page files with random cuts, insertions and byte flips (fixed seeds):
    convert() answers with problems, never an exception."""
    import random

    from bridge.emqx44.importer import convert

    rng = random.Random(seed)
    pages = ROOT / "tests" / "fixtures" / "emqx44" / "pages"
    originals = sorted(pages.glob("*/*.conf"))
    for round_ in range(25):
        source = tmp_path / f"round{round_}"
        source.mkdir()
        for original in rng.sample(originals, 3):
            text = original.read_text(encoding="utf-8")
            for _ in range(rng.randint(1, 6)):
                at = rng.randrange(len(text))
                choice = rng.random()
                if choice < 0.4:
                    text = text[:at] + rng.choice(_NASTY) + text[at:]
                elif choice < 0.7:
                    text = text[:at] + text[at + rng.randint(1, 80) :]
                else:
                    text = text[:at] + chr(rng.randrange(0x20, 0x3000)) + text[at + 1 :]
            (source / original.name).write_bytes(text.encode("utf-8", errors="surrogateescape"))
        result = convert(source, str(tmp_path / "out" / "config" / "bridge.conf"), str(tmp_path / "out" / "rules"))
        for problem in result.problems:
            assert str(problem).isprintable()
