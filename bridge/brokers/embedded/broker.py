"""The amqtt `Broker` subclass: connection lifecycle and the client message loop.

amqtt 0.12.1 keeps the listeners, CONNECT parsing (`init_from_connect`),
authentication plugins and packet codecs. Overridden `Broker` methods, and why:

- `stream_connected()`: wraps the socket in `BridgeWriter` (abort without
  draining) and tracks it, so `stop()` can close connections still in CONNECT.
- `_initialize_client_session()`: amqtt deletes or resumes the session before
  authentication, waits forever for CONNECT, and on a clean-session takeover
  leaves the old connection running. Here it only reads CONNECT (with a time
  limit); the session is resolved after authentication, under a per-client lock.
- `_handle_client_session()`: amqtt resends every retained message for every
  filter any client has on each connect, does not queue offline messages for
  anonymous sessions, and races a takeover against the old connection's
  teardown. Replaced by `_connect()` / `_serve()` / `_teardown()` below.
- `_session_monitor()`: amqtt's drops disconnected anonymous sessions (and so
  their subscriptions and queues); sessions here end by clean session only.
- `_broadcast_message()` / `retain_message()`: amqtt plugins' internal
  publishes go through the bridge's router and retained store.

With `_handle_client_session()` replaced, amqtt's `_client_message_loop()`,
`_handle_disconnect()`, `_handle_subscription()`, `_handle_unsubscription()`,
`_handle_message_delivery()`, `add_subscription()` and its broadcast loop
(`_run_broadcast()`, one task per delivery) are no longer reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

from amqtt.adapters import StreamReaderAdapter
from amqtt.broker import Broker
from amqtt.errors import AMQTTError, MQTTError, NoDataError
from amqtt.mqtt.connack import CONNECTION_ACCEPTED, NOT_AUTHORIZED, ConnackPacket
from amqtt.mqtt.suback import SubackPacket
from amqtt.mqtt.subscribe import SubscribePacket
from amqtt.mqtt.unsuback import UnsubackPacket

from bridge.brokers.base import EventSink
from bridge.brokers.embedded.flows import FlowsMixin
from bridge.brokers.embedded.handler import AckAgain, BridgeHandler, BridgeWriter, Inbound
from bridge.brokers.embedded.lane import EventLane, Kept
from bridge.brokers.embedded.router import Router
from bridge.brokers.embedded.sessions import SessionState
from bridge.events import ClientConnected, ClientDisconnected
from bridge.msgid import MsgIdGenerator

log = logging.getLogger("bridge.brokers.embedded")

CONNECT_TIMEOUT = 10.0  # seconds a new connection has to send CONNECT
_WILL_REASONS = frozenset({"closed", "keepalive_timeout"})


class HookBroker(FlowsMixin, Broker):  # type: ignore[misc]
    def __init__(
        self, config: dict[str, Any], *, node: str, msgids: MsgIdGenerator, sink: EventSink, max_queue: int
    ) -> None:
        super().__init__(config)
        self.node = node
        self.msgids = msgids
        self.sink = sink
        self.max_queue = max_queue
        self.router = Router()
        self.states: dict[str, SessionState] = {}
        self.busy_lanes: set[EventLane] = set()  # client event lanes with events not yet at the sink
        self.active: dict[str, BridgeHandler] = {}  # clientid -> connection until its teardown ends
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._writers: set[BridgeWriter] = set()
        self.dropped_by_ended_sessions = 0

    # -- amqtt overrides -------------------------------------------------------

    async def stream_connected(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener_name: str
    ) -> None:
        adapter = BridgeWriter(writer)
        self._writers.add(adapter)
        try:
            await self._client_connected(listener_name, StreamReaderAdapter(reader), adapter)
        except asyncio.CancelledError:
            # Only close_all() cancels a connection (its sink would not return);
            # asyncio's server callback would report the cancellation as an error.
            log.warning("connection task cancelled at shutdown")
        except Exception:
            log.exception("connection handler failed")
        finally:
            self._writers.discard(adapter)
            adapter.shut(graceful=True)

    async def _initialize_client_session(
        self, reader: Any, writer: Any, remote_address: str, remote_port: int
    ) -> tuple[BridgeHandler, Any]:
        try:
            handler, session = await asyncio.wait_for(
                BridgeHandler.init_from_connect(reader, writer, self.plugins_manager), CONNECT_TIMEOUT
            )
        except (TimeoutError, MQTTError, AMQTTError, NoDataError, ValueError) as exc:
            log.info("connection from %s:%s refused: %r", remote_address, remote_port, exc)
            if isinstance(writer, BridgeWriter):
                writer.shut(graceful=True)
            raise NoDataError(str(exc)) from exc
        handler.peername = _peername(remote_address, remote_port)
        handler.node = self.node
        return handler, session

    async def _handle_client_session(
        self, reader: Any, writer: Any, session: Any, handler: BridgeHandler, server: Any, listener_name: str
    ) -> None:
        handler.attach(session, reader, writer)
        if not await self._authenticate(session, self.listeners_config[listener_name]):
            await handler.send(ConnackPacket.build(0, NOT_AUTHORIZED))
            return
        handler.task = asyncio.current_task()
        try:
            connected = await self._connect(handler, session)
            await connected
            await self._serve(handler)
        finally:
            await self._teardown(handler)

    async def _session_monitor(self) -> None:
        return

    async def _broadcast_message(
        self, session: Any, topic: str | None, data: bytes | bytearray | None, force_qos: int | None = None
    ) -> None:
        if topic:
            await self._publish(None, "", topic, bytes(data or b""), force_qos or 0, retain=False)

    async def retain_message(
        self, source_session: Any, topic_name: str | None, data: bytes | bytearray | None, qos: int | None = None
    ) -> None:
        if topic_name:
            self.router.store_retained(self.msgids.next(), topic_name, bytes(data or b""), qos or 0, "")

    # -- connection lifecycle --------------------------------------------------

    async def _connect(self, conn: BridgeHandler, session: Any) -> asyncio.Future[Kept]:
        """Take over, resume or create the session, send CONNACK, start the connection."""
        clientid: str = session.client_id
        async with self._client_lock(clientid):
            previous = self.active.get(clientid)
            if previous is not None:
                log.info("client %r connected again: closing its previous connection", clientid)
                previous.close("takeover")
                await previous.done.wait()
            old = self.states.get(clientid)
            present = bool(old is not None and not session.clean_session and not old.clean)
            if present:
                assert old is not None
                state = old
                state.username = session.username
            else:
                lane = old.lane if old is not None else EventLane(self.sink, clientid, self.busy_lanes)
                if old is not None:
                    self._discard(old)
                state = SessionState(
                    clientid,
                    clean=bool(session.clean_session),
                    username=session.username,
                    lane=lane,
                    max_queue=self.max_queue,
                )
                self.states[clientid] = state
            conn.state, state.conn = state, conn
            self.active[clientid] = conn
            await conn.send(ConnackPacket.build(int(present), CONNECTION_ACCEPTED))
            event = ClientConnected(
                clientid=clientid,
                username=session.username,
                node=self.node,
                peername=conn.peername,
                timestamp=_now(),
                clean_session=bool(session.clean_session),
            )
            connected = state.lane.post(event, wait=True)
            await conn.start()
        assert connected is not None
        return connected

    async def _serve(self, conn: BridgeHandler) -> None:
        """The client's message loop: its packets in the order they arrived."""
        state = conn.state
        assert state is not None
        while (item := await conn.inbox.get()) is not None:
            if isinstance(item, Inbound):
                accepted = functools.partial(conn.accepted, item) if item.ack is not None else None
                if item.topic.startswith("$SYS/") or item.topic == "$SYS":
                    log.info("client %r may not publish to %r: dropped", state.clientid, item.topic)
                    if accepted is not None:
                        await accepted(None)
                else:
                    await self._publish(state, conn.peername, item.topic, item.payload, item.qos, item.retain, accepted)
            elif isinstance(item, AckAgain):
                await conn.ack_when_kept(item.held.kept, item.ack)
            elif isinstance(item, SubscribePacket):
                await self._on_subscribe(conn, item)
            else:
                await self._on_unsubscribe(conn, item)

    async def _on_subscribe(self, conn: BridgeHandler, packet: SubscribePacket) -> None:
        state = conn.state
        assert state is not None
        codes: list[int] = []
        pending: list[asyncio.Future[Kept] | None] = []
        for topic_filter, qos in packet.payload.topics:
            future = self._add_subscription(state, topic_filter, qos, send_retained=True)
            codes.append(0x80 if future is None else qos)
            pending.append(future)
        await conn.send(SubackPacket.build(packet.variable_header.packet_id, codes))
        for future in pending:
            if future is not None:
                await future

    async def _on_unsubscribe(self, conn: BridgeHandler, packet: Any) -> None:
        state = conn.state
        assert state is not None
        pending = [self._remove_subscription(state, topic_filter) for topic_filter in packet.payload.topics]
        await conn.send(UnsubackPacket.build(packet.variable_header.packet_id))
        for future in pending:
            await future

    async def _teardown(self, conn: BridgeHandler) -> None:
        try:
            await conn.finish()
            state, session = conn.state, conn.session
            if state is None or session is None:
                return
            reason = conn.reason or "closed"
            state.conn = None
            if reason in _WILL_REASONS and session.will_flag and session.will_topic:
                await self._publish(
                    state,
                    conn.peername,
                    session.will_topic,
                    bytes(session.will_message or b""),
                    session.will_qos or 0,
                    bool(session.will_retain),
                )
            if state.clean:
                self._discard(state)
            event = ClientDisconnected(
                clientid=state.clientid,
                username=state.username,
                node=self.node,
                peername=conn.peername,
                reason=reason,
                timestamp=_now(),
            )
            await state.lane.emit(event)
        finally:
            if conn.state is not None and self.active.get(conn.state.clientid) is conn:
                del self.active[conn.state.clientid]
            conn.done.set()

    def _discard(self, state: SessionState) -> None:
        self.dropped_by_ended_sessions += state.dropped
        state.dropped = 0
        self.router.unsubscribe_all(state)
        state.discard()
        if self.states.get(state.clientid) is state:
            del self.states[state.clientid]

    @contextlib.asynccontextmanager
    async def _client_lock(self, clientid: str) -> Any:
        lock, users = self._locks.get(clientid, (asyncio.Lock(), 0))
        self._locks[clientid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[clientid]
            if users == 1:
                del self._locks[clientid]
            else:
                self._locks[clientid] = (lock, users - 1)

    async def close_all(self, grace: float) -> None:
        """Stop listening, close every connection (reason "shutdown") and wait for their teardown."""
        for server in self._servers.values():
            if server.instance is not None:
                server.instance.close()
        connections = list(self.active.values())
        for conn in connections:
            conn.close("shutdown")
        for writer in list(self._writers):
            writer.shut(graceful=False)
        if connections:
            _, late = await asyncio.wait([asyncio.create_task(c.done.wait()) for c in connections], timeout=grace)
            for waiter in late:
                waiter.cancel()
            for conn in connections:
                if not conn.done.is_set() and conn.task is not None:
                    conn.task.cancel()

    def listening_port(self) -> int:
        for server in self._servers.values():
            if server.instance is not None and server.instance.sockets:
                return int(server.instance.sockets[0].getsockname()[1])
        raise RuntimeError("the embedded broker is not listening")


def _peername(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _now() -> float:
    return time.time()
