"""The OpenAPI 3 description of /api/v1/ (served at /api/v1/openapi.json; tests/integration/
test_api.py checks that its paths and the routes are the same)."""

from __future__ import annotations

from typing import Any

_P = "/api/v1"


def _param(name: str, where: str, doc: str, *, required: bool = False, kind: str = "string") -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "description": doc,
        "schema": {"type": kind},
    }


_PAGE = [
    _param("limit", "query", "items per page (1 to api.max_page; default 100)", kind="integer"),
    _param("cursor", "query", "the `next` of the previous page"),
]
_CLIENT_FILTERS = [
    _param("prefix", "query", "client ids starting with this"),
    _param("user", "query", "sessions of this user name"),
    _param("connected", "query", "`true`: connected only; `false`: offline sessions only"),
]
_CLIENTID = _param("clientid", "path", "client id (percent-encode `/` and other reserved characters)")
_TOPIC = _param("topic", "path", "topic name (its `/` as they are)")


def _ok(doc: str, schema: str = "Object") -> dict[str, Any]:
    return {"description": doc, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_ERRORS = {
    "400": _ok("bad input", "Error"),
    "401": _ok("no valid API key", "Error"),
    "404": _ok("not found", "Error"),
    "409": _ok("not in this broker mode, or not in this state", "Error"),
}


def _op(
    summary: str, params: list[dict[str, Any]] | None = None, *, body: str | None = None, page: bool = False
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": [*(params or []), *(_PAGE if page else [])],
        "responses": {"200": _ok("done", "Page" if page else "Object"), **_ERRORS},
    }
    if body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}},
        }
    return op


def describe() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "hookbridge management API",
            "version": "1",
            "description": "Embedded broker state and operations, rules, pools, reload. "
            "Authorization: Bearer <key> (api.keys). docs/operations.md.",
        },
        "components": {
            "securitySchemes": {"key": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Object": {"type": "object"},
                "Error": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]},
                "Page": {
                    "type": "object",
                    "properties": {
                        "data": {"type": "array", "items": {"type": "object"}},
                        "next": {"type": "string", "nullable": True},
                    },
                },
                "Subscribe": {
                    "type": "object",
                    "properties": {"filter": {"type": "string"}, "qos": {"type": "integer", "enum": [0, 1, 2]}},
                    "required": ["filter"],
                },
                "NewBan": {
                    "type": "object",
                    "properties": {
                        "as": {"type": "string", "enum": ["clientid", "username", "address"]},
                        "who": {"type": "string", "description": "client id, user name, or IP address / CIDR network"},
                        "reason": {"type": "string"},
                        "until": {"type": "number", "description": "Unix seconds; absent: for ever"},
                        "duration": {"type": "number", "description": "seconds from now (instead of until)"},
                    },
                    "required": ["as", "who"],
                },
                "Publish": {
                    "type": "object",
                    "properties": {
                        "topic": {"type": "string"},
                        "payload": {"type": "string", "description": "UTF-8 text"},
                        "payload_base64": {"type": "string", "description": "bytes, base64 (instead of payload)"},
                        "qos": {"type": "integer", "enum": [0, 1, 2]},
                        "retain": {"type": "boolean"},
                        "clientid": {"type": "string", "description": "publish as this session: its ACL and events"},
                    },
                    "required": ["topic"],
                },
            },
        },
        "security": [{"key": []}],
        "paths": {
            f"{_P}/openapi.json": {"get": _op("this description")},
            f"{_P}/status": {"get": _op("version, uptime, broker, pools, spool (as /healthz)")},
            f"{_P}/clients": {
                "get": _op("clients of the embedded broker, connected or not", _CLIENT_FILTERS, page=True)
            },
            f"{_P}/clients/{{clientid}}": {
                "get": _op("one client", [_CLIENTID]),
                "delete": _op("kick: disconnect the client (5.0: DISCONNECT 0x98)", [_CLIENTID]),
            },
            f"{_P}/clients/{{clientid}}/subscriptions": {
                "post": _op(
                    "subscribe the client, as its own SUBSCRIBE would (its ACL)", [_CLIENTID], body="Subscribe"
                ),
                "delete": _op(
                    "unsubscribe the client",
                    [_CLIENTID, _param("filter", "query", "the subscription's filter", required=True)],
                ),
            },
            f"{_P}/sessions": {"get": _op("sessions, offline and durable ones too", _CLIENT_FILTERS, page=True)},
            f"{_P}/sessions/{{clientid}}": {
                "get": _op("one session: subscriptions, queue, in flight", [_CLIENTID]),
                "delete": _op("remove an offline session: queue, in flight, subscriptions, durable rows", [_CLIENTID]),
            },
            f"{_P}/sessions/{{clientid}}/queue": {
                "get": _op("its queued messages, in message id order", [_CLIENTID], page=True),
                "delete": _op("drop its queued messages", [_CLIENTID]),
            },
            f"{_P}/sessions/{{clientid}}/inflight": {
                "get": _op("its in-flight messages (sent, not acknowledged)", [_CLIENTID], page=True),
                "delete": _op("drop its in-flight messages (offline sessions only)", [_CLIENTID]),
            },
            f"{_P}/subscriptions": {
                "get": _op(
                    "every subscription",
                    [_param("clientid", "query", "of this client"), _param("filter", "query", "this exact filter")],
                    page=True,
                )
            },
            f"{_P}/retained": {
                "get": _op("retained messages", [_param("filter", "query", "topic filter (default #)")], page=True)
            },
            f"{_P}/retained/{{topic}}": {
                "get": _op("one retained message", [_TOPIC]),
                "delete": _op("delete a retained message", [_TOPIC]),
            },
            f"{_P}/publish": {"post": _op("publish a message", body="Publish")},
            f"{_P}/rules": {
                "get": _op(
                    "rules with their counters", [_param("prefix", "query", "rule ids starting with this")], page=True
                )
            },
            f"{_P}/pools": {"get": _op("pools: up, queue, spool, last error", page=True)},
            f"{_P}/stats": {
                "get": _op(
                    "the last hour, a sample every api.sample_interval: connections, PUBLISH received and "
                    "sent per second, events per second (the dashboard's charts)"
                )
            },
            f"{_P}/bans": {
                "get": _op("the bans in force", page=True),
                "post": _op("ban a client id, a user name or an address; covered clients are closed", body="NewBan"),
            },
            f"{_P}/bans/{{as}}/{{who}}": {
                "delete": _op(
                    "lift a ban",
                    [
                        _param("as", "path", "clientid, username or address"),
                        _param("who", "path", "its `/` as they are"),
                    ],
                )
            },
            f"{_P}/keys": {"get": _op("each API key's name, scope and last use (admin scope)", page=True)},
            f"{_P}/reload": {"post": _op("reload the rules and the broker's password and ACL files (as SIGHUP)")},
        },
    }
