"""EMQX 5 (and 4.4) payloads -> hookbridge events (the table is in docs/brokers.md).

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
    DEFAULT_PROTO_VER,
    ClientConnected,
    ClientDisconnected,
    Event,
    MessageAcked,
    MessageDelivered,
    SessionSubscribed,
    SessionUnsubscribed,
    UserProperties,
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


def _proto_ver(doc: dict[str, Any]) -> int:
    """EMQX's `proto_ver` (3, 4 or 5); 3.1.1's when the payload has none (or an odd one)."""
    value = doc.get("proto_ver")
    return value if value in (3, 4, 5) and not isinstance(value, bool) else DEFAULT_PROTO_VER


def _user_properties(doc: dict[str, Any]) -> UserProperties:
    """The message's user properties from `pub_props`: `User-Property-Pairs` keeps their order and
    repeats (EMQX 5.1 and later); older nodes give only the `User-Property` object."""
    props = doc.get("pub_props")
    if not isinstance(props, dict):
        return ()
    pairs = props.get("User-Property-Pairs")
    if isinstance(pairs, list):
        found = [(p.get("key"), p.get("value")) for p in pairs if isinstance(p, dict)]
    else:
        by_name = props.get("User-Property")
        found = list(by_name.items()) if isinstance(by_name, dict) else []
    return tuple((k, v) for k, v in found if isinstance(k, str) and isinstance(v, str))


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
            clientid,
            username,
            node,
            _peer(doc),
            _seconds(doc, "connected_at", "ts"),
            clean_session=bool(clean),
            proto_ver=_proto_ver(doc),
        )
    if what == "disconnected":
        reason = str(doc.get("reason") or "normal")
        seconds = _seconds(doc, "disconnected_at", "ts")
        return ClientDisconnected(clientid, username, node, _peer(doc), reason, seconds, proto_ver=_proto_ver(doc))
    topic_filter = doc.get("topic")
    if not isinstance(topic_filter, str):
        return None
    if what == "subscribed":
        opts = doc.get("subopts") if isinstance(doc.get("subopts"), dict) else {}
        assert isinstance(opts, dict)
        is_new = opts.get("is_new", True)
        return SessionSubscribed(
            clientid,
            username,
            node,
            topic_filter,
            int(opts.get("qos", 0)),
            _seconds(doc, "ts"),
            is_new=bool(is_new),
            proto_ver=_proto_ver(doc),
        )
    if what == "unsubscribed":
        return SessionUnsubscribed(
            clientid, username, node, topic_filter, _seconds(doc, "ts"), proto_ver=_proto_ver(doc)
        )
    return None


def _payload_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value).encode() if value is not None else b""


def _session_event(doc: dict[str, Any]) -> Event | None:
    """session.subscribed / unsubscribed from the rule-engine events `$events/session_subscribed`
    and `$events/session_unsubscribed`: EMQX 4.4 has no `$SYS` message for them (its presence
    module publishes connected / disconnected only), so a 4.4 node sends them as rule events.
    Their `qos` is at the top level (EMQX 5 also nests it in `subopts`); no `is_new`: taken as new."""
    topic_filter = doc.get("topic")
    clientid = doc.get("clientid")
    if not isinstance(topic_filter, str) or not isinstance(clientid, str) or not clientid:
        return None
    username = doc.get("username") or None
    node = str(doc.get("node") or "")
    seconds = _seconds(doc, "timestamp")
    if doc.get("event") == "session.unsubscribed":
        return SessionUnsubscribed(clientid, username, node, topic_filter, seconds, proto_ver=_proto_ver(doc))
    opts = doc.get("subopts") if isinstance(doc.get("subopts"), dict) else {}
    assert isinstance(opts, dict)
    qos = doc.get("qos", opts.get("qos", 0))
    return SessionSubscribed(
        clientid,
        username,
        node,
        topic_filter,
        int(qos) if isinstance(qos, int) and qos in (0, 1, 2) else 0,
        seconds,
        is_new=bool(opts.get("is_new", True)),
        proto_ver=_proto_ver(doc),
    )


def rule_event(payload: bytes) -> Event | None:
    """message.delivered / message.acked (and, from EMQX 4.4, session.subscribed / unsubscribed)
    from a rule-engine event republished as `${.}`."""
    doc = _doc(payload)
    if doc is None:
        return None
    if doc.get("event") in ("session.subscribed", "session.unsubscribed"):
        return _session_event(doc)
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
        proto_ver=_proto_ver(doc),  # EMQX's message events do not carry the receiver's: 4 then
        user_properties=_user_properties(doc),
    )
    return event
