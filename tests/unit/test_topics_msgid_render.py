"""Topic matching, message ids and the renderer's binding rules."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bridge.events import Hookpoint, MessagePublish
from bridge.msgid import MsgIdGenerator, timestamp_us
from bridge.render import CommandTemplate, RenderError, StatementTemplate, Values
from bridge.topics import filter_error, literal_prefix, matches


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("a/b", "a/b", True),
        ("a/+", "a/b", True),
        ("a/+", "a/b/c", False),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("+/+", "/x", True),
        ("#", "$SYS/x", False),
        ("+/x", "$SYS/x", False),
        ("$SYS/#", "$SYS/x", True),
        ("a/+/c", "a//c", True),
        ("a/b", "a/b/", False),
    ],
)
def test_matches(topic_filter: str, topic: str, expected: bool) -> None:
    assert matches(topic_filter, topic) is expected


def test_filter_validation_and_prefix() -> None:
    assert filter_error("a/#/b") is not None
    assert filter_error("a/b+") is not None
    assert filter_error("") is not None
    assert filter_error("a/+/#") is None
    assert literal_prefix("a/b/+/c") == "a/b"


def test_msgids_are_time_ordered_and_unique() -> None:
    generator = MsgIdGenerator("n1")
    ids = [generator.next() for _ in range(100_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and i == i.upper() for i in ids[:10])
    assert abs(timestamp_us(ids[0]) / 1e6 - time.time()) < 5
    other = MsgIdGenerator("n2").next()
    assert other[16:28] != ids[0][16:28]  # node bits differ


def _event(payload: bytes, clientid: str = "c") -> MessagePublish:
    return MessagePublish(
        msgid="0" * 32,
        clientid=clientid,
        username=None,
        topic="t",
        qos=1,
        payload=payload,
        retain=False,
        node="n",
        peername="p",
        timestamp=1.5,
    )


def test_command_arguments_are_fixed_at_load() -> None:
    command = CommandTemplate.compile("HSET mqtt:x:${clientid} f ${payload} ts ${timestamp}", Hookpoint.MESSAGE_PUBLISH)
    args = command.render(Values(_event(b"a b\r\nDEL *", clientid="evil id")))
    assert args == [b"HSET", b"mqtt:x:evil id", b"f", b"a b\r\nDEL *", b"ts", b"1500"]


def test_unknown_placeholder_is_rejected_at_load() -> None:
    with pytest.raises(RenderError, match=r"unknown placeholder \$\{reason\}"):
        CommandTemplate.compile("SET a ${reason}", Hookpoint.MESSAGE_PUBLISH)


def test_template_output_values_are_bound(tmp_path: Path) -> None:
    file = tmp_path / "t.j2"
    file.write_text(
        "{% if json and json.level > 2 %}SET alarm:{{ clientid }} {{ json.text }}\n{% endif %}"
        "HSET last {{ topic }} {{ payload }}\n"
    )
    template = StatementTemplate(file, "t.j2", Hookpoint.MESSAGE_PUBLISH)
    lines = template.render_lines(Values(_event(b'{"level": 3, "text": "x y\\nDEL k"}', clientid="a b")))
    assert lines == [
        [b"SET", b"alarm:a b", b"x y\nDEL k"],
        [b"HSET", b"last", b"t", b'{"level": 3, "text": "x y\\nDEL k"}'],
    ]
    assert template.render_lines(Values(_event(b"not json"))) == [[b"HSET", b"last", b"t", b"not json"]]
