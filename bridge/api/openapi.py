"""The OpenAPI 3 description of /api/v1/ (served at /api/v1/openapi.json).

Every route says what each status it answers holds (a schema of bridge/api/schemas.py) and the
scope its key needs (`x-scope`, bridge/api/scopes.py). tests/integration/test_api.py checks that its
paths and the routes are the same; tests/integration/test_openapi_answers.py that real answers of a
running bridge, refusals included, have a documented status and match its schema.
"""

from __future__ import annotations

from typing import Any

from bridge.api.schemas import SCHEMAS
from bridge.api.scopes import needed_scope

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
_CLIENTID = _param(
    "clientid", "path", "client id, any character MQTT allows but U+0000 (percent-encode all but letters and digits)"
)
_TOPIC = _param("topic", "path", "topic name (its `/` as they are)")

# Why each refusal comes; a route lists the ones it can answer.
_WHY = {
    "400": "bad input: a parameter, the body, or a page's limit",
    "401": "no valid API key",
    "403": "the key's scope does not allow this route (or the client's ACL refuses it)",
    "404": "no such client, session, message or ban",
    "408": "the body took too long",
    "409": "not in this broker mode (the embedded broker's state), or not in this state (see the error)",
    "413": "the body is larger than api.max_body",
    "422": "the reload was refused: what was loaded before stays",
    "503": "the embedded broker is not running (the bridge is starting or stopping)",
}


def _answer(doc: str, schema: str) -> dict[str, Any]:
    return {"description": doc, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


def _op(
    method: str,
    path: str,
    summary: str,
    answer: str,
    params: list[dict[str, Any]] | None = None,
    *,
    status: int = 200,
    body: str | None = None,
    refusals: tuple[int, ...] = (),
    embedded: bool = True,
) -> dict[str, Any]:
    """One operation: `answer` is the schema of its success (`status`); its refusals are the ones
    every route of its kind answers (401; 403 for admin routes; 400 for lists, path ids and bodies;
    409 for the embedded broker's state in the other modes, 503 while it is not running; 408 and
    413 for bodies) and `refusals`."""
    page = answer.endswith("Page")
    scope = needed_scope(method.upper(), f"{_P}{path}")
    codes = {401, *refusals}
    if scope == "admin":
        codes.add(403)
    if page or params or body:
        codes.add(400)
    if body:
        codes |= {408, 413}
    if embedded:
        codes |= {409, 503}
    responses: dict[str, Any] = {str(status): _answer("done", answer)}
    for code in sorted(codes):
        responses[str(code)] = _answer(_WHY[str(code)], "Error")
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": [*(params or []), *(_PAGE if page else [])],
        "responses": responses,
        "x-scope": scope,
    }
    if body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}},
        }
    return op


def _paths() -> dict[str, dict[str, Any]]:
    paths: dict[str, dict[str, Any]] = {}

    def add(method: str, path: str, summary: str, answer: str, *args: Any, **kwargs: Any) -> None:
        paths.setdefault(f"{_P}{path}", {})[method] = _op(method, path, summary, answer, *args, **kwargs)

    add("get", "/openapi.json", "this description", "OpenApi", embedded=False)
    add("get", "/status", "version, uptime, broker, pools, spool (as /healthz)", "Status", embedded=False)
    add("get", "/clients", "clients of the embedded broker, connected or not", "ClientPage", _CLIENT_FILTERS)
    add(
        "get",
        "/clients/{clientid}",
        "one client, with its connection's details",
        "Client",
        [_CLIENTID],
        refusals=(404,),
    )
    add(
        "delete",
        "/clients/{clientid}",
        "kick: close the client's connection (5.0: DISCONNECT 0x98); 409 when its persistent session is "
        "offline, 404 when there is no such client (a clean-session client that left)",
        "Kicked",
        [_CLIENTID],
        refusals=(404,),
    )
    add(
        "post",
        "/clients/{clientid}/subscriptions",
        "subscribe the client, as its own SUBSCRIBE would (its ACL: 403)",
        "Subscription",
        [_CLIENTID],
        status=201,
        body="Subscribe",
        refusals=(404,),
    )
    add(
        "delete",
        "/clients/{clientid}/subscriptions",
        "unsubscribe the client",
        "Unsubscribed",
        [_CLIENTID, _param("filter", "query", "the subscription's filter", required=True)],
        refusals=(404,),
    )
    add("get", "/sessions", "sessions, offline and durable ones too", "SessionPage", _CLIENT_FILTERS)
    add(
        "get",
        "/sessions/{clientid}",
        "one session: subscriptions, queue, in flight",
        "Session",
        [_CLIENTID],
        refusals=(404,),
    )
    add(
        "delete",
        "/sessions/{clientid}",
        "remove an offline session: queue, in flight, subscriptions, durable rows (409 while connected)",
        "SessionRemoved",
        [_CLIENTID],
        refusals=(404,),
    )
    add(
        "get",
        "/sessions/{clientid}/queue",
        "its queued messages, in the order they go out",
        "QueuedMessagePage",
        [_CLIENTID],
        refusals=(404,),
    )
    add("delete", "/sessions/{clientid}/queue", "drop its queued messages", "Purged", [_CLIENTID], refusals=(404,))
    add(
        "get",
        "/sessions/{clientid}/inflight",
        "its in-flight messages (sent, not acknowledged)",
        "InflightMessagePage",
        [_CLIENTID],
        refusals=(404,),
    )
    add(
        "delete",
        "/sessions/{clientid}/inflight",
        "drop its in-flight messages (409 while its client is connected)",
        "Purged",
        [_CLIENTID],
        refusals=(404,),
    )
    add(
        "get",
        "/subscriptions",
        "every subscription",
        "SubscriptionPage",
        [_param("clientid", "query", "of this client"), _param("filter", "query", "this exact filter")],
    )
    add(
        "get", "/retained", "retained messages", "RetainedPage", [_param("filter", "query", "topic filter (default #)")]
    )
    add("get", "/retained/{topic}", "one retained message", "Retained", [_TOPIC], refusals=(404,))
    add("delete", "/retained/{topic}", "delete a retained message", "RetainedDeleted", [_TOPIC], refusals=(404,))
    add(
        "post",
        "/publish",
        "publish a message (with clientid: as that session, its ACL: 403; no such session: 404)",
        "Published",
        body="Publish",
        refusals=(404,),
    )
    add(
        "get",
        "/rules",
        "rules with their counters",
        "RulePage",
        [_param("prefix", "query", "rule ids starting with this")],
        embedded=False,
    )
    add("get", "/pools", "pools: up, queue, spool, last error", "PoolPage", embedded=False)
    add(
        "get",
        "/stats",
        "the last hour, a sample every api.sample_interval: connections, PUBLISH received and sent per "
        "second, events per second (the dashboard's charts)",
        "Stats",
        embedded=False,
    )
    add("get", "/bans", "the bans in force", "BanPage")
    add(
        "post",
        "/bans",
        "ban a client id, a user name or an address; the clients it covers are closed",
        "Banned",
        status=201,
        body="NewBan",
    )
    add(
        "delete",
        "/bans/{as}/{who}",
        "lift a ban",
        "Lifted",
        [_param("as", "path", "clientid, username or address"), _param("who", "path", "its `/` as they are")],
        refusals=(404,),
    )
    add("get", "/keys", "each API key's name, scope and last use (never the key)", "KeyPage", embedded=False)
    add(
        "post",
        "/reload",
        "reload the rules, the API keys and the broker's password and ACL files (as SIGHUP)",
        "Reloaded",
        refusals=(422,),
        embedded=False,
    )
    return paths


def describe() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "hookbridge management API",
            "version": "1",
            "description": "Embedded broker state and operations, bans, rules, pools, reload. "
            "Authorization: Bearer <key> (api.keys); each operation's `x-scope` is the key scope it needs "
            "(read or admin); without a key (api.allow_anonymous_loopback) a loopback "
            "Host, no other origin, and for a change the X-Hookbridge header or a JSON body. "
            "Lists: pages after a cursor. docs/operations.md.",
        },
        "components": {
            "securitySchemes": {"key": {"type": "http", "scheme": "bearer"}},
            "schemas": SCHEMAS,
        },
        "security": [{"key": []}],
        "paths": _paths(),
    }
