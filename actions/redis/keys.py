"""The Redis key layout (docs/backends/redis.md#keys; EMQX 4's, seed 003), in one place."""

from __future__ import annotations

from bridge.msgid import timestamp_us

PREFIX = b"mqtt:"
EVENT_LOG = b"mqtt:event_log"
TOPIC_LIST_PREFIX = MESSAGE_PREFIX = b"mqtt:msg:"  # topics and msgids share it (seed 003)
RETAIN_PREFIX = b"mqtt:retain:"

# The topic index (index.py). Every other key is a fixed prefix (`mqtt:msg:`, `mqtt:retain:`,
# `mqtt:client:`, `mqtt:node:`, `mqtt:sub:`, `mqtt:acked:`) followed by a topic, msgid or
# clientid, or a fixed name (`mqtt:event_log`, `mqtt:acked_owner`). `mqtt:index:` is none of
# those prefixes and starts none of them, so no topic or clientid can name an index key:
# topic `index:msg` is `mqtt:msg:index:msg`.
INDEX_PREFIX = b"mqtt:index:"
MSG_INDEX = INDEX_PREFIX + b"msg"
RETAIN_INDEX = INDEX_PREFIX + b"retain"
INDEX_BUILT = INDEX_PREFIX + b"built"
# On a Redis Cluster the index is two keys per kind, the sorted set and a hash of stamps (a
# counter per topic, moved by every write of it), which a trim compares before it drops an entry
# (cluster_scripts.INDEX_DROP). A script may only touch keys of one slot: the hash tag `{msg}`
# puts both there. No EMQX tool reads the index.
CLUSTER_MSG_INDEX = INDEX_PREFIX + b"{msg}"
CLUSTER_MSG_STAMPS = INDEX_PREFIX + b"{msg}:stamps"
CLUSTER_RETAIN_INDEX = INDEX_PREFIX + b"{retain}"
CLUSTER_RETAIN_STAMPS = INDEX_PREFIX + b"{retain}:stamps"


def enc(text: str) -> bytes:
    # clientids and topics arrive as str; surrogateescape keeps any byte intact. Strict UTF-8
    # first: the same bytes for any text without a lone surrogate, and naming no error handler
    # spares a codec lookup per call (several per stored message).
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def dec(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def client(clientid: str) -> bytes:
    return b"mqtt:client:" + enc(clientid)


def node(name: str) -> bytes:
    return b"mqtt:node:" + enc(name)


def subs(clientid: str) -> bytes:
    return b"mqtt:sub:" + enc(clientid)


def topic_list(topic: str) -> bytes:
    return TOPIC_LIST_PREFIX + enc(topic)


def message(msgid: str) -> bytes:
    return MESSAGE_PREFIX + msgid.encode()


def retain(topic: str) -> bytes:
    return RETAIN_PREFIX + enc(topic)


def acked(clientid: str, topic_filter: str) -> bytes:
    return b"mqtt:acked:" + enc(clientid) + b":" + enc(topic_filter)


# Who owns an offset key that two (clientid, filter) pairs could share: field = the
# `mqtt:acked:...` key, value = the client id. `mqtt:acked:<clientid>:<filter>` is ambiguous only
# when a `:` stands in the client id or the filter (`a:b` + `c` and `a` + `b:c` give one key),
# and two pairs can share a key only if both are ambiguous; so plain pairs, nearly all of them,
# never get an entry, and their keys and values stay exactly seed 003's.
ACKED_OWNER = b"mqtt:acked_owner"


def acked_ambiguous(clientid: str, topic_filter: str) -> bool:
    return ":" in clientid or ":" in topic_filter


def score(msgid: str) -> int:
    """Publish time in ms, taken from the id so score order is id order."""
    return timestamp_us(msgid) // 1000


def glob_escape(text: str) -> bytes:
    """Escape a literal for SCAN MATCH."""
    out = bytearray()
    for byte in enc(text):
        if byte in b"*?[]\\":
            out += b"\\"
        out.append(byte)
    return bytes(out)
