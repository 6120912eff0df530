"""docs/operations.md "The operator's table" stays true: each API route is one the API describes
(and every described route is in the table), each `ctl` command is one `hookbridge ctl` parses,
each dashboard section is on the page (bridge/api/static/index.html)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from bridge.api.openapi import describe
from bridge.ops import ctl

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = {"ID": "dev-7", "FILTER": "a/#", "QOS": "1", "TOPIC": "t/1", "PAYLOAD": "x"}  # the table's placeholders


def rows() -> list[list[str]]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## The operator's table", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| task")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_every_route_command_and_dashboard_section_exists() -> None:
    table = rows()
    assert len(table) >= 25
    paths = describe()["paths"]
    parser = argparse.ArgumentParser(prog="hookbridge ctl")
    ctl.add_arguments(parser)
    page = (ROOT / "bridge" / "api" / "static" / "index.html").read_text()
    listed = set()
    for task, route, command, dashboard in table:
        method, path = route.strip("`").split(" ")
        assert method.lower() in paths.get(path, {}), (task, route)
        listed.add((method.lower(), path))
        if command != "-":
            words = [SAMPLES.get(word, word) for word in shlex.split(command.strip("`"))]
            assert words[0] == "ctl", (task, command)
            parsed = parser.parse_args(["--url", "http://x", *words[1:]])
            assert callable(parsed.ctl), (task, command)
        if dashboard != "-":
            section = dashboard.split(",")[0]
            found = {"header": "<header>", "charts": 'class="charts"', "Session": "Session of"}.get(
                section, f"<h2>{section}"
            )
            assert found in page, (task, dashboard)
    described = {(method, path) for path, ops in paths.items() for method in ops}
    assert described - listed == set()


def test_the_table_has_no_route_twice_for_another_task() -> None:
    routes = [row[1] for row in rows()]
    assert len(routes) == len(set(routes)), [r for r in routes if routes.count(r) > 1]
    assert all(re.fullmatch(r"`(GET|POST|DELETE) /api/v1/\S+`", route) for route in routes)
