"""The shipped rules/mysql.conf loads once uncommented, with the pool its header shows."""

from __future__ import annotations

from pathlib import Path

from bridge.functions import FUNCTIONS
from bridge.rules import SqlAction, parse_rules
from support.conf import make_config, rule_context

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_mysql_example_loads_when_uncommented() -> None:
    text = (ROOT / "rules" / "mysql.conf").read_text()
    pool = "".join(line[5:] + "\n" for line in text.splitlines() if line.startswith("##   backend.mysql.pool1."))
    pool = pool.replace("${MYSQL_PASSWORD:-hookbridge}", "hookbridge")
    assert "backend.mysql.pool1.server = 127.0.0.1:3306\n" in pool
    enabled = "\n".join(line[2:] if line.startswith("# backend.") else line for line in text.splitlines())
    rules, errors = parse_rules("rules/mysql.conf", enabled, rule_context(make_config(extra=pool), ROOT / "templates"))
    assert errors == []
    assert len(rules) == 15
    assert {r.pool for r in rules} == {"mysql.pool1"}
    used = {r.action.spec.impl_name for r in rules if hasattr(r.action, "spec")}
    assert used == {spec.impl_name for spec in FUNCTIONS.values()} - {"on_acked_delete", "on_message_store"}
    (sql,) = [r.action for r in rules if isinstance(r.action, SqlAction)]
    assert sql.statements[0].names == ("clientid", "topic")
