"""bench/durable_store_bench.py at its smallest: every installed engine keeps every commit through
a SIGKILL and a torn tail (the bench raises if one does not), and a missing engine is skipped with
how to install it. No figure is asserted: timing never decides a test."""

from __future__ import annotations

import importlib.util
import re

import pytest

from bench import durable_store_bench
from bench.durable_stores import ENGINES, LmdbStore

INSTALLED = [engine for engine, (_, module) in ENGINES.items() if importlib.util.find_spec(module) is not None]


def tables(output: str) -> list[dict[str, list[str]]]:
    """Each result table's rows by engine name, cells stripped (header and rule lines left out)."""
    found: list[dict[str, list[str]]] = []
    for line in output.splitlines():
        if line.startswith("| engine "):
            found.append({})
        elif line.startswith("| "):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            found[-1][cells[0]] = cells[1:]
    return found


def test_smallest_run_prints_a_row_per_installed_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert durable_store_bench.main(["--messages", "1000", "--runs", "1"]) == 0
    output = capsys.readouterr().out
    speed, space = tables(output)
    names = sorted(ENGINES[engine][0].name for engine in INSTALLED)
    assert sorted(speed) == names
    assert sorted(space) == names
    for cells in [*speed.values(), *space.values()]:
        assert all(re.fullmatch(r"[\d,.]+( / [\d.]+)?", cell) for cell in cells), cells
    assert [len(cells) for cells in speed.values()] == [9] * len(names)
    assert [len(cells) for cells in space.values()] == [5] * len(names)
    assert "1,000 messages" in output
    assert "files left after expiry and a clean close:\n- SQLite (WAL): store.db (" in output


def test_missing_engine_is_skipped_with_the_install_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ENGINES, "lmdb", (LmdbStore, "no_such_engine_module"))
    assert durable_store_bench.main(["--messages", "400", "--runs", "1", "--engines", "sqlite,lmdb"]) == 0
    output = capsys.readouterr().out
    assert "not installed, skipped: no_such_engine_module (pip install -e '.[bench]')" in output
    assert [list(table) for table in tables(output)] == [["SQLite (WAL)"], ["SQLite (WAL)"]]


def test_workload_batches_stay_within_a_generation_and_cover_every_sequence() -> None:
    commits = durable_store_bench.workload(1, 1000, durable_store_bench.generation_size(1000))
    sequences = [seq for _, batch, _ in commits for seq, _, _ in batch]
    assert sequences == list(range(1, 1001))
    for generation, batch, positions in commits:
        assert {(seq - 1) // 250 for seq, _, _ in batch} == {generation}
        assert len(batch) <= 64
        assert len(positions) == len(batch) // 10
        assert all(position == batch[-1][0] for _, position in positions)
