"""Fuzzing the config and rules parsers: no input crashes them, every rejection is `path:line:col: message`.

Inputs are built from the pieces real files are made of (keys, `=`, JSON fragments, placeholders,
topic filters, comments, odd characters), so that hypothesis reaches deep into the parsers rather
than stopping at the first unknown character.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors
from bridge.rules import parse_rules
from support.conf import make_config, rule_context

ERROR_LINE = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+):(?P<col>\d+): \S.*$")

_KEYS = [
    "node.name",
    "broker.mode",
    "broker.listener.tcp",
    "metrics.listener",
    "spool.dir",
    "spool.max_bytes",
    "spool.overflow",
    "log.level",
    "backend.redis.pool1.server",
    "backend.redis.pool1.pool_size",
    "backend.pgsql.pool1.password",
    "backend.mongo.pool1.server",
    "backend.cassa.pool1.nodes",
    "backend.cassa.pool1.replication",
    "backend.redis.hook.message.publish.1",
    "backend.pgsql.hook.session.subscribed.2",
    "backend.mongo.hook.client.connected.1",
    "backend.redis.hook.message.acked.x",
    "bogus",
]
_VALUES = [
    "127.0.0.1:6379",
    "6379",
    "64MB",
    "5s",
    "on",
    "${HOME}",
    "${UNSET:-x}",
    "${",
    '"quoted',
    '{"class": "SimpleStrategy"}',
    '{"action": {"function": "on_message_publish"}, "topic": "a/#"}',
    '{"action": {"commands": ["SET k:${clientid} ${payload.a.b}"]}}',
    '{"action": {"sql": ["insert into t values (${msgid}, \'${topic}\')"]}}',
    '{"action": {"template": "nope.j2"}}',
    '{"action": {"function": "on_message_fetch"}, "offline_opts": {"max_returned_count": -1, "time_range": "2x"}}',
    '{"topic": ["a/+/b", "#/x", ""], "action": {}}',
    '{"pool": 7, "expired_time": "1h", "payload_format": "xml"}',
    "[1, 2",
    "null",
    "",
]
_PIECES = st.sampled_from(["=", " = ", "#", "\n", "\t", " ", "\\", '"', "{", "}", "[", "]", ",", ":", "${", "\x00", "é", "\r"])
_LINE = st.one_of(
    st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(_KEYS), st.sampled_from(_VALUES)),
    st.builds(lambda k, v, j: f"{k} ={j}{v}", st.sampled_from(_KEYS), st.sampled_from(_VALUES), _PIECES),
    st.lists(st.one_of(_PIECES, st.sampled_from(_KEYS), st.sampled_from(_VALUES)), max_size=6).map("".join),
    st.text(max_size=40),
)
FILES = st.lists(_LINE, max_size=12).map("\n".join)

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_well_formed(errors: ConfErrors, path: str) -> None:
    assert errors.errors, "ConfErrors without errors"
    for error in errors.errors:
        text = str(error)
        assert ERROR_LINE.match(text), f"not path:line:col: message: {text!r}"
        assert error.where.path == path
        assert error.where.line >= 1 and error.where.col >= 1


@_FUZZ
@given(FILES)
def test_config_parser_never_crashes(text: str) -> None:
    try:
        parse_config("config/bridge.conf", text)
    except ConfErrors as errors:
        assert_well_formed(errors, "config/bridge.conf")


@_FUZZ
@given(FILES)
def test_rules_parser_never_crashes(text: str) -> None:
    config = make_config(6379, "backend.pgsql.pool1.server = 127.0.0.1:5432\nbackend.mongo.pool1.database = m\n")
    ctx = rule_context(config, Path("/nonexistent/templates"))
    rules, errors = parse_rules("rules/fuzz.conf", text, ctx)
    if errors:
        assert_well_formed(ConfErrors(errors), "rules/fuzz.conf")
    for rule in rules:
        assert rule.db in ("redis", "pgsql", "mongo", "cassa")
