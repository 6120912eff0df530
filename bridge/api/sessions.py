"""Looking into and removing sessions through the API (the embedded broker's SessionState):

- `DELETE /api/v1/sessions/{clientid}`: remove an offline session (queue, in-flight messages,
  subscriptions, durable rows); `409` while its client is connected (kick it first);
- `GET /api/v1/sessions/{clientid}/queue` and `.../inflight`: its queued messages (waiting to
  be sent) and in-flight ones (sent, not acknowledged), paged in message id (publish) order,
  as EMQX 5's `mqueue_messages` and `inflight_messages`;
- `DELETE /api/v1/sessions/{clientid}/queue`: drop every queued message; `.../inflight`: drop the
  in-flight ones, only while the client is offline (a connected client holds their packet ids);
- the client details' per-connection fields (`connection_details`): connect time, keepalive,
  will topic, and the connection's PUBLISH packets and bytes in and out.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.api import routes as r  # the module importing this one: its names are used at call time

if TYPE_CHECKING:
    from bridge.api.routes import Api
    from bridge.brokers.embedded.broker import Broker
    from bridge.brokers.embedded.sessions import Outgoing, SessionState


def session_routes(api: Api, prefix: str) -> list[web.RouteDef]:
    handlers = SessionRoutes(api)
    one = f"{prefix}/sessions/{{clientid}}"
    return [
        web.delete(one, handlers.remove),
        web.get(f"{one}/queue", handlers.queue, allow_head=False),
        web.delete(f"{one}/queue", handlers.purge_queue),
        web.get(f"{one}/inflight", handlers.inflight, allow_head=False),
        web.delete(f"{one}/inflight", handlers.purge_inflight),
    ]


def connection_details(broker: Broker, state: SessionState) -> dict[str, Any]:
    """What a client's current connection adds to its details (None / 0 while it is offline)."""
    conn = broker.active.get(state.clientid) if state.connected else None
    pending = state.will  # a will waiting out its delay after the connection ended
    if conn is not None:
        will_topic = conn.will.topic if conn.will is not None else None
    else:
        will_topic = pending.will.topic if pending is not None else None
    return {
        "connected_at": conn.connected_at if conn is not None else None,
        "keepalive": round(conn.keepalive_limit / 1.5) if conn is not None else None,
        "will_topic": will_topic,
        "messages_in": conn.publish_in if conn is not None else 0,
        "messages_out": conn.publish_out if conn is not None else 0,
        "bytes_in": conn.bytes_in if conn is not None else 0,
        "bytes_out": conn.bytes_out if conn is not None else 0,
    }


def describe_message(message: Outgoing, *, inflight: bool = False) -> dict[str, Any]:
    payload = message.payload
    try:
        text: str | None = payload.decode()
    except UnicodeDecodeError:
        text = None
    described: dict[str, Any] = {
        "msgid": message.msgid,
        "topic": message.topic,
        "qos": message.qos,
        "retain": message.retain,
        "from_clientid": message.from_clientid,
        "bytes": len(payload),
        "payload": text,
        "payload_base64": base64.b64encode(payload).decode(),
    }
    if inflight:
        described["packet_id"] = message.packet_id
        described["pubrec"] = message.pubrec  # QoS 2: PUBREC came, waiting for PUBCOMP
    return described


def keyed(messages: Iterable[Outgoing], *, inflight: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, message) pairs for paging: the msgid (time ordered), with a count for the rare
    message a session holds twice (overlapping subscriptions)."""
    seen: Counter[str] = Counter()
    for message in messages:
        seen[message.msgid] += 1
        yield f"{message.msgid}.{seen[message.msgid]:05d}", describe_message(message, inflight=inflight)


class SessionRoutes:
    def __init__(self, api: Api) -> None:
        self.api = api

    def _state(self, request: web.Request) -> tuple[Broker, SessionState]:
        broker = self.api.embedded()
        clientid = r.clean(request.match_info["clientid"], "client id")
        state = broker.states.get(clientid)
        if state is None:
            raise r.ApiError(404, "no such session")
        return broker, broker.loaded(state)  # a durable session's queue is read back first

    async def remove(self, request: web.Request) -> web.Response:
        from bridge.brokers.embedded.broker import SessionConnected  # the embedded broker only when it runs

        broker = self.api.embedded()
        clientid = r.clean(request.match_info["clientid"], "client id")
        try:
            removed = await broker.remove_session(clientid)
        except SessionConnected:
            raise r.ApiError(409, "the client is connected: kick it first (DELETE /clients/{clientid})") from None
        if removed is None:
            raise r.ApiError(404, "no such session")
        self.api.changed(request, "removed the session of %r", clientid)
        return r.reply({"removed": clientid})

    async def queue(self, request: web.Request) -> web.Response:
        _broker, state = self._state(request)
        return r.page(self.api, request, keyed(list(state.outbox)))

    async def inflight(self, request: web.Request) -> web.Response:
        _broker, state = self._state(request)
        return r.page(self.api, request, keyed(list(state.inflight.values()), inflight=True))

    async def purge_queue(self, request: web.Request) -> web.Response:
        broker, state = self._state(request)
        purged = 0
        while state.outbox:
            state.pop()  # as a send takes it: the byte counts and a durable session's position follow
            purged += 1
        await broker.committed()
        self.api.changed(request, "purged %d queued messages of %r", purged, state.clientid)
        return r.reply({"clientid": state.clientid, "purged": purged})

    async def purge_inflight(self, request: web.Request) -> web.Response:
        broker, state = self._state(request)
        if state.connected:
            raise r.ApiError(409, "the client is connected and holds these packet ids: kick it first")
        purged = len(state.inflight)
        state.inflight.clear()
        state.touch()  # a durable session's in-flight window is stored
        await broker.committed()
        self.api.changed(request, "purged %d in-flight messages of %r", purged, state.clientid)
        return r.reply({"clientid": state.clientid, "purged": purged})
