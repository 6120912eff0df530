"""`${proto_ver}` and `${user_property.<name>}` (docs/rules.md#hookpoints-and-their-placeholders): allowed where the table says, rendered
as bound values in Redis commands, SQL / CQL and Jinja2 templates, kept by the spool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    Hookpoint,
    MessageAcked,
    MessageDelivered,
    MessagePublish,
    SessionSubscribed,
    SessionUnsubscribed,
    placeholder_allowed,
    placeholder_value,
)
from bridge.pipeline.spool.codec import decode, encode
from bridge.render import CommandTemplate, RenderError, StatementTemplate, Values
from bridge.rules import parse_rules
from bridge.sql import SqlStatement, cql_marker, render_sql
from support.conf import make_config, rule_context

INJECTION = "x\r\n*3\r\n$3\r\nSET\r\n$8\r\ninjected\r\n$1\r\n1\r\n"
PROPS = (("app", "first"), ("app", "second"), ("evil", INJECTION), ("a.b", "dotted"), ("items", "not a method"))


def _publish(proto_ver: int = 5, props: tuple[tuple[str, str], ...] = PROPS) -> MessagePublish:
    return MessagePublish(
        "0" * 32, "dev", None, "t", 1, b"{}", False, "n", "p:1", 1.5, proto_ver=proto_ver, user_properties=props
    )


def _acked(props: tuple[tuple[str, str], ...] = PROPS) -> MessageAcked:
    return MessageAcked("1" * 32, "sub", None, "dev", "t", 1, b"", False, "n", 2.0, proto_ver=3, user_properties=props)


MESSAGE_HOOKS = [Hookpoint.MESSAGE_PUBLISH, Hookpoint.MESSAGE_DELIVERED, Hookpoint.MESSAGE_ACKED]
OTHER_HOOKS = [h for h in Hookpoint if h not in MESSAGE_HOOKS]


@pytest.mark.parametrize("hookpoint", list(Hookpoint))
def test_the_table_offers_proto_ver_everywhere_and_user_properties_on_messages(hookpoint: Hookpoint) -> None:
    assert placeholder_allowed(hookpoint, "proto_ver")
    on_messages = hookpoint in MESSAGE_HOOKS
    assert placeholder_allowed(hookpoint, "user_property.app") is on_messages
    assert placeholder_allowed(hookpoint, "user_property.app.version") is on_messages
    assert not placeholder_allowed(hookpoint, "user_property")  # a name is needed
    assert not placeholder_allowed(hookpoint, "user_property.a..b")
    assert not placeholder_allowed(hookpoint, "user_properties.app")


def test_every_event_carries_its_protocol_level_with_3_1_1_as_the_default() -> None:
    events = [
        ClientConnected("c", None, "n", "p", 1.0),
        ClientDisconnected("c", None, "n", "p", "normal", 1.0),
        SessionSubscribed("c", None, "n", "t", 1, 1.0),
        SessionUnsubscribed("c", None, "n", "t", 1.0),
        MessagePublish("0" * 32, "c", None, "t", 1, b"", False, "n", "p", 1.0),
        MessageDelivered("0" * 32, "c", None, "f", "t", 1, b"", False, "n", 1.0),
        MessageAcked("0" * 32, "c", None, "f", "t", 1, b"", False, "n", 1.0),
    ]
    assert [placeholder_value(e, "proto_ver") for e in events] == [4] * 7
    assert ClientConnected("c", None, "n", "p", 1.0, proto_ver=5).proto_ver == 5
    assert placeholder_value(events[4], "user_property.app") is None  # a 3.1.1 message has none


def test_redis_command_binds_the_first_value_and_null_for_a_missing_name() -> None:
    command = CommandTemplate.compile(
        "HSET m:${clientid} v ${proto_ver} app ${user_property.app} evil ${user_property.evil} "
        "dotted ${user_property.a.b} none ${user_property.nope} key:${user_property.app}:x 1",
        Hookpoint.MESSAGE_PUBLISH,
    )
    args = command.render(Values(_publish()))
    assert args == [
        b"HSET",
        b"m:dev",
        b"v",
        b"5",
        b"app",
        b"first",
        b"evil",
        INJECTION.encode(),  # one argument, whatever it holds
        b"dotted",
        b"dotted",
        b"none",
        b"",
        b"key:first:x",
        b"1",
    ]


@pytest.mark.parametrize("hookpoint", OTHER_HOOKS)
def test_user_property_is_refused_off_the_message_hookpoints(hookpoint: Hookpoint) -> None:
    with pytest.raises(RenderError, match=r"unknown placeholder \$\{user_property\.app\} for " + hookpoint):
        CommandTemplate.compile("SET k ${user_property.app}", hookpoint)
    assert CommandTemplate.compile("SET k ${proto_ver}", hookpoint).args[2] is not None


def test_sql_binds_user_properties_as_parameters_even_with_a_quote_in_the_name() -> None:
    statement = SqlStatement.compile(
        "insert into t (v, app, q, none) values (${proto_ver}, '${user_property.app}', ${user_property.it's}, "
        "${user_property.nope})",
        Hookpoint.MESSAGE_ACKED,
    )
    assert statement.text == "insert into t (v, app, q, none) values ($1, $2, $3, $4)"
    assert statement.bind(Values(_acked((*PROPS, ("it's", "quoted"))))) == [3, "first", "quoted", None]
    cql = SqlStatement.compile(
        "update t set v = ${user_property.evil} where k = ${clientid}", MESSAGE_HOOKS[1], cql_marker
    )
    assert cql.text == "update t set v = ? where k = ?"
    delivered = MessageDelivered("1" * 32, "sub", None, "dev", "t", 1, b"", False, "n", 2.0, user_properties=PROPS)
    assert cql.bind(Values(delivered)) == [INJECTION, "sub"]


def test_sql_still_refuses_a_placeholder_inside_a_literal() -> None:
    with pytest.raises(RenderError, match="inside a string literal"):
        SqlStatement.compile("insert into t values ('x ${user_property.app}')", Hookpoint.MESSAGE_PUBLISH)


def _template(tmp_path: Path, text: str, hookpoint: Hookpoint = Hookpoint.MESSAGE_PUBLISH) -> StatementTemplate:
    file = tmp_path / "t.j2"
    file.write_text(text)
    return StatementTemplate(file, "t.j2", hookpoint)


def test_template_sees_user_property_user_properties_and_proto_ver(tmp_path: Path) -> None:
    template = _template(
        tmp_path,
        "HSET m v {{ proto_ver }} app {{ user_property.app }} items {{ user_property.items }}"
        " evil {{ user_property['evil'] }} none {{ user_property.nope }}\n"
        "{% for name, value in user_properties %}RPUSH p:{{ name }} {{ value }}\n{% endfor %}"
        "{% if 'app' in user_property %}SET all {{ user_property }}\n{% endif %}",
    )
    hostile_name = "n m\r\nDEL *"
    props = (*PROPS[:3], PROPS[4], (hostile_name, "v"))
    lines = template.render_lines(Values(_publish(props=props)))
    evil = INJECTION.encode()
    first = {"app": "first", "evil": INJECTION, "items": "not a method", hostile_name: "v"}  # the first value of each
    assert lines == [
        [b"HSET", b"m", b"v", b"5", b"app", b"first", b"items", b"not a method", b"evil", evil, b"none", b""],
        [b"RPUSH", b"p:app", b"first"],
        [b"RPUSH", b"p:app", b"second"],
        [b"RPUSH", b"p:evil", INJECTION.encode()],
        [b"RPUSH", b"p:items", b"not a method"],
        [b"RPUSH", b"p:n m\r\nDEL *", b"v"],  # a hostile name is bound like a value
        [b"SET", b"all", json.dumps(first, separators=(",", ":")).encode()],
    ]
    assert template.render_lines(Values(_publish(proto_ver=4, props=()))) == [
        [b"HSET", b"m", b"v", b"4", b"app", b"", b"items", b"", b"evil", b"", b"none", b""]
    ]


def test_template_sql_binds_user_properties(tmp_path: Path) -> None:
    template = _template(
        tmp_path, "insert into t values ({{ proto_ver }}, '{{ user_property.app }}')", MESSAGE_HOOKS[2]
    )
    assert render_sql(template, Values(_acked())) == [("insert into t values ($1, $2)", [3, "first"])]


def test_template_on_a_client_hook_cannot_name_user_property(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match=r"unknown variable 'user_property' for client\.connected") as caught:
        _template(
            tmp_path,
            "SET v:{{ clientid }} {{ proto_ver }}\nSET a {{ user_property.app }}\n",
            Hookpoint.CLIENT_CONNECTED,
        )
    assert (caught.value.line, caught.value.col) == (2, 10)


def test_check_accepts_the_new_placeholders_where_allowed(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    (tmp_path / "redis" / "props.j2").write_text("HSET p:{{ clientid }} app {{ user_property.app }}\n")
    text = (
        'backend.redis.hook.message.publish.1 = {"action": {"commands": ["HSET m:${msgid} v ${proto_ver} '
        'app ${user_property.app}"]}}\n'
        'backend.redis.hook.message.delivered.1 = {"action": {"template": "redis/props.j2"}}\n'
        'backend.redis.hook.session.subscribed.1 = {"action": {"commands": ["SET v:${clientid} ${proto_ver}"]}}\n'
    )
    rules, errors = parse_rules("rules/t.conf", text, rule_context(make_config(), tmp_path))
    assert errors == []
    assert [r.id for r in rules] == [
        "redis.message.publish.1",
        "redis.message.delivered.1",
        "redis.session.subscribed.1",
    ]


def test_check_reports_every_misplaced_user_property_with_its_position() -> None:
    text = (
        'backend.redis.hook.client.connected.1 = {"action": {"commands": ["SET a ${user_property.a}"]}}\n'
        'backend.redis.hook.session.subscribed.1 = {"action": {"commands": ["SET b ${user_property.b}"]}}\n'
    )
    _, errors = parse_rules("rules/t.conf", text, rule_context(make_config(), Path("templates")))
    assert [str(e).split(" (it offers")[0] for e in errors] == [
        "rules/t.conf:1:73: unknown placeholder ${user_property.a} for client.connected",
        "rules/t.conf:2:75: unknown placeholder ${user_property.b} for session.subscribed",
    ]


def test_spool_keeps_protocol_level_and_user_properties() -> None:
    events = [
        _publish(props=(*PROPS, ("ключ", "значение"), ("", ""))),
        _acked(),
        ClientDisconnected("c", None, "n", "p", "normal", 1.0, proto_ver=5),
    ]
    for event in events:
        assert decode(encode("redis.message.publish.1", event, None)).event == event
