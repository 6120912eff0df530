"""A queued action as bytes and back: what a spool record holds.

A record is the rule's id, the paged-fetch cursor and the event: a small JSON header
with every field but the payload, then the payload bytes as they are (a 1 MB payload
is not base64-inflated). The rule is looked up again by id when the record is read,
so a spool written before a restart replays against the rules loaded now.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, fields
from typing import Any

from bridge.errors import HookbridgeError
from bridge.events import EVENT_TYPES, Event, Hookpoint

_HEADER = struct.Struct("<I")  # header length


@dataclass(frozen=True, slots=True)
class Record:
    rule_id: str
    event: Event
    cursor: str | None
    seq: int = 0  # the runner's submission number, meaningful to the process that wrote it
    process: str = ""


class RecordError(HookbridgeError, ValueError):
    """A record that passed its checksum but does not decode (a spool from another version)."""


def encode(rule_id: str, event: Event, cursor: str | None, seq: int = 0, process: str = "") -> bytes:
    values: dict[str, Any] = {}
    payload = b""
    for item in fields(event):
        value = getattr(event, item.name)
        if item.name == "payload":
            payload = value
        elif isinstance(value, frozenset | tuple):
            values[item.name] = sorted(value) if isinstance(value, frozenset) else list(value)
        else:
            values[item.name] = value
    header = json.dumps(
        {"r": rule_id, "h": str(event.hookpoint), "c": cursor, "s": seq, "p": process, "f": values}
    ).encode()
    return _HEADER.pack(len(header)) + header + payload


def decode(body: bytes) -> Record:
    try:
        (length,) = _HEADER.unpack_from(body)
        header = json.loads(body[_HEADER.size : _HEADER.size + length])
        event_type = EVENT_TYPES[Hookpoint(header["h"])]
        values = header["f"]
        for item in fields(event_type):
            if item.name == "payload":
                values["payload"] = bytes(body[_HEADER.size + length :])
            elif item.name == "retained_sent":
                values[item.name] = frozenset(values.get(item.name, ()))
            elif item.name == "filters":
                values[item.name] = tuple(values.get(item.name, ()))
            elif item.name == "user_properties":
                values[item.name] = tuple((str(k), str(v)) for k, v in values.get(item.name, ()))
        return Record(header["r"], event_type(**values), header["c"], header.get("s", 0), header.get("p", ""))
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise RecordError(f"undecodable spool record: {exc}") from None
