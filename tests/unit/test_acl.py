"""The ACL: Mosquitto's acl_file format, its errors, and what a client's permissions answer."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.accounts import READ, READWRITE, WRITE, Entry
from bridge.brokers.embedded.auth.acl import ClientPermissions, covers, filter_regex
from bridge.brokers.embedded.auth.aclfile import parse_acl
from bridge.brokers.embedded.auth.aclsource import Acl
from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors
from bridge.topics import matches

ACL = """\
# anonymous clients
topic read public/#

user roger
topic foo/bar
topic deny foo/bar/secret
topic write cmd/+/in
topic readwrite with space/x y

user ann
topic read #
topic deny secret/#

pattern readwrite devices/%c/#
pattern read users/%u/inbox
"""


def perms(text: str, username: str | None, clientid: str, nomatch: bool = False) -> ClientPermissions:
    table = parse_acl("acl", text)
    return ClientPermissions(table.entries_for(username), username, clientid, nomatch=nomatch)


def test_sections_access_words_and_patterns() -> None:
    table = parse_acl("acl", ACL)
    assert table.anonymous == (Entry(READ, "public/#"),)
    assert table.users["roger"] == (
        Entry(READWRITE, "foo/bar"),
        Entry(READWRITE, "foo/bar/secret", allow=False),
        Entry(WRITE, "cmd/+/in"),
        Entry(READWRITE, "with space/x y"),
    )
    assert table.patterns == (
        Entry(READWRITE, "devices/%c/#", substitute=True),
        Entry(READ, "users/%u/inbox", True, True),
    )


def test_anonymous_user_and_patterns_decide() -> None:
    anonymous = perms(ACL, None, "a1")
    assert anonymous.may_subscribe("public/x") and anonymous.may_read("public/x/y")
    assert not anonymous.may_publish("public/x")
    assert not anonymous.may_subscribe("#") and not anonymous.may_read("foo/bar")
    assert anonymous.may_publish("devices/a1/state") and not anonymous.may_publish("devices/a2/state")
    assert not anonymous.may_read("users/None/inbox")  # %u never fills in for a client without a name

    roger = perms(ACL, "roger", "r1")
    assert roger.may_publish("foo/bar") and roger.may_read("foo/bar")
    assert not roger.may_publish("foo/bar/secret") and not roger.may_subscribe("foo/bar/secret")
    assert roger.may_publish("cmd/dev1/in") and not roger.may_subscribe("cmd/dev1/in")
    assert roger.may_publish("with space/x y")
    assert roger.may_read("users/roger/inbox") and not roger.may_read("users/ann/inbox")
    assert roger.may_subscribe("devices/r1/#") and not roger.may_subscribe("devices/+/state")
    assert not roger.may_read("public/x")  # anonymous lines are not a user's

    ann = perms(ACL, "ann", "n1")
    assert ann.may_subscribe("#")  # allowed to subscribe, filtered per message:
    assert ann.may_read("news/1") and not ann.may_read("secret/plans") and not ann.may_read("secret")
    assert not ann.may_subscribe("secret/+/x")
    assert not ann.may_read("$SYS/broker/uptime") and not ann.may_subscribe("$SYS/#")


def test_nomatch_allow_still_keeps_sys_closed_and_denies_win() -> None:
    open_ = perms("topic deny private/#\n", None, "c", nomatch=True)
    assert open_.may_publish("any/thing") and open_.may_subscribe("#") and open_.may_read("x")
    assert not open_.may_read("private/1") and not open_.may_publish("private/1")
    assert not open_.may_read("$SYS/x") and not open_.may_subscribe("$SYS/#") and not open_.may_publish("$SYS/x")
    sys_reader = perms("topic read $SYS/#\n", None, "c")
    assert sys_reader.may_subscribe("$SYS/broker/#") and sys_reader.may_read("$SYS/broker/uptime")
    superuser = ClientPermissions([], "root", "c", nomatch=False, superuser=True)
    assert superuser.may_read("$SYS/x") and superuser.may_publish("a") and superuser.may_subscribe("#")


def test_clientid_cannot_widen_a_pattern() -> None:
    for clientid in ("+", "#", "a/b", ""):
        client = perms("pattern readwrite devices/%c/#\n", None, clientid)
        assert not client.may_publish("devices/x/y") and not client.may_subscribe("devices/#")


def test_errors_all_at_once_with_positions() -> None:
    text = "topic read a/#\nbogus line\ntopic\nuser\ntopic read a/#/b\npattern write dev/x%c\ntopic a b\ntopic read\n"
    with pytest.raises(ConfErrors) as caught:
        parse_acl("etc/acl", text)
    lines = [str(error) for error in caught.value.errors]
    assert [line.split(": ")[0] for line in lines] == [
        "etc/acl:2:1",
        "etc/acl:3:6",
        "etc/acl:4:1",
        "etc/acl:5:12",
        "etc/acl:6:15",
        "etc/acl:7:7",
        "etc/acl:8:11",
    ], lines
    assert "unknown keyword 'bogus'" in lines[0]
    assert "%c and %u must each be a whole level" in lines[4]


def test_check_reports_acl_file_problems_with_the_config(tmp_path: Path) -> None:
    acl = tmp_path / "acl"
    acl.write_text("topic read ok/#\ntopic write bad/#/x\n")
    config = f"broker.acl.file = {acl}\nbroker.acl.backend = redis.nope\n"
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", config)
    text = str(caught.value)
    assert "bridge.conf:2:22: broker.acl.backend: no pool redis.nope" in text, text
    acl.write_text("topic write bad/#/x\n")
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", f"broker.acl.file = {acl}\n")
    assert str(caught.value).startswith(f"bridge.conf:1:19: broker.acl.file: {acl}:1:13: ")
    lines = "\n".join(f"user{n}:$7$101$c2FsdA==$aGFzaA==" for n in range(30))
    with pytest.raises(ConfErrors) as caught:
        parse_acl("passwd", lines)  # a password file named by mistake: no hash is echoed
    shown = [str(error) for error in caught.value.errors]
    assert len(shown) == 21 and shown[-1] == "passwd:21:1: 10 more problems not shown"
    assert shown[0] == "passwd:1:1: not an ACL line (use topic, pattern or user)" and "$7$" not in str(caught.value)
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", f"node.name = n\nbroker.acl.file = {tmp_path / 'missing'}\n")
    assert str(caught.value) == "bridge.conf:2:19: broker.acl.file: No such file or directory"
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", "broker.acl.backend = sqlite.x\n")
    assert (
        str(caught.value)
        == "bridge.conf:1:22: broker.acl.backend: 'sqlite.x' is not mongo.<pool>, pgsql.<pool> or redis.<pool>"
    )


def test_acl_settings_only_in_embedded_mode(tmp_path: Path) -> None:
    acl = tmp_path / "acl"
    acl.write_text("topic read a/#\n")
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", f"broker.mode = mqtt\nbroker.acl.file = {acl}\n")
    assert str(caught.value) == "bridge.conf:2:19: broker.acl.file: the ACL applies to the embedded broker only"


@given(st.lists(st.text(alphabet="topicuserpatnwdy #+/%c$\t", max_size=30), max_size=8))
def test_any_text_parses_or_says_where_it_is_wrong(lines: list[str]) -> None:
    try:
        table = parse_acl("acl", "\n".join(lines))
    except ConfErrors as exc:
        errors = exc.errors
    else:
        errors = []
    assert all(error.where.path == "acl" and 1 <= error.where.line <= len(lines) for error in errors)
    if errors:
        return
    for entry in (*table.anonymous, *table.patterns, *(e for es in table.users.values() for e in es)):
        ClientPermissions([entry], "u", "c", nomatch=False).may_subscribe("a/b")


async def test_reload_applies_to_connected_clients_and_keeps_entries_on_errors(tmp_path: Path) -> None:
    path = tmp_path / "acl"
    path.write_text("topic read a/#\n")
    from bridge.brokers.embedded.auth.aclfile import load_acl

    acl = Acl(str(path), load_acl(path), None, nomatch=False)
    client = await acl.permissions_for(None, "c1")
    assert client.may_read("a/1") and not client.may_read("b/1")
    path.write_text("topic read b/#\n")
    assert acl.reload() == []
    assert not client.may_read("a/1") and client.may_read("b/1")
    path.write_text("topic read b/#\nnonsense\n")
    assert acl.reload() == [f"{path}:2:1: unknown keyword 'nonsense' (use topic, pattern or user)"]
    assert client.may_read("b/1")


levels = st.sampled_from(["a", "b", "", "$SYS", "$x", "+", "#"])


@given(
    st.lists(levels, min_size=1, max_size=4),
    st.lists(st.sampled_from(["a", "b", "", "$SYS", "$x"]), min_size=1, max_size=5),
)
def test_compiled_filters_match_as_mqtt_does(filter_levels: list[str], topic_levels: list[str]) -> None:
    if "#" in filter_levels[:-1]:
        filter_levels = filter_levels[: filter_levels.index("#") + 1]
    topic_filter, topic = "/".join(filter_levels), "/".join(topic_levels)
    client = ClientPermissions([Entry(READ, topic_filter)], None, "c", nomatch=False)
    expected = matches(topic_filter, topic) and not topic.startswith("$SYS")

    assert (re.fullmatch(filter_regex(topic_filter), topic) is not None) == matches(topic_filter, topic)
    if not topic_filter.startswith("$SYS"):
        assert client.may_read(topic) == expected


@given(
    st.lists(levels, min_size=1, max_size=3),
    st.lists(levels, min_size=1, max_size=3),
    st.lists(st.sampled_from(["a", "b", "", "$x"]), min_size=1, max_size=4),
)
def test_covered_filters_only_match_allowed_topics(acl: list[str], sub: list[str], topic: list[str]) -> None:
    for parts in (acl, sub):
        if "#" in parts[:-1]:
            del parts[parts.index("#") + 1 :]
    acl_filter, sub_filter, name = "/".join(acl), "/".join(sub), "/".join(topic)
    if covers(tuple(acl), tuple(sub)) and matches(sub_filter, name):
        assert matches(acl_filter, name)


def test_one_check_costs_microseconds() -> None:
    """The per-message check: one publish / read test of a client with 50 entries and patterns."""
    entries = [Entry(READWRITE, f"site/{n}/+/telemetry/#") for n in range(50)] + [
        Entry(READWRITE, "devices/%c/#", substitute=True),
        Entry(READ, "site/7/secret/#", allow=False),
    ]
    client = ClientPermissions(entries, "u", "dev1", nomatch=False)
    rounds = 100_000
    start = time.perf_counter()
    for _ in range(rounds):
        client.may_read("site/42/line3/telemetry/temp")
    per_check = (time.perf_counter() - start) / rounds
    print(f"may_read with 52 entries: {per_check * 1e6:.2f} us per check")
    assert client.may_read("site/42/line3/telemetry/temp") and not client.may_read("site/7/secret/telemetry")
