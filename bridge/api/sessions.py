"""Looking into and removing sessions through the API (the embedded broker's SessionState):

- `DELETE /api/v1/sessions/{clientid}`: remove an offline session (queue, in-flight messages,
  subscriptions, durable rows); `409` while its client is connected (kick it first);
- `GET /api/v1/sessions/{clientid}/queue` and `.../inflight`: its queued messages (waiting to
  be sent) and in-flight ones (sent, not acknowledged), paged in the order they go out,
  as EMQX 5's `mqueue_messages` and `inflight_messages`;
- `DELETE /api/v1/sessions/{clientid}/queue`: drop every queued message; `.../inflight`: drop the
  in-flight ones, only while the client is offline (a connected client holds their packet ids);
- the client details' per-connection fields (`connection_details`): connect time, keepalive,
  will topic, and the connection's PUBLISH packets and bytes in and out.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.api.answers import ApiError, ApiFace, clean, mqtt_string, reply

if TYPE_CHECKING:
    from bridge.brokers.embedded.broker import Broker
    from bridge.brokers.embedded.sessions import Outgoing, SessionState


def session_routes(api: ApiFace, prefix: str) -> list[web.RouteDef]:
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
    numbers = conn.details() if conn is not None else None
    return {
        "connected_at": numbers.connected_at if numbers is not None else None,
        "keepalive": numbers.keepalive if numbers is not None else None,
        "will_topic": will_topic,
        "messages_in": numbers.messages_in if numbers is not None else 0,
        "messages_out": numbers.messages_out if numbers is not None else 0,
        "bytes_in": numbers.bytes_in if numbers is not None else 0,
        "bytes_out": numbers.bytes_out if numbers is not None else 0,
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


def message_page(api: ApiFace, request: web.Request, messages: Sequence[Outgoing], *, inflight: bool) -> web.Response:
    """A page of `limit` messages in the order they go out, after `cursor` (`<index>/<msgid>` of the
    previous page's last message). A queue only loses messages at its head (sent or dropped) and
    gains them at its tail, so that message is at its index or before it; once it has gone, the
    whole queue comes after it. A page costs its own messages (and a short look back), not the
    queue's length: only they are described, their payloads encoded."""
    limit_text = request.query.get("limit", "100")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= api.max_page:
        raise ApiError(400, f"limit must be an integer from 1 to {api.max_page}")
    limit = int(limit_text)
    cursor = clean(request.query.get("cursor", ""), "cursor")
    start = 0
    if cursor:
        index_text, _, msgid = cursor.partition("/")
        if not index_text.isdigit() or not msgid:
            raise ApiError(400, "cursor must be the next of the previous page")
        for index in range(min(int(index_text), len(messages) - 1), -1, -1):
            if messages[index].msgid == msgid:
                start = index + 1
                break
    page = list(islice(messages, start, start + limit))
    more = start + len(page) < len(messages)
    return reply(
        {
            "data": [describe_message(message, inflight=inflight) for message in page],
            "next": f"{start + len(page) - 1}/{page[-1].msgid}" if page and more else None,
        }
    )


class SessionRoutes:
    def __init__(self, api: ApiFace) -> None:
        self.api = api

    def _state(self, request: web.Request) -> tuple[Broker, SessionState]:
        broker = self.api.embedded()
        clientid = mqtt_string(request.match_info["clientid"], "client id")
        state = broker.states.get(clientid)
        if state is None:
            raise ApiError(404, "no such session")
        return broker, broker.loaded(state)  # a durable session's queue is read back first

    async def remove(self, request: web.Request) -> web.Response:
        from bridge.brokers.embedded.broker import SessionConnected  # the embedded broker only when it runs

        broker = self.api.embedded()
        clientid = mqtt_string(request.match_info["clientid"], "client id")
        try:
            removed = await broker.remove_session(clientid)
        except SessionConnected:
            raise ApiError(409, "the client is connected: kick it first (DELETE /clients/{clientid})") from None
        if removed is None:
            raise ApiError(404, "no such session")
        self.api.changed(request, "removed the session of %r", clientid)
        return reply({"removed": clientid})

    async def queue(self, request: web.Request) -> web.Response:
        _broker, state = self._state(request)
        return message_page(self.api, request, state.outbox, inflight=False)

    async def inflight(self, request: web.Request) -> web.Response:
        _broker, state = self._state(request)
        return message_page(self.api, request, list(state.inflight.values()), inflight=True)

    async def purge_queue(self, request: web.Request) -> web.Response:
        broker, state = self._state(request)
        purged = 0
        while state.outbox:
            state.pop()  # as a send takes it: the byte counts and a durable session's position follow
            purged += 1
        await broker.committed()
        self.api.changed(request, "purged %d queued messages of %r", purged, state.clientid)
        return reply({"clientid": state.clientid, "purged": purged})

    async def purge_inflight(self, request: web.Request) -> web.Response:
        broker, state = self._state(request)
        if state.connected:
            raise ApiError(409, "the client is connected and holds these packet ids: kick it first")
        purged = len(state.inflight)
        state.inflight.clear()
        state.touch()  # a durable session's in-flight window is stored
        await broker.committed()
        self.api.changed(request, "purged %d in-flight messages of %r", purged, state.clientid)
        return reply({"clientid": state.clientid, "purged": purged})
