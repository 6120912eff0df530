"""The JSON schemas of the API's answers and bodies (OpenAPI 3.0 `components/schemas`), one per
kind of answer; bridge/api/openapi.py points each route and status at one of them, and
tests/integration/test_openapi_answers.py validates real answers of a running bridge against them.

Each schema lists the fields an answer always has as `required`; answers may grow fields later
(a client that reads them ignores the ones it does not know), so none forbids others.
"""

from __future__ import annotations

from typing import Any

STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
NUM: dict[str, Any] = {"type": "number"}
BOOL: dict[str, Any] = {"type": "boolean"}
QOS: dict[str, Any] = {"type": "integer", "enum": [0, 1, 2]}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None, doc: str = "") -> dict[str, Any]:
    made: dict[str, Any] = {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": sorted(required),
    }
    if doc:
        made["description"] = doc
    return made


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def page_of(item: str) -> dict[str, Any]:
    return obj(
        {"data": {"type": "array", "items": ref(item)}, "next": nullable(STR)},
        doc=f"one page of {item} items; `next`: the cursor of the next page (its `cursor`), null at the end",
    )


_CLIENT = {
    "clientid": STR,
    "username": nullable(STR),
    "connected": BOOL,
    "peername": nullable(STR),
    "proto_ver": INT,
    "clean": BOOL,
    "expiry": INT,
    "durable": BOOL,
    "connected_at": nullable({**NUM, "description": "Unix seconds of the current connection's CONNACK"}),
    "keepalive": nullable({**INT, "description": "seconds, as granted (Server Keep Alive included)"}),
    "will_topic": nullable(STR),
    "messages_in": {**INT, "description": "PUBLISH packets from the client, this connection"},
    "messages_out": {**INT, "description": "PUBLISH packets to the client, this connection"},
    "bytes_in": {**INT, "description": "MQTT bytes from the client, this connection"},
    "bytes_out": {**INT, "description": "MQTT bytes to the client, this connection"},
}
_MESSAGE = {
    "msgid": STR,
    "topic": STR,
    "qos": QOS,
    "retain": BOOL,
    "from_clientid": STR,
    "bytes": INT,
    "payload": nullable({**STR, "description": "the payload as text; null when it is not UTF-8"}),
    "payload_base64": STR,
}
_BAN = {
    "as": {"type": "string", "enum": ["clientid", "username", "address"]},
    "who": STR,
    "reason": STR,
    "by": {**STR, "description": "the name of the API key that made it"},
    "at": NUM,
    "until": nullable({**NUM, "description": "Unix seconds; null: for ever"}),
}
_POOL_STATE = {
    "up": BOOL,
    "queue": INT,
    "spooled": INT,
    "error": nullable(STR),
    "spool_error": nullable(STR),
}

SCHEMAS: dict[str, Any] = {
    "Error": obj({"error": STR}, doc="every refusal: why"),
    "OpenApi": obj({"openapi": STR, "info": {"type": "object"}, "paths": {"type": "object"}}),
    "Status": obj(
        {
            "version": STR,
            "uptime": NUM,
            "ready": BOOL,
            "broker": obj({"mode": STR, "up": BOOL}),
            "pools": {"type": "object", "additionalProperties": ref("PoolState")},
            "spool": obj({"bytes": INT, "max_bytes": INT, "near_full": BOOL}),
        },
        doc="what /healthz says, with the version and uptime (seconds)",
    ),
    "PoolState": obj(_POOL_STATE),
    "Client": obj(_CLIENT, doc="`subscriptions`: how many it has"),
    "ClientPage": page_of("Client"),
    "Session": obj(
        {
            **_CLIENT,
            "subscriptions": {"type": "array", "items": ref("SessionSubscription")},
            "loaded": {**BOOL, "description": "false: a durable session restored at start, its queue not read yet"},
            "queue": obj({"messages": INT, "bytes": INT}),
            "inflight": INT,
            "dropped": INT,
            "expires_at": nullable({**NUM, "description": "Unix seconds an offline session ends"}),
        }
    ),
    "SessionPage": page_of("Session"),
    "SessionSubscription": obj({"filter": STR, "qos": QOS, "no_local": BOOL, "identifier": INT}),
    "Subscription": obj({"clientid": STR, "filter": STR, "qos": QOS}),
    "SubscriptionPage": page_of("Subscription"),
    "Unsubscribed": obj({"clientid": STR, "filter": STR, "removed": BOOL}),
    "Kicked": obj({"kicked": STR}),
    "SessionRemoved": obj({"removed": STR}),
    "QueuedMessage": obj(_MESSAGE),
    "QueuedMessagePage": page_of("QueuedMessage"),
    "InflightMessage": obj({**_MESSAGE, "packet_id": INT, "pubrec": BOOL}),
    "InflightMessagePage": page_of("InflightMessage"),
    "Purged": obj({"clientid": STR, "purged": INT}),
    "Retained": obj({k: v for k, v in _MESSAGE.items() if k != "retain"}),
    "RetainedPage": page_of("Retained"),
    "RetainedDeleted": obj({"deleted": STR}),
    "Published": obj(
        {"published": STR, "msgid": STR},
        {"routed": {**INT, "description": "without clientid: sessions it was routed to"}, "as": STR},
    ),
    "Rule": obj(
        {"id": STR, "pool": STR, "active": BOOL},
        {name: INT for name in ("matched", "succeeded", "failed", "retried", "spooled", "dropped", "deadlettered")},
    ),
    "RulePage": page_of("Rule"),
    "Pool": obj({"id": STR, **_POOL_STATE, "spool_bytes": INT}),
    "PoolPage": page_of("Pool"),
    "Stats": obj(
        {
            "interval": NUM,
            "window": NUM,
            "samples": {
                "type": "array",
                "items": obj(
                    {
                        "t": NUM,
                        "connections": nullable(INT),
                        "received": nullable(NUM),
                        "sent": nullable(NUM),
                        "events": nullable(NUM),
                    }
                ),
            },
        }
    ),
    "Reloaded": obj({"reloaded": BOOL, "rules": INT}),
    "Ban": obj(_BAN),
    "BanPage": page_of("Ban"),
    "Banned": obj({**_BAN, "kicked": {"type": "array", "items": STR}}, doc="the ban, and the clients it closed"),
    "Lifted": obj({"lifted": ref("Ban")}),
    "Key": obj(
        {
            "name": STR,
            "scope": {"type": "string", "enum": ["read", "admin"]},
            "last_used": nullable(NUM),
            "last_from": nullable(STR),
        }
    ),
    "KeyPage": page_of("Key"),
    # request bodies
    "Subscribe": obj({"filter": STR}, {"qos": QOS}),
    "Publish": obj(
        {"topic": STR},
        {
            "payload": {**STR, "description": "UTF-8 text"},
            "payload_base64": {**STR, "description": "bytes, base64 (instead of payload)"},
            "qos": QOS,
            "retain": BOOL,
            "clientid": {**STR, "description": "publish as this session: its ACL and events"},
        },
    ),
    "NewBan": obj(
        {
            "as": {"type": "string", "enum": ["clientid", "username", "address"]},
            "who": {**STR, "description": "client id, user name, or IP address / CIDR network"},
        },
        {
            "reason": STR,
            "until": {**NUM, "description": "Unix seconds; absent: for ever"},
            "duration": {**NUM, "description": "seconds from now (instead of until)"},
        },
    ),
}
