"""The MongoDB collections (docs/backends/mongo.md#collections) and their indexes
(`schema --apply`, `auto_schema = on`).

Collections are created by their first index. Creating an index that exists is a no-op, so
applying twice, or from two bridges at once, changes nothing; a migration is a new line here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Index:
    collection: str
    keys: tuple[tuple[str, int], ...]
    name: str
    options: dict[str, Any] = field(default_factory=dict)


COLLECTIONS = ("mqtt_client", "mqtt_sub", "mqtt_msg", "mqtt_topic", "mqtt_retain", "mqtt_acked", "mqtt_event_log")

INDEXES: tuple[Index, ...] = (
    Index("mqtt_client", (("clientid", 1),), "clientid", {"unique": True}),
    Index("mqtt_sub", (("clientid", 1), ("topic", 1)), "clientid_topic", {"unique": True}),
    # Fetch: one topic (or a few, $in) in publish order. _id is the msgid.
    Index("mqtt_msg", (("topic", 1), ("seq", 1), ("_id", 1)), "topic_seq"),
    Index("mqtt_retain", (("topic", 1),), "topic", {"unique": True}),
    Index("mqtt_acked", (("clientid", 1), ("topic", 1)), "clientid_topic", {"unique": True}),
    Index("mqtt_event_log", (("ts", 1),), "ts"),
    Index("mqtt_event_log", (("clientid", 1), ("ts", 1)), "clientid_ts"),
    # mqtt_topic needs only its _id (the topic): wildcard fetch ranges over it.
)

# Message expiry: a TTL index where the server has them (the server deletes expired
# documents about once a minute), else the same keys as a plain index for the periodic delete.
EXPIRY = Index("mqtt_msg", (("expires_at", 1),), "expires_at")
TTL_OPTIONS: dict[str, Any] = {"expireAfterSeconds": 0}


def _line(index: Index, options: dict[str, Any]) -> str:
    keys = ", ".join(f"{name}: {direction}" for name, direction in index.keys)
    opts = json.dumps({"name": index.name, **options})
    return f"db.{index.collection}.createIndex({{{keys}}}, {opts})"


def describe(ttl: bool | None = None) -> str:
    """The schema in mongosh syntax."""
    lines = [f"db.createCollection({json.dumps(name)})" for name in COLLECTIONS]
    lines += [_line(index, index.options) for index in INDEXES]
    if ttl is not False:
        lines.append(_line(EXPIRY, TTL_OPTIONS))
    if ttl is not True:
        comment = "where TTL indexes are refused" if ttl is None else "this server refuses TTL indexes"
        lines.append(f"// {comment}: periodic delete of expired messages instead, using")
        lines.append(_line(EXPIRY, {}))
    return "\n".join(lines) + "\n"
