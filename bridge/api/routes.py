"""The management API, /api/v1/ on the bridge's HTTP listener (bridge/ops/http.py): JSON in and out.

Embedded mode: clients, sessions, subscriptions, retained messages and publish read the broker's
state and call its existing operations (bridge/brokers/embedded/: proxy subscription, a
connection's close, the retained store, routing). Every mode: rules (their counters), pools,
reload. What the mode cannot do is answered 409 with the reason.

Lists are sorted by their key and paged: `limit` (at most `api.max_page`) and `cursor` (the
`next` of the page before). Every request needs an API key (`Authorization: Bearer <key>`,
bridge/conf/apikeys.py) unless it comes from loopback and `api.allow_anonymous_loopback` is on;
every change is logged with the key's name; keys are never shown or logged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import heapq
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.api import anonymous, bans, keys, paging, sessions
from bridge.api.answers import ApiError
from bridge.api.answers import clean as _clean
from bridge.api.answers import error as _error
from bridge.api.answers import is_sys as _is_sys
from bridge.api.answers import mqtt_string as _mqtt_string
from bridge.api.answers import reply as _json
from bridge.api.history import History
from bridge.api.openapi import describe
from bridge.api.paging import Source
from bridge.api.scopes import needed_scope
from bridge.brokers.embedded.filterseek import matching_keys
from bridge.topics import filter_error, topic_name_error

if TYPE_CHECKING:
    from bridge.api.host import Host
    from bridge.brokers.embedded.access import Permissions
    from bridge.brokers.embedded.broker import Broker
    from bridge.brokers.embedded.sessions import SessionState

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
STATIC = Path(__file__).parent / "static"  # the dashboard (served at /)
# The dashboard loads only its own files and talks only to this listener; no framing.
_CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
BODY_TIMEOUT = 5.0  # seconds to receive a request body
_ID_MAX = 65535  # an MQTT string's longest
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Api:
    def __init__(self, bridge: Host) -> None:
        self.bridge = bridge
        config = bridge.config
        # the keys, their scopes and last use (keys.py); replaced on SIGHUP
        self.access = keys.Keys(config["api.keys"] or {}, bool(config["api.allow_anonymous_loopback"]))
        listener = config["metrics.listener"]
        self.listener_host = str(listener[0]) if listener else ""  # a Host an anonymous request may name
        self.max_page = int(config["api.max_page"])
        self.max_body = int(config["api.max_body"])
        self._reloading = asyncio.Lock()  # one API reload at a time
        self.history = History(bridge, float(config["api.sample_interval"]))

    # -- wiring ---------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        p = PREFIX
        return [
            web.get(f"{p}/openapi.json", self.openapi, allow_head=False),
            web.get(f"{p}/status", self.status, allow_head=False),
            web.get(f"{p}/clients", self.clients, allow_head=False),
            web.get(f"{p}/clients/{{clientid:[^/]+}}", self.client, allow_head=False),
            web.delete(f"{p}/clients/{{clientid:[^/]+}}", self.kick),
            web.get(f"{p}/sessions", self.sessions, allow_head=False),
            web.get(f"{p}/sessions/{{clientid:[^/]+}}", self.session, allow_head=False),
            web.get(f"{p}/subscriptions", self.subscriptions, allow_head=False),
            web.post(f"{p}/clients/{{clientid:[^/]+}}/subscriptions", self.subscribe),
            web.delete(f"{p}/clients/{{clientid:[^/]+}}/subscriptions", self.unsubscribe),
            web.get(f"{p}/retained", self.retained_list, allow_head=False),
            web.get(f"{p}/retained/{{topic:.+}}", self.retained_get, allow_head=False),
            web.delete(f"{p}/retained/{{topic:.+}}", self.retained_delete),
            web.post(f"{p}/publish", self.publish),
            web.get(f"{p}/rules", self.rules, allow_head=False),
            web.get(f"{p}/pools", self.pools, allow_head=False),
            web.post(f"{p}/reload", self.reload),
            web.get(f"{p}/stats", self.stats, allow_head=False),
            *bans.ban_routes(self, p),
            *sessions.session_routes(self, p),
            *keys.key_routes(self, p),
        ]

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self._guard)
        app.router.add_routes(self.routes())
        # The dashboard: static files with no data in them (the page asks the API, with the key
        # it is given); the sampler its charts draw runs while the listener does.
        app.router.add_get("/", self.dashboard, allow_head=False)
        app.router.add_static("/static/", STATIC, append_version=False)
        app.cleanup_ctx.append(self.history.running)
        app.on_response_prepare.append(_page_headers)

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        routed_here = resource is not None and resource.canonical.startswith(PREFIX + "/")
        if not (routed_here or request.path.startswith(PREFIX + "/") or request.path == PREFIX):
            return await handler(request)
        key = self.access.caller(request)
        if key is None:
            log.warning("api: %s %r refused: no valid API key (from %s)", request.method, request.path, request.remote)
            refused = _error(401, "a valid API key is needed: Authorization: Bearer <key>")
            refused.headers["WWW-Authenticate"] = "Bearer"
            return refused
        if key is keys.ANONYMOUS:
            why = anonymous.refusal(request, self.listener_host)
            if why is not None:
                log.warning("api: %s %r refused: %s (from %s)", request.method, request.path, why, request.remote)
                return _error(403, why)
        route = resource.canonical if routed_here and resource is not None else request.path
        needed = needed_scope(request.method, route)
        if needed == "admin" and key.scope != "admin":
            log.warning("api: key %s (scope %s): %s %r refused", key.name, key.scope, request.method, request.path)
            return _error(403, f"key {key.name} has scope {key.scope}: {request.method} {route} needs admin")
        self.access.used(key, request)
        try:
            response = await handler(request)
        except ApiError as refused:
            return _error(refused.status, refused.message)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"the body is larger than api.max_body ({self.max_body} bytes)")
        except web.HTTPException as refused:
            return _error(refused.status, refused.reason)
        except Exception:
            log.exception("api: %s %r failed", request.method, request.path)
            return _error(500, "the request failed: see the bridge's log")
        return response

    def _who(self, request: web.Request) -> str | None:
        key = self.access.caller(request)
        return key.name if key is not None else None

    def _changed(self, request: web.Request, what: str, *args: Any) -> None:
        log.info("api: key %s: " + what, self._who(request), *args)

    # -- helpers (also for the route modules beside this one: bans.py, ...) --------

    def embedded(self) -> Broker:
        return self._embedded()

    async def body(self, request: web.Request) -> dict[str, Any]:
        return await self._body(request)

    def who(self, request: web.Request) -> str | None:
        return self._who(request)

    def changed(self, request: web.Request, what: str, *args: Any) -> None:
        self._changed(request, what, *args)

    def page(self, request: web.Request, items: Iterable[tuple[str, Any]]) -> web.Response:
        return self._page(request, items)

    def _embedded(self) -> Broker:
        source = self.bridge.broker
        core = getattr(source, "core", None)
        if source.mode != "embedded":
            raise ApiError(409, f"broker.mode = {source.mode}: this is the embedded broker's state; ask the broker")
        if core is None:
            raise ApiError(503, "the embedded broker is not running")
        return core  # type: ignore[no-any-return]

    def _limit(self, request: web.Request) -> int:
        limit_text = request.query.get("limit", "100")
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= self.max_page:
            raise ApiError(400, f"limit must be an integer from 1 to {self.max_page}")
        return int(limit_text)

    async def _paged(self, request: web.Request, source: Source[Any], after: Any) -> web.Response:
        """A page of a broker list read through its sorted index (bridge/api/paging.py)."""
        items, following = await paging.page(source, after, self._limit(request))
        return _json({"data": items, "next": following})

    def _page(self, request: web.Request, items: Iterable[tuple[str, Any]]) -> web.Response:
        """A page of (key, item) pairs sorted by key, after `cursor`, at most `limit` long: for the
        short lists (rules, pools) that have no index."""
        limit = self._limit(request)
        cursor = _mqtt_string(request.query.get("cursor", ""), "cursor")
        # the first limit + 1 after the cursor, without sorting a whole fleet for one page
        chosen = heapq.nsmallest(limit + 1, (pair for pair in items if pair[0] > cursor), key=lambda pair: pair[0])
        page = chosen[:limit]
        more = len(chosen) > limit
        return _json({"data": [item for _, item in page], "next": page[-1][0] if more else None})

    async def _body(self, request: web.Request) -> dict[str, Any]:
        if request.content_length is not None and request.content_length > self.max_body:
            raise ApiError(413, f"the body is larger than api.max_body ({self.max_body} bytes)")
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                raw = await request.read()
        except TimeoutError:
            raise ApiError(408, "the body took too long") from None
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise ApiError(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        return body

    def _state(self, request: web.Request) -> tuple[Broker, SessionState]:
        broker = self._embedded()
        clientid = _mqtt_string(request.match_info["clientid"], "client id")
        state = broker.states.get(clientid)
        if state is None:
            raise ApiError(404, "no such client")
        return broker, state

    @staticmethod
    async def _permissions(broker: Broker, state: SessionState) -> Permissions:
        """The session's permissions as the broker checks them (a restored one's read as at CONNECT)."""
        from bridge.accounts import BackendDown
        from bridge.brokers.embedded.auth.aclsource import AclBackendDown

        try:
            return await broker.permissions_of(state)
        except (AclBackendDown, BackendDown):  # the log of the database's pool says why
            raise ApiError(503, "the client's permissions could not be read: its ACL database did not answer") from None

    @staticmethod
    def _client(broker: Broker, state: SessionState) -> dict[str, Any]:
        conn = broker.active.get(state.clientid)
        return {
            "clientid": state.clientid,
            "username": state.username,
            "connected": state.connected,
            "peername": conn.peername if conn is not None and state.connected else None,
            "proto_ver": state.level,
            "clean": state.clean,
            "expiry": state.expiry,
            "durable": state.durable,
            "subscriptions": len(state.subscriptions),
            **sessions.connection_details(broker, state),
        }

    @classmethod
    def _session(cls, broker: Broker, state: SessionState) -> dict[str, Any]:
        return {
            **cls._client(broker, state),
            "subscriptions": [
                {"filter": sub.filter, "qos": sub.qos, "no_local": sub.no_local, "identifier": sub.identifier}
                for _, sub in sorted(state.subscriptions.items())
            ],
            # A durable session restored at start has its queue read back when first needed:
            # one session's view reads it (session()), a listing does not read them all.
            "loaded": state.unloaded is None,
            "queue": {"messages": len(state.outbox), "bytes": state.outbox_bytes},
            "inflight": len(state.inflight),
            "dropped": state.dropped,
            "expires_at": state.expires_at if not state.connected and state.expires_at else None,
        }

    def _sessions_source(
        self, request: web.Request, broker: Broker, render: Callable[[Broker, SessionState], dict[str, Any]]
    ) -> Source[str]:
        """The sessions by client id from the broker's sorted ids, `?prefix=` a range of them,
        `?user=` from the user's own sorted ids (sessiontable.py), `?connected=` checked on each;
        `?connected=true` from the connections when they are few (sorted per page), as
        subscriptions' `?filter=` takes a filter's sessions."""
        prefix = _mqtt_string(request.query.get("prefix", ""), "prefix")
        user = request.query.get("user")
        if user is not None:
            user = _mqtt_string(user, "user")
        connected = request.query.get("connected")
        if connected not in (None, "true", "false"):
            raise ApiError(400, "connected must be true or false")
        states = broker.states
        active = broker.active if connected == "true" and len(broker.active) <= paging.SCAN_PER_TURN else None

        def source(position: str | None) -> Iterator[tuple[str, Any]]:
            ids: Iterable[str]
            if user is not None:  # the user's sessions alone, however many others there are
                if position is None or position < prefix:
                    ids = broker.session_table.user_ids(user, prefix, inclusive=True)
                else:
                    ids = broker.session_table.user_ids(user, position)
            elif active is not None:
                start = max(position, prefix) if position is not None else prefix
                ids = sorted(c for c in active if c in states and c >= start and c != position)
            elif position is None or position < prefix:
                ids = broker.session_ids.after(prefix, inclusive=True)
            else:
                ids = broker.session_ids.after(position)
            for clientid in ids:
                if not clientid.startswith(prefix):
                    return  # past the prefix's range
                state = states[clientid]
                wanted = (user is None or state.username == user) and (
                    connected is None or state.connected == (connected == "true")
                )
                yield clientid, render(broker, state) if wanted else None

        return source

    def _cursor(self, request: web.Request) -> str | None:
        return _mqtt_string(request.query.get("cursor", ""), "cursor") or None

    # -- handlers ---------------------------------------------------------------

    async def openapi(self, _request: web.Request) -> web.Response:
        return _json(describe())

    async def status(self, _request: web.Request) -> web.Response:
        _ready, detail = self.bridge.health()
        return _json({"version": _version(), "uptime": time.time() - self.bridge.started_at, **detail})

    async def clients(self, request: web.Request) -> web.Response:
        broker = self._embedded()
        return await self._paged(request, self._sessions_source(request, broker, self._client), self._cursor(request))

    async def client(self, request: web.Request) -> web.Response:
        broker, state = self._state(request)
        return _json(self._client(broker, state))

    async def kick(self, request: web.Request) -> web.Response:
        from bridge.brokers.embedded.codec.reasons import R

        broker, state = self._state(request)
        conn = broker.active.get(state.clientid)
        if conn is None or not state.connected:
            raise ApiError(
                409, "the client is not connected; its session stays (DELETE /api/v1/sessions/{clientid} removes it)"
            )
        self._changed(request, "kicked client %r", state.clientid)
        conn.close("kicked", R.ADMINISTRATIVE_ACTION)
        with contextlib.suppress(TimeoutError):  # its teardown (will, client.disconnected) is under way
            await asyncio.wait_for(conn.done.wait(), 5.0)
        return _json({"kicked": state.clientid})

    async def sessions(self, request: web.Request) -> web.Response:
        broker = self._embedded()
        return await self._paged(request, self._sessions_source(request, broker, self._session), self._cursor(request))

    async def session(self, request: web.Request) -> web.Response:
        broker, state = self._state(request)
        return _json(self._session(broker, broker.loaded(state)))

    async def subscriptions(self, request: web.Request) -> web.Response:
        broker = self._embedded()
        clientid = request.query.get("clientid")
        if clientid is not None:
            clientid = _mqtt_string(clientid, "clientid")
        wanted = request.query.get("filter")
        if wanted is not None:
            wanted = _clean(wanted, "filter")
        cursor = self._cursor(request)
        after = _subscription_cursor(cursor) if cursor is not None else None
        items, following = await paging.page(
            _subscriptions_source(broker, clientid, wanted), after, self._limit(request)
        )
        return _json({"data": items, "next": json.dumps(list(following)) if following is not None else None})

    async def subscribe(self, request: web.Request) -> web.Response:
        broker, state = self._state(request)
        body = await self._body(request)
        topic_filter, qos = body.get("filter"), body.get("qos", 0)
        if not isinstance(topic_filter, str) or not topic_filter:
            raise ApiError(400, "filter must be a non-empty string")
        _clean(topic_filter, "filter")
        problem = filter_error(topic_filter)
        if problem:
            raise ApiError(400, f"bad topic filter: {problem}")
        if qos not in (0, 1, 2) or isinstance(qos, bool):
            raise ApiError(400, "qos must be 0, 1 or 2")
        plain = topic_filter.split("/", 2)[2] if topic_filter.startswith("$share/") else topic_filter
        if not (await self._permissions(broker, state)).may_subscribe(plain):
            raise ApiError(403, "the client's ACL does not allow this subscription")
        self._changed(request, "subscribed %r to %r qos %d", state.clientid, topic_filter, qos)
        broker.proxy_subscribe(state.clientid, topic_filter, qos)
        return _json({"clientid": state.clientid, "filter": topic_filter, "qos": qos}, 201)

    async def unsubscribe(self, request: web.Request) -> web.Response:
        broker, state = self._state(request)
        topic_filter = _clean(request.query.get("filter", ""), "filter")
        if topic_filter not in state.subscriptions:
            raise ApiError(404, "the client has no such subscription")
        self._changed(request, "unsubscribed %r from %r", state.clientid, topic_filter)
        broker.proxy_unsubscribe(state.clientid, topic_filter)  # session.unsubscribed in the client's order
        return _json({"clientid": state.clientid, "filter": topic_filter, "removed": True})

    @staticmethod
    def _retained(retained: Any) -> dict[str, Any]:
        payload: bytes = retained.payload
        try:
            text: str | None = payload.decode()
        except UnicodeDecodeError:
            text = None
        return {
            "topic": retained.topic,
            "qos": retained.qos,
            "from_clientid": retained.from_clientid,
            "msgid": retained.msgid,
            "payload": text,
            "payload_base64": base64.b64encode(payload).decode(),
            "bytes": len(payload),
        }

    async def retained_list(self, request: web.Request) -> web.Response:
        broker = self._embedded()
        topic_filter = _clean(request.query.get("filter", "#"), "filter")
        problem = filter_error(topic_filter)
        if problem:
            raise ApiError(400, f"bad topic filter: {problem}")
        source = _retained_source(broker.router, topic_filter, time.monotonic())
        return await self._paged(request, source, self._cursor(request))

    def _retained_topic(self, request: web.Request) -> tuple[Broker, Any]:
        broker = self._embedded()
        topic = _clean(request.match_info["topic"], "topic")
        problem = topic_name_error(topic)
        if problem:
            raise ApiError(400, problem)
        found = broker.router.retained_for(topic, time.monotonic())
        if not found:
            raise ApiError(404, "no retained message on this topic")
        return broker, found[0]

    async def retained_get(self, request: web.Request) -> web.Response:
        _broker, retained = self._retained_topic(request)
        return _json(self._retained(retained))

    async def retained_delete(self, request: web.Request) -> web.Response:
        """An empty retained publish in the bridge's own name: the broker's copy goes, live
        subscribers get it as from any publisher, and the rules see it (on_retain_delete removes
        the databases' copy); the answer waits until they kept it."""
        from bridge.brokers.embedded.router import Message

        if _is_sys(request.match_info["topic"]):
            raise ApiError(403, "$SYS retained values are the broker's own: it publishes them again itself")
        broker, retained = self._retained_topic(request)
        self._changed(request, "deleted the retained message on %r", retained.topic)
        kept = await broker.publish_own(Message(broker.msgids.next(), retained.topic, b"", 0, True, ""))
        if kept is not None:
            await asyncio.wait([kept])
            if kept.cancelled():
                raise ApiError(503, "deleted from the broker, but a rule failed: the databases may still hold it")
        return _json({"deleted": retained.topic})

    async def publish(self, request: web.Request) -> web.Response:
        from bridge.brokers.embedded.router import Message

        broker = self._embedded()
        body = await self._body(request)
        topic, qos, retain = body.get("topic"), body.get("qos", 0), body.get("retain", False)
        if not isinstance(topic, str):
            raise ApiError(400, "topic must be a string")
        _clean(topic, "topic")
        problem = topic_name_error(topic)
        if problem:
            raise ApiError(400, problem)
        if qos not in (0, 1, 2) or isinstance(qos, bool):
            raise ApiError(400, "qos must be 0, 1 or 2")
        if not isinstance(retain, bool):
            raise ApiError(400, "retain must be true or false")
        payload = _payload(body)
        clientid = body.get("clientid")
        state = None
        if clientid is not None:
            if not isinstance(clientid, str):
                raise ApiError(400, "clientid must be a string")
            state = broker.states.get(_mqtt_string(clientid, "clientid"))
            if state is None:
                raise ApiError(404, "no such client")
            if not (await self._permissions(broker, state)).may_publish(topic):
                raise ApiError(403, "the client's ACL does not allow publishing to this topic")
        elif _is_sys(topic):
            raise ApiError(403, "$SYS topics are the broker's own")
        self._changed(request, "published to %r (%d bytes, qos %d, retain %s)", topic, len(payload), qos, retain)
        message = Message(broker.msgids.next(), topic, payload, qos, retain, clientid or "")
        if state is not None:  # as the client: its message.publish event, then routing
            await broker.publish(message, state, peername="api")
            return _json({"published": topic, "msgid": message.msgid, "as": state.clientid})
        delivered = await broker.publish(message)  # as nobody: no event, routed in msgid order
        return _json({"published": topic, "msgid": message.msgid, "routed": delivered})

    async def stats(self, _request: web.Request) -> web.Response:
        return _json(self.history.describe())

    async def dashboard(self, _request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def rules(self, request: web.Request) -> web.Response:
        metrics = self.bridge.metrics
        active = {rule.id for rule in self.bridge.engine.rules}
        prefix = _clean(request.query.get("prefix", ""), "prefix")
        items = (
            (
                rule_id,
                {"id": rule_id, "pool": metrics.rule_pool.get(rule_id, ""), "active": rule_id in active, **counts},
            )
            for rule_id, counts in list(metrics.rules.items())
            if rule_id.startswith(prefix)
        )
        extra = (
            (rule_id, {"id": rule_id, "pool": metrics.rule_pool.get(rule_id, ""), "active": True})
            for rule_id in active
            if rule_id not in metrics.rules and rule_id.startswith(prefix)
        )
        return self._page(request, [*items, *extra])

    async def pools(self, request: web.Request) -> web.Response:
        _ready, detail = self.bridge.health()
        items = []
        for pool_id, state in detail["pools"].items():
            runner = self.bridge.runners[pool_id]
            spool_bytes = runner.spool.bytes if runner.spool else 0
            items.append((pool_id, {"id": pool_id, **state, "spool_bytes": spool_bytes}))
        page = self._page(request, items)
        return page

    async def reload(self, request: web.Request) -> web.Response:
        self._changed(request, "reload")
        async with self._reloading:
            reloaded = await self.bridge.reload()
        if reloaded:
            return _json({"reloaded": True, "rules": len(self.bridge.engine.rules)})
        return _error(422, "the reload was refused: the rules and pools loaded before stay (see the log)")


# A place in the list of subscriptions: (client id, filter), or (client id, None) once every filter
# of that client was looked at.
SubscriptionKey = tuple[str, str | None]


def _subscription_cursor(cursor: str) -> SubscriptionKey:
    """The `next` of a subscriptions page, `["<client id>", "<filter>"]`, read back."""
    try:
        clientid, topic_filter = json.loads(cursor)
    except (ValueError, TypeError, RecursionError):
        raise ApiError(400, "cursor is not a subscriptions cursor (the next of a page)") from None
    if not isinstance(clientid, str) or not isinstance(topic_filter, str):
        raise ApiError(400, "cursor is not a subscriptions cursor (the next of a page)")
    return clientid, topic_filter


def _subscriptions_source(broker: Broker, clientid: str | None, wanted: str | None) -> Source[SubscriptionKey]:
    """Every subscription by (client id, filter), walking the sessions in client id order (their
    sorted index) and each session's own filters; `clientid` one session, `wanted` one filter.
    The sessions of one filter come from the router's tree when they are few (sorted per page);
    a filter a fleet shares is answered by the walk, in loop turns (bridge/api/paging.py)."""
    states = broker.states
    few: dict[str, Any] | None = None
    if wanted is not None and clientid is None:
        subscribed = broker.router.subscribers_of(wanted)
        if len(subscribed) <= paging.SCAN_PER_TURN:
            few = subscribed

    def filters_after(state: SessionState, last: str | None) -> list[str]:
        if wanted is not None:
            names = [wanted] if wanted in state.subscriptions else []
        else:
            names = sorted(state.subscriptions)  # a session's few filters
        return [name for name in names if last is None or name > last]

    def session(state: SessionState, last: str | None) -> Iterator[tuple[SubscriptionKey, Any]]:
        for name in filters_after(state, last):
            sub = state.subscriptions[name]
            yield (state.clientid, name), {"clientid": state.clientid, "filter": name, "qos": sub.qos}
        yield (state.clientid, None), None  # this session done (and one key looked at)

    def source(position: SubscriptionKey | None) -> Iterator[tuple[SubscriptionKey, Any]]:
        if position is not None:
            current = states.get(position[0])
            if current is not None and position[1] is not None and clientid in (None, position[0]):
                yield from session(current, position[1])
        after = position[0] if position is not None else None
        if clientid is not None:
            ids: Iterable[str] = [clientid] if clientid in states and (after is None or clientid > after) else []
        elif few is not None:
            ids = sorted(each for each in few if each in states and (after is None or each > after))
        else:
            ids = broker.session_ids.after(after)
        for each in ids:
            yield from session(states[each], None)

    return source


def _retained_source(router: Any, topic_filter: str, now: float) -> Source[str]:
    """The retained messages a filter matches, in topic order: the tree's sorted topics walked
    from the cursor, jumping over every branch the filter rules out (filterseek.py), so a page
    costs what it returns, not the store; expired ones skipped."""
    tree = router.retained

    def source(position: str | None) -> Iterator[tuple[str, Any]]:
        for topic, matched in matching_keys(tree.topics, topic_filter, position):
            retained = tree.get(topic) if matched else None
            if retained is not None and retained.expires and retained.expires <= now:
                retained = None  # expired: removed when a subscriber or retained_for next meets it
            yield topic, Api._retained(retained) if retained is not None else None

    return source


async def _page_headers(request: web.Request, response: web.StreamResponse) -> None:
    if request.path == "/" or request.path.startswith("/static/"):
        response.headers["Content-Security-Policy"] = _CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"


def _payload(body: dict[str, Any]) -> bytes:
    if "payload_base64" in body:
        encoded = body["payload_base64"]
        if not isinstance(encoded, str):
            raise ApiError(400, "payload_base64 must be a string")
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "payload_base64 is not base64") from None
    payload = body.get("payload", "")
    if not isinstance(payload, str):
        raise ApiError(400, "payload must be a string (or give payload_base64)")
    try:
        return payload.encode()
    except UnicodeEncodeError:
        raise ApiError(400, "payload is not valid UTF-8") from None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hookbridge")
    except PackageNotFoundError:
        return "unknown"
