"""Fuzzing the config and rules parsers: no input crashes them, every rejection is `path:line:col: message`,
and whatever they accept builds into what `hookbridge run` constructs (docs/architecture.md#bad-input).

Inputs are built from the pieces real files are made of (keys, `=`, JSON fragments, placeholders,
topic filters, comments, odd characters), so that hypothesis reaches deep into the parsers rather
than stopping at the first unknown character.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.app import Bridge, Paths
from bridge.backend import FunctionContext, backend_class
from bridge.brokers.embedded.source import EmbeddedBroker, split_listen
from bridge.conf import docs, registry
from bridge.conf.config import Config, parse_config
from bridge.conf.errors import ConfErrors
from bridge.conf.schema import global_settings, pool_settings
from bridge.pipeline.runner import Runner
from bridge.rules import Rule, parse_rules
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
_PIECES = st.sampled_from(
    ["=", " = ", "#", "\n", "\t", " ", "\\", '"', "{", "}", "[", "]", ",", ":", "${", "\x00", "é", "\r"]
)
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
        # A problem inside a named file (a password file's lines) follows on lines of its own,
        # each one `path:line:col: message` too.
        for text in str(error).splitlines():
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


# -- values: whatever `check` accepts, `run` can build --------------------------------------------

_SETTING_KEYS = sorted(global_settings()) + [
    f"backend.{db}.pool1.{key}" for db in registry.backends() for key in pool_settings(db)
]
_NUMBER = st.one_of(
    st.integers(min_value=-(10**3), max_value=10**6),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.integers(min_value=0, max_value=10**4).map(lambda n: "9" * n),  # past Python's 4300-digit int limit
    st.floats(allow_nan=True, allow_infinity=True),
).map(str)
_UNIT = st.sampled_from(["", "ms", "s", "m", "h", "d", "B", "KB", "MB", "GB", "TB", "x", " MB"])
_CONTROL = st.characters(codec="utf-8", categories=["Cc", "Zl", "Zp", "Cf"])
_HOST = st.sampled_from(["127.0.0.1", "[::1]", "::1", "[::1", "[fe80::1%eth0]", "h-1.local", "a b", "300.1.1.1", ""])
_VALUE = st.one_of(
    _NUMBER,
    st.builds(lambda n, u: f"{n}{u}", _NUMBER, _UNIT),
    st.builds(lambda h, p: f"{h}:{p}", _HOST, st.one_of(st.integers(-1, 70000), st.just("x"))),
    st.builds(lambda a, c, b: f"{a}{c}{b}", st.text(max_size=6), _CONTROL, st.text(max_size=6)),
    st.builds(lambda a, c: json.dumps(a + c), st.text(max_size=6), _CONTROL),  # quoted: "\u0000"
    st.sampled_from(['"\\ud800"', '"\\u0000"', "user:pw@127.0.0.1:6379", "http://u:p@h:1", "http://h:99999"]),
    st.integers(min_value=0, max_value=3000).map(lambda n: "[" * n + "]" * n),
    st.sampled_from(['{"class": "SimpleStrategy", "replication_factor": 0}', '{"class": "X", "dc": [1]}']),
    st.sampled_from(["on", "off", "embedded", "mqtt", "emqx", "single", "rs", "block", "ONE", "a/#", "+/x/#/y"]),
    st.sampled_from(["/etc/passwd", "/etc/passwd/x", "/proc/version", "/nonexistent/x", "", "."]),
    st.text(max_size=12),
)


def _setting_line(key: str) -> st.SearchStrategy[str]:
    """`key = value`, the value from everything above or, for a ranged integer, at and just past its bounds."""
    db, _, name = key.removeprefix("backend.").partition(".pool1.")
    setting = global_settings()[key] if key in global_settings() else pool_settings(db)[name]
    bounds = re.match(r"integer (-?\d+) to (\d+)", setting.parse.__doc__ or "")
    edges = [int(bounds[1]) - 1, int(bounds[1]), int(bounds[2]), int(bounds[2]) + 1] if bounds else [0]
    default = docs.default_text(setting)  # valid, so that the other lines of a file often are
    values = st.one_of(st.just(default), st.sampled_from(edges).map(str), _VALUE)
    return values.map(lambda value: f"{key} = {value}")


CONFIG_VALUES = st.lists(st.sampled_from(_SETTING_KEYS).flatmap(_setting_line), max_size=5).map("\n".join)


def build_as_run(config: Config, rules: list[Rule]) -> None:
    """What `hookbridge run` constructs from the config and rules before it connects anything."""
    bridge = Bridge(config, rules, Paths(Path(config.path), Path("rules")))
    assert {rule.id for rule in bridge.engine.rules} == {rule.id for rule in rules}
    if isinstance(bridge.broker, EmbeddedBroker):  # the listen address as the broker splits it to bind
        assert split_listen(bridge.broker._listen) == config["broker.listener.tcp"]
    for pool in config.pools.values():
        backend = backend_class(pool.db)(pool, FunctionContext(node=config["node.name"]))
        Runner(pool, backend, bridge.metrics, Path(config["spool.dir"]), bridge.spool_budget)


@settings(_FUZZ, max_examples=600)
@given(CONFIG_VALUES)
def test_config_values_never_crash_and_what_check_accepts_builds(text: str) -> None:
    try:
        config = parse_config("config/bridge.conf", text)
    except ConfErrors as errors:
        assert_well_formed(errors, "config/bridge.conf")
        return
    build_as_run(config, [])


_RULE_KEY = st.sampled_from(
    [
        "backend.redis.hook.message.publish.1",
        "backend.redis.hook.session.subscribed.1",
        "backend.pgsql.hook.message.publish.2",
    ]
)
_COMMAND = st.builds(
    lambda name, args: " ".join([name, *args]),
    st.sampled_from(["SET", "set", "HSET", "GET", "DEL", "FOOBAR", "SELECT", "BLPOP", "JSON.SET", "${topic}", "ZADD"]),
    st.lists(st.sampled_from(["k:${clientid}", "${payload}", "v", "1", "${payload.a}"]), max_size=4),
)
_JSON_VALUE = st.one_of(
    _NUMBER.map(lambda n: n if n.lstrip("-").replace(".", "").isdigit() else json.dumps(n)),
    st.sampled_from(['"2h"', '"0s"', '"99999999999d"', "true", "null", '"\\u0000"', '"\\udc00"', "1e400"]),
    st.integers(min_value=0, max_value=3000).map(lambda n: "[" * n + "]" * n),
)
_BODY = st.one_of(
    st.builds(
        lambda commands, extra: json.dumps({"action": {"commands": commands}})[:-1] + extra + "}",
        st.lists(_COMMAND, min_size=1, max_size=3),
        st.sampled_from(["", ', "pipline": true', ', "topic": "a/#"']),
    ),
    st.builds(
        lambda key, value: '{"action": {"function": "on_message_publish"}, "' + key + '": ' + value + "}",
        st.sampled_from(["expired_time", "payload_format", "topic", "pool"]),
        _JSON_VALUE,
    ),
    st.builds(
        lambda key, value: (
            '{"action": {"function": "on_message_fetch_for_pubsub"}, "offline_opts": {"' + key + '": ' + value + "}}"
        ),
        st.sampled_from(["max_returned_count", "time_range"]),
        _JSON_VALUE,
    ),
    st.integers(min_value=0, max_value=5000).map(lambda n: '{"a": ' * n + "1" + "}" * n),
)
RULE_VALUES = st.lists(st.builds(lambda k, v: f"{k} = {v}", _RULE_KEY, _BODY), max_size=4).map("\n".join)


@settings(_FUZZ, max_examples=600)
@given(RULE_VALUES)
def test_rule_values_never_crash_and_what_check_accepts_builds(text: str) -> None:
    config = make_config(6379, "backend.pgsql.pool1.server = 127.0.0.1:5432\n")
    rules, errors = parse_rules("rules/fuzz.conf", text, rule_context(config, Path("/nonexistent/templates")))
    if errors:
        assert_well_formed(ConfErrors(errors), "rules/fuzz.conf")
        return
    build_as_run(config, rules)


def _bounds() -> list[tuple[str, str, str, str | None, str | None]]:
    """(key, lowest, highest, just below, just above) of every ranged setting, read from its declared range."""
    cases: list[tuple[str, str, str, str | None, str | None]] = []
    for key in _SETTING_KEYS:
        db, _, name = key.removeprefix("backend.").partition(".pool1.")
        doc = (global_settings()[key] if key in global_settings() else pool_settings(db)[name]).parse.__doc__ or ""
        if match := re.fullmatch(r"integer (-?\d+) to (\d+)", doc):
            low, high = int(match[1]), int(match[2])
            cases.append((key, str(low), str(high), str(low - 1), str(high + 1)))
        elif match := re.fullmatch(r"(?:duration|size) from (\d+)([a-zA-Z]+) to (\d+)([a-zA-Z]+)", doc):
            low, high = match[1] + match[2], match[3] + match[4]
            below = None if match[1] == "0" else f"{int(match[1]) - 1}{match[2]}"
            cases.append((key, low, high, below, f"{int(match[3]) + 1}{match[4]}"))
    return cases


@pytest.mark.parametrize(("key", "low", "high", "below", "above"), _bounds())
def test_every_ranged_setting_builds_at_its_bounds_and_refuses_past_them(
    key: str, low: str, high: str, below: str | None, above: str | None, tmp_path: Path
) -> None:
    for value in (low, high):
        build_as_run(parse_config(str(tmp_path / "bridge.conf"), f"spool.dir = {tmp_path}\n{key} = {value}\n"), [])
    for value in (below, above):
        if value is not None:
            with pytest.raises(ConfErrors):
                parse_config("bridge.conf", f"{key} = {value}\n")
