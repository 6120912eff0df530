"""Broken hook lines, each pinned to its exact `path:line:col: message`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.conf.errors import ConfErrors
from bridge.rules import load_rules, parse_rules
from support.conf import make_config, rule_context

P = "rules/t.conf"
OK_ACTION = '"action": {"function": "on_client_connected"}'

CASES = [
    (
        'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_conect"}, "pool": "pool1"}',
        f"{P}:1:65: unknown function 'on_client_conect' for client.connected (did you mean on_client_connected?)",
    ),
    (
        'backend.redis.hook.client.connected.1 = {"action": {"function": "on_message_publish"}}',
        f"{P}:1:65: function on_message_publish cannot run on client.connected (it runs on message.publish)",
    ),
    (
        'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}, "pool": "pool9"}',
        f"{P}:1:97: unknown redis pool 'pool9' (configured: pool1)",
    ),
    (
        'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"},}',
        f"{P}:1:88: bad JSON: Expecting property name enclosed in double quotes",
    ),
    (
        "backend.redis.hook.client.conected.1 = {" + OK_ACTION + "}",
        f"{P}:1:20: unknown hookpoint 'client.conected' (did you mean client.connected?)",
    ),
    (
        'backend.redis.hook.message.publish.1 = {"topic": "a/#/b", "action": {"function": "on_message_publish"}}',
        f"{P}:1:50: bad topic filter 'a/#/b': '#' must be a whole level and the last one",
    ),
    (
        'backend.redis.hook.session.subscribed.1 = {"action": {"commands": ["SET k:${clientid} ${payload}"]}}',
        f"{P}:1:87: unknown placeholder ${{payload}} for session.subscribed (it offers ${{clientid}}, "
        "${username}, ${node}, ${timestamp}, ${proto_ver}, ${topic}, ${qos})",
    ),
    (
        'backend.redis.hook.client.connected.1 = {"action": {"commands": ["SET v:${clientid} ${proto_ver}", '
        '"SET app:${clientid} ${user_property.app}"]}}',
        f"{P}:1:121: unknown placeholder ${{user_property.app}} for client.connected (it offers ${{clientid}}, "
        "${username}, ${node}, ${timestamp}, ${proto_ver}, ${peername})",
    ),
    (
        'backend.redis.hook.message.publish.1 = {"action": {"commands": ["SET k ${user_property.}"]}}',
        f"{P}:1:72: bad placeholder ${{user_property.}}",
    ),
    (
        'backend.redis.hook.message.acked.1 = {"action": {"commands": ["SET k ${user_propertie.app}"]}}',
        f"{P}:1:70: unknown placeholder ${{user_propertie.app}} for message.acked (it offers ${{clientid}}, "
        "${username}, ${node}, ${timestamp}, ${proto_ver}, ${msgid}, ${topic}, ${qos}, ${payload}, ${retain}, "
        "${from_clientid}, ${payload.<field>}, ${user_property.<name>})",
    ),
    (
        "backend.redis.hook.client.connected.1 = {" + OK_ACTION + ', "topik": "a"}',
        f"{P}:1:89: unknown key 'topik' (did you mean topic?)",
    ),
    (
        'backend.redis.hook.message.publish.1 = {"action": {"sql": ["insert into t values (${msgid})"]}}',
        f"{P}:1:52: sql actions are not for redis; redis takes commands",
    ),
    (
        'backend.redis.hook.message.publish.1 = {"action": {"template": "redis/missing.j2"}}',
        f"{P}:1:64: template 'redis/missing.j2' not found under templates",
    ),
    (
        'backend.redis.hook.client.connected.1 = {"topic": "a", ' + OK_ACTION + "}",
        f'{P}:1:42: "topic" does not apply to client.connected (client events have no topic)',
    ),
    (
        "backend.pgsql.hook.client.connected.1 = {" + OK_ACTION + "}",
        f'{P}:1:41: no "pool" given and the config has 0 pgsql pools; add backend.pgsql.pool1.server to the config',
    ),
    (
        'backend.redis.hook.session.subscribed.1 = {"action": {"function": "on_message_fetch_for_queue"}, '
        '"offline_opts": {"max_returned_count": 0}}',
        f"{P}:1:115: max_returned_count must be an integer from 1 to 100000",
    ),
    ("backend.redis.hook.client.connected.1", f"{P}:1:1: expected 'key = value'"),
]


@pytest.mark.parametrize(("line", "expected"), CASES)
def test_broken_line_is_pinned(line: str, expected: str) -> None:
    ctx = rule_context(make_config(), Path("templates"))
    rules, errors = parse_rules(P, line + "\n", ctx)
    assert [str(e) for e in errors] == [expected]
    assert rules == []


PUBLISH = "backend.redis.hook.message.publish.1 = "
FETCH = 'backend.redis.hook.session.subscribed.1 = {"action": {"function": "on_message_fetch_for_pubsub"}, '

# docs/architecture.md#bad-input: values `run` would refuse (at start or on every event) are refused when the rules load.
VALUE_CASES = [
    (
        PUBLISH + '{"action": {"commands": ["FOOBAR k:${clientid} v"]}}',
        f"{P}:1:66: unknown Redis command 'FOOBAR'",
    ),
    (
        PUBLISH + '{"action": {"commands": ["HSET a b c", "  HSETT a:${clientid} b c"]}}',
        f"{P}:1:82: unknown Redis command 'HSETT' (did you mean HSET?)",
    ),
    (
        PUBLISH + '{"action": {"commands": ["SET k:${clientid}"]}}',
        f"{P}:1:66: Redis SET takes at least 2 arguments, got 1",
    ),
    (PUBLISH + '{"action": {"commands": ["GET a b"]}}', f"{P}:1:66: Redis GET takes 1 argument, got 2"),
    (
        PUBLISH + '{"action": {"commands": ["SELECT 2"]}}',
        f"{P}:1:66: Redis SELECT cannot run in a rule: it changes the state of a pooled connection "
        "(the pool's settings choose database and login)",
    ),
    (
        PUBLISH + '{"action": {"commands": ["BLPOP q 0"]}}',
        f"{P}:1:66: Redis BLPOP cannot run in a rule: it blocks a pooled connection",
    ),
    (PUBLISH + '{"a": ' * 40 + "1" + "}" * 40, f"{P}:1:232: bad JSON: nested deeper than 32 levels"),
    (PUBLISH + "[" * 100_000 + "]" * 100_000, f"{P}:1:72: bad JSON: nested deeper than 32 levels"),
    (
        PUBLISH + '{"action": {"function": "on_message_publish"}, "expired_time": 1' + "0" * 5000 + "}",
        f"{P}:1:103: bad JSON: a number is too long",
    ),
    (
        PUBLISH + '{"action": {"commands": ["SET k\\u0000 v"]}}',
        f"{P}:1:71: bad JSON: a string contains the control character U+0000",
    ),
    (
        PUBLISH + '{"action": {"commands": ["SET k v"], "pipline": false}}',
        f"{P}:1:77: unknown key 'pipline' in a commands action",
    ),
    (
        PUBLISH + '{"action": {"function": "on_message_publish"}, "expired_time": 630720001}',
        f"{P}:1:87: expired_time must be a whole number of seconds from 1 to 630720000 (20 years)",
    ),
    (
        FETCH + '"offline_opts": {"time_range": "0s"}}',
        f"{P}:1:116: time_range: expected a duration from 1s to 36500d, got '0s'",
    ),
    (
        FETCH + '"offline_opts": {"max_returned_count": 100001}}',
        f"{P}:1:116: max_returned_count must be an integer from 1 to 100000",
    ),
    (
        'backend.pgsql.hook.message.publish.1 = {"action": {"sql": ["delete from t"], "pipeline": false}}',
        f"{P}:1:78: unknown key 'pipeline' in a sql action",
    ),
]


@pytest.mark.parametrize(("line", "expected"), VALUE_CASES)
def test_value_run_would_refuse_is_pinned(line: str, expected: str) -> None:
    ctx = rule_context(make_config(extra="backend.pgsql.pool1.server = 127.0.0.1:5432\n"), Path("templates"))
    rules, errors = parse_rules(P, line + "\n", ctx)
    assert [str(e) for e in errors] == [expected]
    assert rules == []


def test_redis_commands_that_are_checked_only_per_event_load() -> None:
    """Module commands (a dot) and a placeholder as the name cannot be known when the rules load."""
    line = PUBLISH + '{"action": {"commands": ["set k v", "JSON.SET k $ ${payload}", "${topic} k"]}}'
    rules, errors = parse_rules(P, line + "\n", rule_context(make_config(), Path("templates")))
    assert errors == [] and len(rules) == 1


def test_duplicate_key_names_the_first() -> None:
    line = "backend.redis.hook.client.connected.1 = {" + OK_ACTION + "}\n"
    ctx = rule_context(make_config(), Path("templates"))
    _, errors = parse_rules(P, "# comment\n" + line + line, ctx)
    assert [str(e) for e in errors] == [
        f"{P}:3:1: duplicate key backend.redis.hook.client.connected.1 (first at {P}:2:1)"
    ]


def test_all_errors_reported_at_once(tmp_path: Path) -> None:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "a.conf").write_text(
        'backend.redis.hook.client.connected.1 = {"action": {"function": "nope"}}\n'
        "\n"
        'backend.redis.hook.message.publish.1 = {"topic": "+x", "action": {"function": "on_message_publish"}}\n'
    )
    (rules_dir / "b.conf").write_text('backend.redis.hook.message.acked.1 = {"action": 1}\n')
    with pytest.raises(ConfErrors) as caught:
        load_rules(rules_dir, rule_context(make_config(), tmp_path / "templates"))
    lines = [str(e) for e in caught.value.errors]
    a, b = rules_dir / "a.conf", rules_dir / "b.conf"
    assert lines == [
        f"{a}:1:65: unknown function 'nope' for client.connected",
        f"{a}:3:50: bad topic filter '+x': '+' must be a whole level",
        f'{b}:1:39: "action" must be an object with exactly one of function, commands, sql, cql, template',
    ]


def test_template_syntax_error_points_into_the_template(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    (templates / "redis").mkdir(parents=True)
    (templates / "redis" / "bad.j2").write_text("HSET k:{{ clientid }} a 1\n{% if qos %}\nSET x 1\n")
    (templates / "redis" / "var.j2").write_text("HSET k a 1\nSET {{ clientid }} {{ secret }}\n")
    ctx = rule_context(make_config(), templates)
    text = (
        'backend.redis.hook.message.publish.1 = {"action": {"template": "redis/bad.j2"}}\n'
        'backend.redis.hook.message.publish.2 = {"action": {"template": "redis/var.j2"}}\n'
    )
    _, errors = parse_rules(P, text, ctx)
    assert [str(e) for e in errors] == [
        f"{templates}/redis/bad.j2:2:1: template syntax error: Unexpected end of template. Jinja was looking "
        "for the following tags: 'elif' or 'else' or 'endif'. The innermost block that needs to be closed is 'if'.",
        f"{templates}/redis/var.j2:2:23: unknown variable 'secret' for message.publish (it offers clientid, json, "
        "msgid, node, payload, peername, proto_ver, qos, retain, timestamp, topic, user_properties, user_property, "
        "username)",
    ]


def test_shipped_rules_load() -> None:
    root = Path(__file__).resolve().parents[2]
    rules = load_rules(root / "rules", rule_context(make_config(), root / "templates"))
    assert len(rules) == 12
    assert {r.pool for r in rules} == {"redis.pool1"}


def test_shipped_pgsql_example_loads_when_uncommented(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    text = (root / "rules" / "pgsql.conf").read_text()
    enabled = "\n".join(line[2:] if line.startswith("# backend.") else line for line in text.splitlines())
    rules, errors = parse_rules(
        "rules/pgsql.conf",
        enabled,
        rule_context(make_config(extra="backend.pgsql.pool1.server = 127.0.0.1:5432\n"), root / "templates"),
    )
    assert errors == []
    assert len(rules) == 15
    from bridge.functions import FUNCTIONS

    used = {r.action.spec.impl_name for r in rules if hasattr(r.action, "spec")}
    assert used == {spec.impl_name for spec in FUNCTIONS.values()} - {"on_acked_delete", "on_message_store"}
