"""The embedded broker's core: sessions, CONNECT / SUBSCRIBE / PUBLISH flows, wills, expiry.

Connections (connection.py: the socket; channel.py: the protocol) decode and answer packets,
seen here through client.Client; everything that touches a session or the routing table
happens here, in each connection's arrival order. Sessions outlive their
connection by their expiry interval (3.1.1 clean session 0: for ever; 5.0: the session expiry
interval); a takeover closes the old connection and waits for its teardown before the new one
gets the session, under a per-client lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from bridge.brokers.base import EventSink
from bridge.brokers.embedded.access import Gate, Login, OpenGate, Permissions, Verdict
from bridge.brokers.embedded.bans import Ban, Bans
from bridge.brokers.embedded.channel import RECEIVE_MAXIMUM, TOPIC_ALIAS_MAXIMUM
from bridge.brokers.embedded.client import Client
from bridge.brokers.embedded.codec import (
    EMPTY,
    MQTT_5,
    Connack,
    Connect,
    ConnectReturnCode,
    Properties,
    ReasonCode,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
    split_shared,
)
from bridge.brokers.embedded.compact import shrink_if_sparse
from bridge.brokers.embedded.deadlines import Deadlines
from bridge.brokers.embedded.durable import DurableStore, Journal, UnreadableSession, stored_fields
from bridge.brokers.embedded.flows import FlowsMixin, OwnPublisher
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.queuedbytes import QueuedBytes
from bridge.brokers.embedded.router import Message, Router
from bridge.brokers.embedded.sessions import NEVER, PendingWill, SessionState, Subscription
from bridge.brokers.embedded.sessiontable import SessionTable
from bridge.brokers.embedded.sortedkeys import SortedKeys
from bridge.brokers.embedded.stream import EventStream, Kept
from bridge.brokers.embedded.traffic import Traffic
from bridge.errors import HookbridgeError
from bridge.events import ClientConnected, ClientDisconnected, Hookpoint
from bridge.msgid import MsgIdGenerator

log = logging.getLogger("bridge.brokers.embedded")
# The keepalive limit of each keep alive value seen (Broker._keepalive).
_KEEPALIVE_LIMITS: dict[int, float] = {}
R = ReasonCode
# Wills are published when a connection ends for these reasons (not on DISCONNECT, takeover
# or shutdown) [MQTT-3.1.2-8].
_WILL_REASONS = frozenset({"closed", "keepalive_timeout"})
# How long the deadline of a message published with an expiry is remembered after it passed,
# so a fetch of that message from a database still knows it expired.
_EXPIRED_MEMORY = 86400.0
_SWEEP_INTERVAL = 0.5
# CONNACK codes (3.1.1 return code, 5.0 reason) per login refusal (access.LOGIN_REFUSALS).
_LOGIN_CODES = {
    "login_bad_credentials": (ConnectReturnCode.BAD_USER_NAME_OR_PASSWORD, R.BAD_USER_NAME_OR_PASSWORD),
    "login_not_authorized": (ConnectReturnCode.NOT_AUTHORIZED, R.NOT_AUTHORIZED),
    "login_backend_down": (ConnectReturnCode.SERVER_UNAVAILABLE, R.SERVER_UNAVAILABLE),
    "login_busy": (ConnectReturnCode.SERVER_UNAVAILABLE, R.SERVER_BUSY),
}


class SessionConnected(HookbridgeError):
    """A session cannot be removed while its client is connected."""


class Broker(FlowsMixin):
    def __init__(
        self,
        *,
        node: str,
        msgids: MsgIdGenerator,
        sink: EventSink,
        limits: Limits,
        gate: Gate | None = None,
        takeover: str = "any",
        store: DurableStore | None = None,
        commit_interval: float = 0.002,
        preload: int = 0,
        bans: Bans | None = None,
    ) -> None:
        self.node = node
        self.bans = bans if bans is not None else Bans()  # who may not connect (bans.py)
        self.gate: Gate = gate or OpenGate()
        # "same_user": a CONNECT for a client id whose session belongs to another user is refused.
        self.takeover = takeover
        self.msgids = msgids
        self.sink = sink
        self.limits = limits
        self.refused: Counter[str] = Counter()
        # What a 3.1.1 session with clean session 0 gets as its expiry (broker.persistent_session_expiry).
        self.persistent_expiry = int(limits.persistent_session_expiry) or NEVER
        self.output_pauses = 0  # connections' reading paused for unsent output (max_output_bytes)
        self.traffic = Traffic()  # what $SYS/broker/... reports (systopics.py)
        self.router = Router()
        # A dict to every reader; the table also keeps the ids in order for the API's pages
        # (session_ids): it changes only through [] =, del and pop.
        self._table = SessionTable()
        self.states: dict[str, SessionState] = self._table
        self.queued = QueuedBytes(limits.max_queued_bytes, self.states)  # broker-wide bound (queuedbytes.py)
        # Durable sessions on: what the store keeps is written through the journal.
        journal = Journal(store, self.states, interval=commit_interval, preload=preload) if store is not None else None
        self.journal = self.router.journal = journal
        self.expiring: dict[str, float] = {}
        self.busy_streams: set[EventStream] = set()  # client event streams with events not yet at the sink
        self.own_publisher = OwnPublisher(EventStream(sink, "(bridge)", self.busy_streams))
        self.active: dict[str, Client] = {}  # clientid -> connection until its teardown ends
        self.connections: set[Client] = set()
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._deadlines: Deadlines[Client] = Deadlines(_SWEEP_INTERVAL, time.monotonic())
        self.dropped_by_ended_sessions = 0
        # A sink may say which per-message events it has no use for (Dispatcher.wants) and count
        # the ones it was spared (Dispatcher.skipped): building and posting a message.delivered
        # nobody reads was a tenth of the publish path.
        self._wants = getattr(sink, "wants", None)
        self._skipped = getattr(sink, "skipped", None)

    # -- connections -------------------------------------------------------------

    def accept(self, conn: Client) -> bool:
        """A socket accepted: watched for its connect timeout. False: refused at once
        (broker.max_connections), to be dropped with nothing said."""
        self.traffic.sockets += 1  # every socket accepted, refused ones too (Mosquitto's load/sockets)
        if self.limits.max_connections and len(self.connections) >= self.limits.max_connections:
            self.refused["max_connections"] += 1
            log.warning("connection from %s refused: %d connections open", conn.peer.address, len(self.connections))
            return False
        self.connections.add(conn)
        self._deadlines.watch(conn, time.monotonic() + self.limits.connect_timeout)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        return True

    async def _sweep(self) -> None:
        """Close connections past their connect timeout or keepalive; forget old expiries.

        Only the connections whose deadline fell due are looked at (deadlines.py): each is
        watched at accept for its connect timeout, and from its CONNECT for its keepalive; the
        client itself says whether it is past one (Channel.check_deadline)."""
        deadlines = self._deadlines
        while True:
            await asyncio.sleep(_SWEEP_INTERVAL)
            now = time.monotonic()
            timeout = self.limits.connect_timeout
            for conn in deadlines.due(now):
                due = conn.check_deadline(now, timeout)  # closes it when it is past one
                if due is not None:
                    deadlines.watch(conn, due)
            if self.expiring:
                stale = [m for m, deadline in self.expiring.items() if deadline + _EXPIRED_MEMORY < now]
                for msgid in stale:
                    del self.expiring[msgid]

    async def connect(self, conn: Client, packet: Connect) -> None:
        """Refuse the CONNECT, or take over / resume / create the session and send CONNACK."""
        level = packet.protocol_level  # the channel speaks it since it read the CONNECT
        clientid, assigned = packet.client_id, None
        code = self._connect_refusal(packet)
        if code is None and not clientid:
            if level < MQTT_5 and not packet.clean_start:
                code = ConnectReturnCode.IDENTIFIER_REJECTED  # [MQTT-3.1.3-8]
            else:
                clientid = assigned = f"hookbridge-{uuid.uuid4().hex}"
        if code is not None:
            if level == MQTT_5 and code < 0x80:
                code = {2: R.CLIENT_IDENTIFIER_NOT_VALID}.get(code, R.UNSPECIFIED_ERROR)
            conn.fail_connect(code)
            return
        if self._banned(conn, level, clientid, packet.username):  # before the login: a banned client costs no hash
            return
        verdict = await self._login(conn, packet, clientid)
        if verdict is None:
            return
        will = packet.will
        if will is not None and not verdict.permissions.may_publish(will.topic):
            # The will is a PUBLISH the client asks for in advance: the same permission holds,
            # checked now, as Mosquitto 2 does (CONNACK 5 / 0x87), not when the will is due.
            self.refused["acl_publish_denied"] += 1
            log.info(
                "client %r from %s may not publish its will to %r: CONNECT refused",
                clientid,
                conn.peer.address,
                will.topic,
            )
            conn.fail_connect(R.NOT_AUTHORIZED if level == MQTT_5 else ConnectReturnCode.NOT_AUTHORIZED)
            return
        if level == MQTT_5:
            expiry = packet.properties.session_expiry_interval or 0
        else:
            expiry = 0 if packet.clean_start else self.persistent_expiry
        async with self._client_lock(clientid):
            if not self._may_take(clientid, verdict):
                self.refused["login_not_authorized"] += 1
                log.warning("client id %r belongs to another user: CONNECT refused", clientid)
                conn.fail_connect(R.NOT_AUTHORIZED if level == MQTT_5 else ConnectReturnCode.NOT_AUTHORIZED)
                return
            if self._banned(conn, level, clientid, verdict.username):
                return  # by the user name its client certificate gives, or banned during its login
            previous = self.active.get(clientid)
            if previous is not None:
                log.info("client %r connected again: closing its previous connection", clientid)
                previous.close("takeover", R.SESSION_TAKEN_OVER)
                await previous.done.wait()
            try:
                if not packet.clean_start:  # a restored session's queue, a page at a time
                    await self._loaded_paged(self.states.get(clientid))
                if conn.reason is not None:
                    return  # the new connection went away meanwhile
                if self._banned(conn, level, clientid, verdict.username):
                    return  # banned while the previous connection closed or the queue was read
                resumed = self.states.get(clientid)
                stored = stored_fields(resumed) if resumed is not None else None
                state, present = self._session(clientid, packet, expiry, verdict)
            except UnreadableSession:  # logged once by the journal
                self.refused["durable_unreadable"] += 1
                conn.fail_connect(R.SERVER_UNAVAILABLE if level == MQTT_5 else ConnectReturnCode.SERVER_UNAVAILABLE)
                return
            state.conn = conn
            self.active[clientid] = conn
            keepalive, server_keep_alive = self._keepalive(packet)
            connack = self._connack(packet, present, assigned, server_keep_alive)
            keepalive_due = conn.attach(state, packet, connack, keepalive)  # CONNACK, then what was in flight again
            if keepalive_due is not None:
                self._deadlines.watch(conn, keepalive_due)
            traffic = self.traffic
            traffic.connections += 1
            traffic.clients_maximum = max(traffic.clients_maximum, len(self.states))  # sessions, as Mosquitto
            # A durable session's `sessions` row is rewritten only if this CONNECT changed it;
            # its `positions` row says it is connected (durable/journal.py `progress`).
            state.touch(whole=not present or stored_fields(state) != stored)
            connected = None
            # Nothing takes client.connected (no rule, no fetch page waiting for this client):
            # with its stream idle, skipping the event keeps the client's event order and saves
            # the stream's task per CONNECT, a fleet reconnecting at once; it is still counted.
            if not state.stream.idle or self.should_post(Hookpoint.CLIENT_CONNECTED, clientid):
                event = ClientConnected(
                    clientid=clientid,
                    username=state.username,
                    node=self.node,
                    peername=conn.peer.address,
                    timestamp=time.time(),
                    clean_session=packet.clean_start or state.clean,
                    proto_ver=state.level,
                )
                connected = state.stream.post(event, wait=True)
        if connected is not None:
            await connected

    def _connect_refusal(self, packet: Connect) -> int | None:
        """A CONNACK refusal code (3.1.1 return code or 5.0 reason) for a CONNECT, or None."""
        limits, v5 = self.limits, packet.protocol_level == MQTT_5
        if len(packet.client_id.encode()) > limits.max_clientid_len:
            self.refused["clientid_too_long"] += 1
            return R.CLIENT_IDENTIFIER_NOT_VALID if v5 else ConnectReturnCode.IDENTIFIER_REJECTED
        if v5 and packet.properties.authentication_method is not None:
            return R.BAD_AUTHENTICATION_METHOD
        will = packet.will
        if will is not None and will.topic.count("/") >= limits.max_topic_levels:
            self.refused["topic_levels"] += 1
            return R.TOPIC_NAME_INVALID if v5 else ConnectReturnCode.NOT_AUTHORIZED
        if will is not None and will.topic.startswith("$"):
            return R.TOPIC_NAME_INVALID if v5 else ConnectReturnCode.NOT_AUTHORIZED
        return None

    async def _login(self, conn: Client, packet: Connect, clientid: str) -> Verdict | None:
        """Ask the gate; on a refusal answer the CONNECT and return None."""
        peer = conn.peer
        login = Login(clientid, packet.username, packet.password, peer.listener, peer.address, peer.cert_cn)
        verdict = await self.gate.login(login)
        if verdict.ok:
            return verdict
        self.refused[verdict.reason or "login_not_authorized"] += 1
        log.info("client %r from %s: login refused (%s)", clientid, conn.peer.address, verdict.reason)
        codes = _LOGIN_CODES.get(verdict.reason, _LOGIN_CODES["login_not_authorized"])
        conn.fail_connect(codes[1] if packet.protocol_level == MQTT_5 else codes[0])
        return None

    def _banned(self, conn: Client, level: int, clientid: str, username: str | None) -> bool:
        """A ban in force keeps this client out: CONNACK 0x8A (3.1.1: 5, not authorized), True."""
        ban = self.bans.match(clientid, username, conn.peer.address)
        if ban is None:
            return False
        self.refused["banned"] += 1
        log.info("client %r from %s: banned (%s %r): CONNECT refused", clientid, conn.peer.address, ban.kind, ban.who)
        conn.fail_connect(R.BANNED if level == MQTT_5 else ConnectReturnCode.NOT_AUTHORIZED)
        return True

    def ban(self, ban: Ban) -> list[str]:
        """Add a ban (saved) and close the connections it covers now (5.0: DISCONNECT 0x98
        administrative action, as a kick; no will). Returns the client ids closed."""
        self.bans.add(ban)
        only = Bans()  # this ban alone, in memory: the connected clients it covers
        only.add(ban)
        kicked = []
        for clientid, conn in list(self.active.items()):
            state = conn.state
            username = state.username if state is not None else None
            if conn.reason is None and only.match(clientid, username, conn.peer.address) is not None:
                log.info("client %r from %s: banned (%s %r): closed", clientid, conn.peer.address, ban.kind, ban.who)
                conn.close("banned", R.ADMINISTRATIVE_ACTION)
                kicked.append(clientid)
        return kicked

    def _may_take(self, clientid: str, verdict: Verdict) -> bool:
        """broker.takeover = same_user: only the user that owns a client id's session may use it."""
        if self.takeover != "same_user":
            return True
        state = self.states.get(clientid)
        return state is None or state.owner == verdict.username

    def _session(self, clientid: str, packet: Connect, expiry: int, verdict: Verdict) -> tuple[SessionState, bool]:
        """The session this CONNECT gets, and whether it existed (CONNACK session present)."""
        old = self.states.get(clientid)
        if self.journal is not None:  # a session the damaged store cannot read is refused, or given up
            if packet.clean_start:
                self.journal.forget_unreadable(clientid)
            else:
                self.journal.check_readable(clientid)
        if old is not None and not packet.clean_start:
            self.loaded(old)
            old.cancel_timers()  # back before its expiry or will delay: neither happens
            old.expiry, old.level = expiry, packet.protocol_level
            self._table.set_username(old, verdict.username)  # its user's index follows (sessiontable.py)
            if old.permissions is not verdict.permissions and old.outbox:
                # queued before this login (restored from the durable store): the ACL holds
                old.keep_readable(verdict.permissions)
            old.permissions, old.permissions_known = verdict.permissions, True
            return old, True
        stream = old.stream if old is not None else EventStream(self.sink, clientid, self.busy_streams)
        if old is not None:
            self._discard(old)
        state = SessionState(
            clientid,
            expiry=expiry,
            username=verdict.username,
            stream=stream,
            limits=self.limits,
            refused=self.refused,
            level=packet.protocol_level,
            queued=self.queued,
        )
        state.permissions = verdict.permissions
        state.journal = self.journal
        self.states[clientid] = state
        return state, False

    def restored_session(
        self, clientid: str, expiry: int, username: str | None, owner: str | None, level: int
    ) -> SessionState:
        """A durable session read back from the store at start (durable/journal.py)."""
        if level != MQTT_5:  # broker.persistent_session_expiry as set now (its clock starts at the restart)
            expiry = self.persistent_expiry
        stream = EventStream(self.sink, clientid, self.busy_streams)
        state = SessionState(
            clientid,
            expiry=expiry,
            username=username,
            stream=stream,
            limits=self.limits,
            refused=self.refused,
            level=level,
            queued=self.queued,
        )
        state.owner, state.journal = owner, self.journal
        state.permissions_known = False  # read when first asked (permissions_of), not for every session at start
        self.states[clientid] = state
        return state

    async def permissions_of(self, state: SessionState) -> Permissions:
        """What a session may do, read as at its CONNECT. A session restored from the durable
        store, its client not back since, has them read from the gate (the same ACL source) the
        first time they are asked for, so a check answers the same before and after a restart."""
        if not state.permissions_known:
            permissions = await self.gate.permissions_of(state.username, state.clientid)
            if not state.permissions_known:  # else its client logged in meanwhile: its login's stand
                state.permissions, state.permissions_known = permissions, True
        return state.permissions

    @property
    def session_ids(self) -> SortedKeys:
        """The client ids of `states`, in order (sortedkeys.py): the API pages sessions by them."""
        return self._table.ids

    @property
    def session_table(self) -> SessionTable:
        """`states` with its indexes (sessiontable.py): the API pages a user's sessions by them."""
        return self._table

    def loaded(self, state: SessionState) -> SessionState:
        """A session whose queue is in memory: a durable session restored at start has its queue
        read back from the store the first time it is needed (durable/journal.py)."""
        if state.unloaded is not None and self.journal is not None:
            started = time.monotonic()
            queued = self.journal.load(self.router, state)
            log.debug(
                "client %r: queue read back from the durable store: %d messages, %d in flight, in %.3f s",
                state.clientid,
                queued,
                len(state.inflight),
                time.monotonic() - started,
            )
        return state

    async def _loaded_paged(self, state: SessionState | None) -> None:
        """`loaded` for a client's reconnect: its queue read back a page at a time."""
        if state is not None and state.unloaded is not None and self.journal is not None:
            started = time.monotonic()
            queued = await self.journal.load_paged(self.router, state)
            log.debug(
                "client %r: queue read back from the durable store, a page at a time: %d messages in %.3f s",
                state.clientid,
                queued,
                time.monotonic() - started,
            )

    def _keepalive(self, packet: Connect) -> tuple[float, int | None]:
        """The client's keepalive limit (seconds without a packet before it is closed: 1.5 x
        the keep alive [MQTT-3.1.2-24]; 0: none) and the Server Keep Alive to announce, if any."""
        keepalive, cap, announced = packet.keepalive, self.limits.server_keep_alive, None
        if cap and packet.protocol_level == MQTT_5 and (keepalive == 0 or keepalive > cap):
            keepalive = announced = cap
        limit = _KEEPALIVE_LIMITS.get(keepalive)
        if limit is None:  # one float per keep alive value (at most 65,536), not one per client
            limit = _KEEPALIVE_LIMITS[keepalive] = keepalive * 1.5
        return limit, announced

    def _connack(self, packet: Connect, present: bool, assigned: str | None, keep_alive: int | None) -> Connack:
        if packet.protocol_level != MQTT_5:
            return Connack(present, 0)
        return Connack(
            present,
            0,
            Properties(
                assigned_client_identifier=assigned,
                server_keep_alive=keep_alive,
                receive_maximum=RECEIVE_MAXIMUM,
                topic_alias_maximum=TOPIC_ALIAS_MAXIMUM,
                maximum_packet_size=self.limits.max_packet_size,
            ),
        )

    # -- packets -------------------------------------------------------------------

    async def subscribe(self, conn: Client, packet: Subscribe) -> None:
        state = conn.state
        assert state is not None
        limits = self.limits
        v5 = state.level == MQTT_5
        ids = packet.properties.subscription_identifier
        identifier = ids[0] if ids else 0
        # One filter repeated in a packet is subscribed once, with its last entry's options
        # (a later entry replaces an earlier one, as a second SUBSCRIBE would), and gets that
        # entry's code at each of its places: the SUBACK keeps one code per entry [MQTT-3.9.3-1]
        # while the work (ACL, routing, the retained walk) is done once per distinct filter.
        last = {option.topic_filter: option for option in packet.subscriptions}
        decided: dict[str, int] = {}
        pending: list[asyncio.Future[Kept]] = []
        cap = limits.max_subscribe_filters
        for full, option in last.items():
            if cap and len(decided) >= cap:
                self.refused["subscribe_filters"] += 1
                decided[full] = R.QUOTA_EXCEEDED if v5 else 0x80
                continue
            _, topic_filter = split_shared(full)
            if not state.permissions.may_subscribe(topic_filter):
                self.refused["acl_subscribe_denied"] += 1
                decided[full] = R.NOT_AUTHORIZED if v5 else 0x80
                continue
            if topic_filter.count("/") >= limits.max_topic_levels:
                self.refused["topic_levels"] += 1
                decided[full] = R.TOPIC_FILTER_INVALID if v5 else 0x80
                continue
            count = len(state.subscriptions)
            if limits.max_subscriptions and full not in state.subscriptions and count >= limits.max_subscriptions:
                self.refused["max_subscriptions"] += 1
                decided[full] = R.QUOTA_EXCEEDED if v5 else 0x80
                continue
            sub = Subscription(full, option.qos, "", option.no_local, option.retain_as_published, identifier)
            future = self._add_subscription(state, sub, retain_handling=option.retain_handling)
            decided[full] = 0x80 if future is None else option.qos
            if future is not None:
                pending.append(future)
        if len(decided) > (cap or len(decided)):
            log.info(
                "client %r: a SUBSCRIBE with %d distinct filters, over broker.max_subscribe_filters (%d): "
                "the filters past it refused",
                state.clientid,
                len(decided),
                cap,
            )
        codes = [decided[option.topic_filter] for option in packet.subscriptions]
        conn.send(Suback(packet.packet_id, codes))
        for future in pending:
            await future

    async def unsubscribe(self, conn: Client, packet: Unsubscribe) -> None:
        state = conn.state
        assert state is not None
        codes: list[int] = []
        pending = []
        for topic_filter in packet.topic_filters:
            existed, future = self._remove_subscription(state, topic_filter)
            codes.append(R.SUCCESS if existed else R.NO_SUBSCRIPTION_EXISTED)
            pending.append(future)
        conn.send(Unsuback(packet.packet_id, codes))
        for future in pending:
            await future

    # -- ending ----------------------------------------------------------------------

    async def teardown(self, conn: Client) -> None:
        """After a connection ended: its will, its session's end or expiry, client.disconnected."""
        try:
            state = conn.state
            if state is None or state.conn is not conn:
                return
            state.conn = None
            reason = conn.reason or "closed"
            will = conn.will if reason in _WILL_REASONS or (reason == "normal" and conn.will) else None
            if will is not None:
                delay = will.properties.will_delay_interval or 0
                if delay and state.expiry:
                    self.delay_will(state, PendingWill(will, conn.peer.address), min(delay, state.expiry))
                else:
                    await self._publish_will(state, conn.peer.address, will)
            if state.clean:
                self._discard(state)
            elif state.expiry != NEVER:
                loop = asyncio.get_running_loop()
                state.expiry_timer = loop.call_later(state.expiry, self.expire, state)
                state.expires_at = time.time() + state.expiry
            state.touch(whole=True)
            if not state.stream.idle or self.should_post(Hookpoint.CLIENT_DISCONNECTED, state.clientid):
                event = ClientDisconnected(
                    clientid=state.clientid,
                    username=state.username,
                    node=self.node,
                    peername=conn.peer.address,
                    reason=reason,
                    timestamp=time.time(),
                    proto_ver=state.level,
                )
                await state.stream.emit(event)
        finally:
            if conn.state is not None and self.active.get(conn.state.clientid) is conn:
                del self.active[conn.state.clientid]
                shrink_if_sparse(self.active)  # a fleet that disconnected leaves no fleet-sized table
            self.connections.discard(conn)
            conn.done.set()

    def delay_will(self, state: SessionState, pending: PendingWill, delay: float) -> None:
        """Publish a session's will after `delay` seconds, unless its client is back by then."""

        def due() -> None:
            if state.will is pending:
                state.will = None
                state.touch(whole=True)
                asyncio.get_running_loop().create_task(self._publish_will(state, pending.peername, pending.will))

        pending.timer = asyncio.get_running_loop().call_later(delay, due)
        pending.due = time.time() + delay
        state.will = pending
        state.touch(whole=True)

    async def _publish_will(self, state: SessionState, peername: str, will: Will) -> None:
        props = will.properties
        expires = 0.0
        if props is not EMPTY:
            if props.message_expiry_interval is not None:
                expires = time.monotonic() + props.message_expiry_interval
            props = replace(props, will_delay_interval=None)
        message = Message(
            self.msgids.next(), will.topic, will.payload, will.qos, will.retain, state.clientid, props, expires
        )
        await self.publish(message, state, peername=peername)

    def expire(self, state: SessionState) -> None:
        """A session's expiry interval passed with no connection: it ends (its will goes now)."""
        if state.conn is not None or self.states.get(state.clientid) is not state:
            return
        pending = state.will
        if pending is not None:
            state.will = None
            if pending.timer is not None:
                pending.timer.cancel()
            asyncio.get_running_loop().create_task(self._publish_will(state, pending.peername, pending.will))
        log.info("session of client %r expired", state.clientid)
        self.traffic.clients_expired += 1
        self._discard(state)

    async def remove_session(self, clientid: str) -> SessionState | None:
        """The operator removes an offline session (the API's DELETE /sessions/{id}): its queue,
        in-flight messages and subscriptions, its durable rows. Its pending will is dropped, not
        sent (as EMQX discards a session). None: no such session. Refused (SessionConnected)
        while its client is connected: kick it first."""
        async with self._client_lock(clientid):  # not while a CONNECT takes the session
            state = self.states.get(clientid)
            if state is None:
                return None
            if state.connected:
                raise SessionConnected(clientid)
            log.info("session of client %r removed", clientid)
            self._discard(state)
        await self.committed()  # removed means removed on disk too (durable sessions)
        return state

    async def committed(self) -> None:
        """Wait until what the durable store is owed now is committed (at once without one)."""
        pending = self.journal.committed() if self.journal is not None else None
        if pending is not None:
            await pending

    def _discard(self, state: SessionState) -> None:
        self.dropped_by_ended_sessions += state.dropped
        state.dropped = 0
        self.router.unsubscribe_all(state)
        state.discard()
        if self.states.get(state.clientid) is state:
            del self.states[state.clientid]
        state.touch(whole=True)  # a durable session's row goes (unless a new session of the client id has one)

    @contextlib.asynccontextmanager
    async def _client_lock(self, clientid: str) -> AsyncIterator[None]:
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
        """Close every connection (reason "shutdown") and wait for their teardown."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        connections = list(self.connections)
        for conn in connections:
            conn.close("shutdown", R.SERVER_SHUTTING_DOWN)
        if connections:
            waiters = [asyncio.ensure_future(c.done.wait()) for c in connections]
            _, late = await asyncio.wait(waiters, timeout=grace)
            for waiter in late:
                waiter.cancel()
            for conn in connections:
                if not conn.done.is_set():
                    conn.abandon()

    def describe(self) -> dict[str, Any]:
        return {"connections": len(self.connections), "sessions": len(self.states)}
