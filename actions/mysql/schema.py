"""The MySQL / MariaDB tables (docs/backends/mysql.md#tables: PostgreSQL's tables in MySQL types), created idempotently.

Every statement is safe to run again: a migration is a new `IF NOT EXISTS` line
appended here, never an edit of an old one.

Client ids, topics and message ids compare byte for byte and with no trailing-space padding
(MQTT topics `a` and `a ` are two topics): the text columns use a binary NO PAD collation,
MariaDB's `utf8mb4_nopad_bin` or MySQL 8's `utf8mb4_0900_bin`, whichever the server has.
Key lengths fit InnoDB's 3072-byte index limit: a client id of up to 256 characters (the
broker's default `broker.max_clientid_len`), a topic of up to 512.
"""

from __future__ import annotations

# The collation the bridge asks for first, then the fallback (MySQL 8 has no nopad_bin).
COLLATIONS = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin")

_TABLE = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation}"

_SCHEMA: tuple[str, ...] = (
    # Online status. event_at is the time of the event that last wrote the row:
    # a late `connected` cannot overwrite a newer `disconnected` (last writer wins by event time).
    """CREATE TABLE IF NOT EXISTS mqtt_client (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    clientid varchar(256) NOT NULL UNIQUE,
    state tinyint NOT NULL DEFAULT 0,
    node varchar(255),
    online_at datetime(6),
    offline_at datetime(6),
    event_at datetime(6) NOT NULL,
    created datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) """
    + _TABLE,
    # Proxy subscriptions: written by applications, read by on_subscribe_lookup.
    """CREATE TABLE IF NOT EXISTS mqtt_sub (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    clientid varchar(256) NOT NULL,
    topic varchar(512) NOT NULL,
    qos tinyint NOT NULL DEFAULT 1 CHECK (qos BETWEEN 0 AND 2),
    created datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    UNIQUE KEY mqtt_sub_clientid_topic (clientid, topic)
) """
    + _TABLE,
    # Stored messages. msgid is time-ordered (publish order, also across publishers and topics,
    # which insert order is not: writes run in several lanes) and makes writes idempotent.
    """CREATE TABLE IF NOT EXISTS mqtt_msg (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    msgid varchar(32) NOT NULL UNIQUE,
    sender varchar(256) NOT NULL,
    topic varchar(512) NOT NULL,
    qos tinyint NOT NULL,
    retain boolean NOT NULL DEFAULT false,
    payload longblob NOT NULL,
    arrived datetime(6) NOT NULL,
    expires_at datetime(6),
    KEY mqtt_msg_topic_msgid (topic, msgid),
    KEY mqtt_msg_expires_at (expires_at)
) """
    + _TABLE,
    # Every topic that has stored messages: wildcard fetch finds its topics here by an index
    # range on the filter's literal prefix, then reads each topic by (topic, msgid).
    "CREATE TABLE IF NOT EXISTS mqtt_topic (topic varchar(512) NOT NULL PRIMARY KEY) " + _TABLE,
    """CREATE TABLE IF NOT EXISTS mqtt_retain (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    topic varchar(512) NOT NULL UNIQUE,
    msgid varchar(32) NOT NULL,
    sender varchar(256) NOT NULL,
    qos tinyint NOT NULL,
    payload longblob NOT NULL,
    arrived datetime(6) NOT NULL
) """
    + _TABLE,
    # Pubsub offsets per (client, subscription filter): msgid is the last acked message ('': before
    # everything), mid its mqtt_msg.id (0 before everything, or while its row is not written yet).
    # No foreign key: expired messages are deleted.
    """CREATE TABLE IF NOT EXISTS mqtt_acked (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    clientid varchar(256) NOT NULL,
    topic varchar(512) NOT NULL,
    msgid varchar(32) NOT NULL DEFAULT '',
    mid bigint NOT NULL DEFAULT 0,
    created datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    UNIQUE KEY mqtt_acked_clientid_topic (clientid, topic)
) """
    + _TABLE,
    """CREATE TABLE IF NOT EXISTS mqtt_event_log (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event varchar(32) NOT NULL,
    clientid varchar(256),
    username text,
    node varchar(255),
    topic text,
    qos tinyint,
    bytes int,
    reason text,
    peername varchar(255),
    msgid varchar(32),
    ts datetime(6) NOT NULL,
    KEY mqtt_event_log_ts (ts)
) """
    + _TABLE,
    # A retained MQTT 5 message's expiry (arrived + its message expiry interval); NULL: none.
    # MySQL 8 has no ADD COLUMN IF NOT EXISTS: the backend passes over "duplicate column" (1060).
    "ALTER TABLE mqtt_retain ADD COLUMN expires_at datetime(6)",
)

TABLES = ("mqtt_client", "mqtt_sub", "mqtt_msg", "mqtt_topic", "mqtt_retain", "mqtt_acked", "mqtt_event_log")


def statements(collation: str = COLLATIONS[0]) -> list[str]:
    return [statement.format(collation=collation) for statement in _SCHEMA]


def describe(collation: str = COLLATIONS[0]) -> str:
    return ";\n\n".join(statements(collation)) + ";\n"
