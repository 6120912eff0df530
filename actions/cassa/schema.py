"""The Cassandra keyspace and tables (docs/backends/cassa.md#keyspace-and-tables), created idempotently
(`schema --apply`, `auto_schema = on`).

Every statement is safe to run again. Table names are qualified with the pool's
keyspace; the keyspace name is checked to be a plain identifier when the config
loads, so it can be written into statement text.
"""

from __future__ import annotations

from typing import Any

# Stored messages are partitioned by (topic, hour of the msgid's timestamp): a partition holds at most
# one hour of one topic, and a replayed message lands in the partition it was first written to.
BUCKET_SECONDS = 3600

TABLES: tuple[str, ...] = (
    # Online status. Written with USING TIMESTAMP = the event's time: Cassandra keeps the cell with the
    # newest write timestamp, so a late `connected` cannot overwrite a newer `disconnected`.
    """CREATE TABLE IF NOT EXISTS {ks}.client (
    clientid text PRIMARY KEY,
    state tinyint,
    node text,
    online_at timestamp,
    offline_at timestamp
)""",
    # Proxy subscriptions: written by applications, read by on_subscribe_lookup.
    """CREATE TABLE IF NOT EXISTS {ks}.sub (
    clientid text,
    topic text,
    qos int,
    PRIMARY KEY ((clientid), topic)
)""",
    # Stored messages, one partition per (topic, hour), in msgid (publish) order. expired_time is the TTL.
    """CREATE TABLE IF NOT EXISTS {ks}.msg (
    topic text,
    bucket int,
    msgid text,
    sender text,
    qos tinyint,
    retain boolean,
    payload blob,
    arrived timestamp,
    PRIMARY KEY ((topic, bucket), msgid)
) WITH CLUSTERING ORDER BY (msgid ASC)""",
    # Which hour buckets of a topic have (or had) messages: a fetch walks them oldest first.
    """CREATE TABLE IF NOT EXISTS {ks}.msg_bucket (
    topic text,
    bucket int,
    PRIMARY KEY ((topic), bucket)
) WITH CLUSTERING ORDER BY (bucket ASC)""",
    # Every topic with stored or retained messages, by its first level: a wildcard fetch or retain
    # lookup reads the partition of the filter's first level (every partition for `#` / `+/...`)
    # and matches topics by MQTT rules in Python.
    """CREATE TABLE IF NOT EXISTS {ks}.topic (
    root text,
    topic text,
    PRIMARY KEY ((root), topic)
)""",
    # Retained messages, written with USING TIMESTAMP = the msgid's time: the newest message wins, and a
    # delete (a tombstone at the empty publish's time) removes only older ones.
    """CREATE TABLE IF NOT EXISTS {ks}.retain (
    topic text PRIMARY KEY,
    msgid text,
    sender text,
    qos tinyint,
    payload blob,
    arrived timestamp
)""",
    # Pubsub offsets per (client, subscription filter): msgid is the last acked message ('' before
    # everything). Moved only by lightweight transactions (IF msgid < new), so never backwards.
    """CREATE TABLE IF NOT EXISTS {ks}.acked (
    clientid text,
    topic text,
    msgid text,
    PRIMARY KEY ((clientid), topic)
)""",
    # The append-only event log (section 8's fact table), one partition per UTC day.
    """CREATE TABLE IF NOT EXISTS {ks}.event_log (
    day date,
    ts timestamp,
    id text,
    event text,
    clientid text,
    username text,
    node text,
    topic text,
    qos tinyint,
    bytes int,
    reason text,
    peername text,
    msgid text,
    PRIMARY KEY ((day), ts, id)
) WITH CLUSTERING ORDER BY (ts ASC, id ASC)""",
)


def _literal(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return "'" + text.replace("'", "''") + "'"


def keyspace_statement(keyspace: str, replication: dict[str, Any]) -> str:
    pairs = ", ".join(f"{_literal(key)}: {_literal(value)}" for key, value in replication.items())
    return f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {{{pairs}}}"


def statements(keyspace: str, replication: dict[str, Any]) -> list[str]:
    return [keyspace_statement(keyspace, replication), *(t.format(ks=keyspace) for t in TABLES)]


def describe(keyspace: str, replication: dict[str, Any]) -> str:
    return ";\n\n".join(statements(keyspace, replication)) + ";\n"
