"""A pipeline's RESP both ways: its commands packed (the bytes `hiredis.pack_command` gives, a
third faster), its replies taken from redis-py's hiredis reader in one loop (`read_replies`).

Compiled with the per-message path (bridge/extensions.py): every message `rules/redis.conf`
keeps is four commands of 27 arguments, and hiredis's generic packing (a `sprintf` per argument)
was a tenth of the bridge's CPU on that path (py-spy, docs/benchmarks.md#redis-commands-packed-once).
Most of those arguments are the same short strings every time (the command names, the hash's
field names, a device's topic and client id): their RESP form is kept in a bounded table, so a
message packs its msgid, payload and numbers and copies the rest.

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


def pack_commands(commands: Sequence[Sequence[Any]]) -> bytes:
    """The commands, in order, as one RESP buffer for one write."""
    parts: list[bytes] = []
    for command in commands:
        count = len(command)
        parts.append(_COUNTS[count] if count < 64 else b"*%d\r\n" % count)
        for arg in command:
            if isinstance(arg, str):
                if len(arg) <= _KEPT_LENGTH:
                    packed = _kept.get(arg)
                    if packed is None:
                        packed = _bulk(arg.encode())
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
            size = len(data)
            parts.append(_LENGTHS[size] if size < _HEADERS else b"$%d\r\n" % size)
            parts.append(data)
            parts.append(b"\r\n")
    return b"".join(parts)


def _bulk(data: bytes) -> bytes:
    size = len(data)
    return (_LENGTHS[size] if size < _HEADERS else b"$%d\r\n" % size) + data + b"\r\n"


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
        if isinstance(reply, rexc.ConnectionError):
            raise reply
        if type(reply) is list and reply and isinstance(reply[0], rexc.ConnectionError):
            raise reply[0]
        replies.append(reply)
    return replies
