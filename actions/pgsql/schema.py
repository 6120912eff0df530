"""The PostgreSQL tables (docs/backends/pgsql.md#tables), created idempotently (`schema --apply`, `auto_schema = on`).

Every statement is safe to run again: a migration is a new `IF NOT EXISTS` line
appended here, never an edit of an old one.
"""

from __future__ import annotations

SCHEMA: tuple[str, ...] = (
    # Online status. event_at is the time of the event that last wrote the row:
    # a late `connected` cannot overwrite a newer `disconnected` (last writer wins by event time).
    """CREATE TABLE IF NOT EXISTS mqtt_client (
    id bigserial PRIMARY KEY,
    clientid text NOT NULL UNIQUE,
    state smallint NOT NULL DEFAULT 0,
    node text,
    online_at timestamptz,
    offline_at timestamptz,
    event_at timestamptz NOT NULL,
    created timestamptz NOT NULL DEFAULT now()
)""",
    # Proxy subscriptions: written by applications, read by on_subscribe_lookup.
    """CREATE TABLE IF NOT EXISTS mqtt_sub (
    id bigserial PRIMARY KEY,
    clientid text NOT NULL,
    topic text NOT NULL,
    qos smallint NOT NULL DEFAULT 1 CHECK (qos BETWEEN 0 AND 2),
    created timestamptz NOT NULL DEFAULT now(),
    UNIQUE (clientid, topic)
)""",
    # Stored messages. msgid is time-ordered (publish order, also across publishers and topics,
    # which insert order is not: writes run in several lanes) and makes writes idempotent.
    """CREATE TABLE IF NOT EXISTS mqtt_msg (
    id bigserial PRIMARY KEY,
    msgid text NOT NULL UNIQUE,
    sender text NOT NULL,
    topic text NOT NULL,
    qos smallint NOT NULL,
    retain boolean NOT NULL DEFAULT false,
    payload bytea NOT NULL,
    arrived timestamptz NOT NULL,
    expires_at timestamptz
)""",
    "CREATE INDEX IF NOT EXISTS mqtt_msg_topic_msgid ON mqtt_msg (topic, msgid)",
    "CREATE INDEX IF NOT EXISTS mqtt_msg_expires_at ON mqtt_msg (expires_at) WHERE expires_at IS NOT NULL",
    # Every topic that has stored messages: wildcard fetch finds its topics here by
    # an index range on the filter's literal prefix, then reads each topic by (topic, id).
    """CREATE TABLE IF NOT EXISTS mqtt_topic (
    topic text PRIMARY KEY
)""",
    "CREATE INDEX IF NOT EXISTS mqtt_topic_prefix ON mqtt_topic (topic text_pattern_ops)",
    """CREATE TABLE IF NOT EXISTS mqtt_retain (
    id bigserial PRIMARY KEY,
    topic text NOT NULL UNIQUE,
    msgid text NOT NULL,
    sender text NOT NULL,
    qos smallint NOT NULL,
    payload bytea NOT NULL,
    arrived timestamptz NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS mqtt_retain_prefix ON mqtt_retain (topic text_pattern_ops)",
    # Pubsub offsets per (client, subscription filter): msgid is the last acked message ('': before
    # everything), mid its mqtt_msg.id (0 before everything, or while its row is not written yet).
    # No foreign key: expired messages are deleted.
    """CREATE TABLE IF NOT EXISTS mqtt_acked (
    id bigserial PRIMARY KEY,
    clientid text NOT NULL,
    topic text NOT NULL,
    msgid text NOT NULL DEFAULT '',
    mid bigint NOT NULL DEFAULT 0,
    created timestamptz NOT NULL DEFAULT now(),
    UNIQUE (clientid, topic)
)""",
    """CREATE TABLE IF NOT EXISTS mqtt_event_log (
    id bigserial PRIMARY KEY,
    event text NOT NULL,
    clientid text,
    username text,
    node text,
    topic text,
    qos smallint,
    bytes integer,
    reason text,
    peername text,
    msgid text,
    ts timestamptz NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS mqtt_event_log_ts ON mqtt_event_log (ts)",
    # A retained MQTT 5 message's expiry (arrived + its message expiry interval); NULL: none.
    "ALTER TABLE mqtt_retain ADD COLUMN IF NOT EXISTS expires_at timestamptz",
)


def describe() -> str:
    return ";\n\n".join(SCHEMA) + ";\n"
