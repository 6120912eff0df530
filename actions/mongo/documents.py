"""Event values as BSON: the message order key, payloads, timestamps.

Everything here turns event data into document *values*. Field names always come
from hookbridge's code or a template's text, never from event data, which is what
keeps a payload such as `{"$where": "..."}` from ever being read as an operator.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from bson.int64 import Int64

# BSON nests at most 100 levels; leave room for the fields around the payload.
_MAX_DEPTH = 90
_INT64 = (-(1 << 63), (1 << 63) - 1)


def when(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def seq_of(msgid: str) -> Int64:
    """The message's order key: the 64-bit microsecond time at the head of its id.

    Assigned when the broker accepted the message (hookbridge's id generator keeps it
    increasing per node even if the clock steps back), not by the database at write
    time: writes run in parallel lanes, so a database counter would number messages
    in write order, and a wildcard fetch needs publish order across topics. Ties (two
    nodes in one microsecond) are broken by the msgid, which is why the index is
    (topic, seq, _id) and every fetch sorts on (seq, _id): the same order as the msgid.
    """
    try:
        return Int64(int(msgid[:16], 16) & 0x7FFF_FFFF_FFFF_FFFF)
    except ValueError:
        return Int64(0)  # not a hookbridge / EMQX id: sorts first, then by msgid


def payload_value(payload: bytes, payload_format: str) -> Any:
    """What goes in a document's `payload` field.

    `plain_text`: the bytes (BSON binary). `json`: the parsed value when the payload is
    JSON that MongoDB can hold as data, else the bytes. Field names that start with `$`,
    contain `.` or NUL, integers beyond 64 bits and very deep nesting keep it as bytes:
    such names would reach the server as field names (operators, paths), and servers
    disagree about accepting them.
    """
    if payload_format != "json" or not payload:
        return payload
    try:
        value = json.loads(payload, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError):
        return payload
    return value if _storable(value, 0) else payload


def payload_bytes(stored: Any) -> bytes:
    """A stored payload back as the bytes to deliver."""
    if isinstance(stored, bytes):
        return stored
    return json.dumps(stored, separators=(",", ":"), ensure_ascii=False).encode()


def exact_json(payload: bytes, value: Any) -> bool:
    """True when the parsed value serializes back to exactly the published bytes."""
    return isinstance(payload, bytes) and value is not payload and payload_bytes(value) == payload


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _storable(value: Any, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(
            isinstance(key, str) and _plain_field_name(key) and _storable(item, depth + 1)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return all(_storable(item, depth + 1) for item in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return _INT64[0] <= value <= _INT64[1]
    return True


def _plain_field_name(key: str) -> bool:
    return not key.startswith("$") and "." not in key and "\x00" not in key
