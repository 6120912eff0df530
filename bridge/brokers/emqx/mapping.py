"""EMQX 5 payloads -> hookbridge events (the table is in docs/brokers.md).

Client lifecycle comes from system messages
`$SYS/brokers/<node>/clients/<clientid>/{connected,disconnected,subscribed,unsubscribed}`;
message.delivered / message.acked from the rule engine's `$events/message_delivered` and
`$events/message_acked`, republished by a rule (payload `${.}`) under the event topic.
Timestamps are milliseconds; message ids are EMQX's own (32 hex characters), taken as given.
A payload that is not the JSON object expected is ignored (and counted by the caller).
"""

from __future__ import annotations

import json
import time
from typing import Any

from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    Event,
    MessageAcked,
    MessageDelivered,
    SessionSubscribed,
    SessionUnsubscribed,
)

SYS_ROOT = "$SYS"


def sys_filter(root: str = SYS_ROOT) -> str:
    return f"{root}/brokers/+/clients/+/+"


def _doc(payload: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _seconds(doc: dict[str, Any], *keys: str) -> float:
    for key in keys:
        value = doc.get(key)
        if isinstance(value, int | float) and value > 0:
            return value / 1000.0
    return time.time()


def _peer(doc: dict[str, Any]) -> str:
    ip = doc.get("ipaddress") or doc.get("peername") or ""
    port = doc.get("sockport")  # EMQX gives the listener port, not the client's: kept as EMQX says it
    return f"{ip}:{port}" if ip and port and ":" not in str(ip) else str(ip)


def sys_event(topic: str, payload: bytes, root: str = SYS_ROOT) -> Event | None:
    """An event from `$SYS/brokers/<node>/clients/<clientid>/<what>`; None for anything else.

    `root` replaces `$SYS` only in tests: Mosquitto, the broker they run on, drops
    messages that clients publish under `$SYS`."""
    if not topic.startswith(root + "/"):
        return None
    parts = ["$SYS", *topic[len(root) + 1 :].split("/")]
    if len(parts) < 6 or parts[:2] != ["$SYS", "brokers"] or parts[3] != "clients":
        return None
    node, what = parts[2], parts[-1]
    doc = _doc(payload)
    if doc is None:
        return None
    # A client id may contain '/': the payload's clientid is authoritative, the topic a fallback.
    clientid = str(doc.get("clientid") or "/".join(parts[4:-1]))
    username = doc.get("username") or None
    if what == "connected":
        clean = doc.get("clean_start", doc.get("clean_session", True))
        return ClientConnected(
            clientid, username, node, _peer(doc), _seconds(doc, "connected_at", "ts"), clean_session=bool(clean)
        )
    if what == "disconnected":
        reason = str(doc.get("reason") or "normal")
        return ClientDisconnected(clientid, username, node, _peer(doc), reason, _seconds(doc, "disconnected_at", "ts"))
    topic_filter = doc.get("topic")
    if not isinstance(topic_filter, str):
        return None
    if what == "subscribed":
        opts = doc.get("subopts") if isinstance(doc.get("subopts"), dict) else {}
        assert isinstance(opts, dict)
        is_new = opts.get("is_new", True)
        return SessionSubscribed(
            clientid, username, node, topic_filter, int(opts.get("qos", 0)), _seconds(doc, "ts"), is_new=bool(is_new)
        )
    if what == "unsubscribed":
        return SessionUnsubscribed(clientid, username, node, topic_filter, _seconds(doc, "ts"))
    return None


def _payload_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value).encode() if value is not None else b""


def rule_event(payload: bytes) -> Event | None:
    """message.delivered / message.acked from a rule-engine event republished as `${.}`."""
    doc = _doc(payload)
    if doc is None:
        return None
    kinds: dict[str, type[MessageDelivered] | type[MessageAcked]] = {
        "message.delivered": MessageDelivered,
        "message.acked": MessageAcked,
    }
    kind = kinds.get(str(doc.get("event")))
    if kind is None or not doc.get("id") or not isinstance(doc.get("topic"), str):
        return None
    flags = doc.get("flags") if isinstance(doc.get("flags"), dict) else {}
    assert isinstance(flags, dict)
    event: Event = kind(
        msgid=str(doc["id"]),
        clientid=str(doc.get("clientid") or ""),
        username=doc.get("username") or None,
        from_clientid=str(doc.get("from_clientid") or ""),
        topic=doc["topic"],
        qos=int(doc.get("qos") or 0),
        payload=_payload_bytes(doc.get("payload")),
        retain=bool(flags.get("retain", False)),
        node=str(doc.get("node") or ""),
        timestamp=_seconds(doc, "timestamp", "publish_received_at"),
    )
    return event
