"""A pipeline's RESP both ways: its commands packed (the bytes `hiredis.pack_command` gives, a
third faster), its replies taken from redis-py's hiredis reader in one loop (`read_replies`).

Compiled with the per-message path (bridge/extensions.py): every message `rules/redis.conf`
keeps is four commands of 27 arguments, and hiredis's generic packing (a `sprintf` per argument)
was a tenth of the bridge's CPU on that path (py-spy, docs/benchmarks.md#redis-commands-packed-once).
Most of those arguments are the same short strings every time (the command names, the hash's
field names, a device's topic and client id): their RESP form is kept in a bounded table, so a
message packs its msgid, payload and numbers and copies the rest.

The message store's four commands (actions/redis/functions.py) come already packed, as `Packed`,
which this copies as it is: 14 of their 27 arguments never change, and their RESP is made once.

What is accepted is what hiredis accepts, packed the same way (tests/unit/test_redis_resp.py
compares the two byte for byte): str (UTF-8), bytes, memoryview, int (not bool), float (its
repr); anything else is a TypeError, as there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from redis import exceptions as rexc
from redis._parsers.hiredis import NOT_ENOUGH_DATA

_HEADERS: Final = 1024
_LENGTHS: Final = [b"$%d\r\n" % n for n in range(_HEADERS)]  # a bulk string's header, by length
_COUNTS: Final = [b"*%d\r\n" % n for n in range(64)]  # a command's header, by its argument count
# Strings up to this many characters have their packed form kept, up to this many of them
# (constants and a fleet's first topics and client ids; later ones are packed each time).
_KEPT_LENGTH: Final = 24
_KEPT_MAX: Final = 4096
_kept: dict[str, bytes] = {}


class Packed:
    """One command already in RESP, which `pack_commands` copies as it is: the message store's
    commands, which actions/redis/functions.py packs itself (most of their arguments never change)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data: Final = data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Packed) and other.data == self.data

    def __hash__(self) -> int:
        return hash(self.data)

    def __repr__(self) -> str:
        return f"Packed({self.data!r})"


def head(count: int) -> bytes:
    """A command's header: how many arguments follow (its name included)."""
    return _COUNTS[count] if count < 64 else b"*%d\r\n" % count


def bulk(data: bytes) -> bytes:
    """One argument, packed."""
    return bulk_header(len(data)) + data + b"\r\n"


def bulk_header(size: int) -> bytes:
    """The header of an argument of `size` bytes (then the bytes, then CRLF): for a payload,
    which is not copied into a bulk of its own first."""
    return _LENGTHS[size] if size < _HEADERS else b"$%d\r\n" % size


def bulk_int(number: int) -> bytes:
    """An integer argument, packed as its decimal digits (as hiredis and redis-py send it)."""
    return bulk(b"%d" % number)


def pack_commands(commands: Sequence[Sequence[Any] | Packed]) -> bytes:
    """The commands, in order, as one RESP buffer for one write."""
    parts: list[bytes] = []
    for command in commands:
        if isinstance(command, Packed):
            parts.append(command.data)
            continue
        parts.append(head(len(command)))
        for arg in command:
            if isinstance(arg, str):
                if len(arg) <= _KEPT_LENGTH:
                    packed = _kept.get(arg)
                    if packed is None:
                        packed = bulk(arg.encode())
                        if len(_kept) < _KEPT_MAX:
                            _kept[arg] = packed
                    parts.append(packed)
                    continue
                data = arg.encode()
            elif isinstance(arg, bytes):
                data = arg
            elif type(arg) is int:  # not bool, which hiredis refuses
                data = b"%d" % arg
            elif isinstance(arg, float):
                data = repr(arg).encode()
            elif isinstance(arg, memoryview):
                data = arg.tobytes()
            else:
                raise TypeError("A tuple item must be str, int, float or bytes.")
            parts.append(bulk_header(len(data)))
            parts.append(data)
            parts.append(b"\r\n")
    return b"".join(parts)


async def read_replies(parser: Any, count: int) -> list[Any]:
    """`count` replies from redis-py's hiredis parser, as its `read_response` gives them one at a
    time (a reply that is, or begins with, a ConnectionError is raised; other error replies are
    returned as exception objects), without a coroutine per reply. Protocol 2 only (every pool
    here: actions/redis/clients.py): no push notifications come between the replies."""
    if not parser._connected:
        raise rexc.ConnectionError("Connection closed by server.")
    reader = parser._reader
    replies: list[Any] = []
    while len(replies) < count:
        reply = reader.gets()
        if reply is NOT_ENOUGH_DATA:
            await parser.read_from_socket()
            continue
        if type(reply) is not int:  # most replies of a write are counts: no class check for them
            if isinstance(reply, rexc.ConnectionError):
                raise reply
            if type(reply) is list and reply and isinstance(reply[0], rexc.ConnectionError):
                raise reply[0]
        replies.append(reply)
    return replies


def any_read_only(replies: list[Any]) -> bool:
    """Whether one of the replies is READONLY: the connection is to a replica (packing.py).
    Here, compiled, because it looks at every reply of every batch."""
    return any(type(reply) is not int and isinstance(reply, rexc.ReadOnlyError) for reply in replies)
