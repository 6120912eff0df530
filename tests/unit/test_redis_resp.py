"""actions/redis/resp.py packs a pipeline's commands as hiredis.pack_command does, byte for byte:
hiredis is the reference (the bytes Redis has always been sent), on the compiled build too
(bridge/extensions.py lists the module; tests/packaging/test_compiled_build.py runs this there)."""

from __future__ import annotations

import math
from typing import Any

import hiredis
import pytest
from redis import exceptions as rexc

from actions.redis import resp

ARGUMENTS: list[Any] = [
    "HSET",
    "mqtt:msg:0006620D275757C68303C76153030000",  # longer than the kept strings
    "",
    "é/ü/日本",
    "x" * 24,
    "y" * 25,
    "z" * 2000,  # a header past the table
    b"",
    b"\x00\xff\r\n",
    b"p" * 1023,
    b"p" * 1024,
    0,
    -3,
    86400,
    2**70,
    -(2**64),
    1.5,
    0.1,
    1 / 3,
    1e20,
    1e-7,
    -0.0,
    math.inf,
    memoryview(b"view"),
]


def test_every_kind_of_argument_packs_as_hiredis_packs_it() -> None:
    for arg in ARGUMENTS:
        command = ("SET", "k", arg)
        assert resp.pack_commands([command]) == hiredis.pack_command(command), arg


def test_a_pipeline_is_the_commands_one_after_another() -> None:
    commands = [tuple(ARGUMENTS[i : i + 5]) for i in range(0, len(ARGUMENTS), 5)]
    commands.append(tuple(f"a{n}" for n in range(70)))  # more arguments than the header table
    packed = b"".join(hiredis.pack_command(tuple(c)) for c in commands)
    assert resp.pack_commands(commands) == packed
    assert resp.pack_commands(commands) == packed  # again, from the kept strings
    assert resp.pack_commands([]) == b""


def test_the_kept_strings_are_bounded() -> None:
    for n in range(resp._KEPT_MAX + 100):
        resp.pack_commands([("GET", f"device/{n}")])
    assert len(resp._kept) <= resp._KEPT_MAX
    assert resp.pack_commands([("GET", "device/unkept-one")]) == hiredis.pack_command(("GET", "device/unkept-one"))


@pytest.mark.parametrize("arg", [True, None, bytearray(b"ab"), ["list"], object()])
def test_what_hiredis_refuses_is_refused(arg: Any) -> None:
    with pytest.raises(TypeError):
        hiredis.pack_command(("SET", "k", arg))
    with pytest.raises(TypeError, match="must be str, int, float or bytes"):
        resp.pack_commands([("SET", "k", arg)])


def test_a_string_utf8_cannot_encode_is_refused_as_hiredis_refuses_it() -> None:
    for pack in (lambda c: hiredis.pack_command(c), lambda c: resp.pack_commands([c])):
        with pytest.raises(UnicodeEncodeError):
            pack(("SET", "k", "\udcff"))


def test_a_readonly_reply_is_found_among_the_others() -> None:
    """packing.pipeline_on drops a connection that has reached a replica (a Sentinel failover)."""
    others: list[Any] = [1, 0, b"x", None, [1, b"y"], rexc.ResponseError("ERR x"), rexc.NoScriptError("NOSCRIPT")]
    assert not resp.any_read_only(others)
    assert not resp.any_read_only([])
    assert resp.any_read_only([*others, rexc.ReadOnlyError("READONLY You can't write against a read only replica.")])
