"""The shipped Cassandra rules load when uncommented; cql statements get `?` markers; pool settings are checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors
from bridge.rules import SqlAction, parse_rules
from support.conf import make_config, rule_context

ROOT = Path(__file__).resolve().parents[2]
POOL = "backend.cassa.pool1.nodes = 127.0.0.1:9042\n"


def test_shipped_cassa_example_loads_when_uncommented() -> None:
    text = (ROOT / "rules" / "cassa.conf").read_text()
    enabled = "\n".join(line[2:] if line.startswith("# backend.") else line for line in text.splitlines())
    rules, errors = parse_rules("rules/cassa.conf", enabled, rule_context(make_config(extra=POOL), ROOT / "templates"))
    assert errors == []
    assert len(rules) == 15
    from bridge.functions import FUNCTIONS

    used = {r.action.spec.impl_name for r in rules if hasattr(r.action, "spec")}
    assert used == {spec.impl_name for spec in FUNCTIONS.values()} - {"on_acked_delete", "on_message_store"}
    (cql,) = [r.action for r in rules if isinstance(r.action, SqlAction)]
    assert cql.statements[0].text == "delete from acked where clientid = ? and topic = ?"
    assert cql.statements[0].names == ("clientid", "topic")


def test_a_quoted_placeholder_in_cql_is_a_marker_too() -> None:
    line = (
        'backend.cassa.hook.message.publish.1 = {"action": {"cql": '
        "\"insert into t (a, b) values ('${clientid}', ${payload.x})\"}}\n"
    )
    rules, errors = parse_rules("r.conf", line, rule_context(make_config(extra=POOL), ROOT / "templates"))
    assert errors == []
    action = rules[0].action
    assert isinstance(action, SqlAction)
    assert action.statements[0].text == "insert into t (a, b) values (?, ?)"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("backend.cassa.pool1.keyspace = mqtt; DROP", "expected a name of letters, digits and _"),
        ("backend.cassa.pool1.consistency = local_quorum", "expected one of ONE, LOCAL_ONE"),
        ('backend.cassa.pool1.replication = {"replication_factor": 1}', 'expected a JSON object with a "class"'),
    ],
)
def test_bad_cassa_pool_settings(line: str, message: str) -> None:
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", POOL + line + "\n")
    assert message in str(caught.value)
