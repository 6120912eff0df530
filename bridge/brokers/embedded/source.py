"""`broker.mode = embedded`: an MQTT 3.1.1 / 5.0 broker inside the bridge process."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bridge.brokers.base import BrokerNumbers, BrokerSource, Delivery, EventSink
from bridge.brokers.embedded import tcp
from bridge.brokers.embedded.access import ACL_REFUSALS, LOGIN_REFUSALS, Gate
from bridge.brokers.embedded.auth.gate import AuthGate
from bridge.brokers.embedded.bans import Bans
from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.census import Census
from bridge.brokers.embedded.durable import DurableStore
from bridge.brokers.embedded.durable.health import store_health
from bridge.brokers.embedded.limits import REFUSALS, Limits
from bridge.brokers.embedded.listeners import Listener, serve
from bridge.brokers.embedded.systopics import SysTopics
from bridge.msgid import MsgIdGenerator

log = logging.getLogger("bridge.brokers.embedded")

_STOP_TIMEOUT = 5.0


def split_listen(listen: str) -> tuple[str, int]:
    """("host", port) of a listen address "host:port" ("[v6]:port" too)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class EmbeddedBroker(BrokerSource):
    """The bridge's own MQTT broker (bridge/brokers/embedded/, on the codec in bridge/brokers/embedded/codec/),
    whose hooks become bridge events.

    Every hookpoint fires in-process; proxy subscriptions and deliveries to one
    session are exact. Sessions live in memory (a restart loses them) unless durable sessions
    are on (`durable_dir`): then sessions with expiry > 0 and retained messages are kept in a
    store on disk (durable/) and restored at start.
    """

    mode = "embedded"
    # A PUBACK / PUBREC goes out once every rule's action for the message is committed or
    # spooled (docs/architecture.md#acknowledged-means-kept): a kill -9 at any moment loses no acknowledged message.
    acks_after_commit = True

    def __init__(
        self,
        listen: str = "127.0.0.1:1883",
        *,
        node: str,
        msgids: MsgIdGenerator,
        limits: Limits | None = None,
        gate: Gate | None = None,
        takeover: str = "any",
        listeners: Sequence[Listener] = (),
        durable_dir: str | None = None,
        durable_commit_interval: float = 0.002,
        durable_preload: int = 0,
        durable_min_free: int = 0,
        sys_interval: float = 0.0,
        bans_file: str | None = None,
        tcp_transport: str = "broker",
    ) -> None:
        limits = limits or Limits()
        self._listen = listen
        self._node = node
        self._msgids = msgids
        self._limits = limits
        self._gate = gate
        self._takeover = takeover
        self._listeners = tuple(listeners)  # besides `listen` (tcp): ssl, ws, wss
        self._durable_dir = durable_dir  # durable sessions on: where the store is
        self._commit_interval = durable_commit_interval
        self._preload = durable_preload  # restored queues up to this many bytes are read at start
        self._min_free = durable_min_free  # bytes the store's disk must have free for /healthz
        self._sys_interval = sys_interval  # $SYS/broker/... every this many seconds; 0: never
        self._bans_file = bans_file  # the banned list's file (bans.py); None: kept in memory only
        self._tcp_transport = tcp_transport  # broker.listener.tcp.transport: "broker" (tcp.py) or "loop"
        self._sys: SysTopics | None = None
        self._census: Census | None = None
        self._bridge_status: Callable[[], Mapping[str, str]] | None = None  # $SYS/broker/hookbridge/...
        self._broker: Broker | None = None
        self._servers: list[asyncio.Server | tcp.Server] = []
        self._ports: dict[str, int] = {}
        self._refused: Counter[str] = Counter()

    @property
    def port(self) -> int:
        """The TCP port the broker listens on (useful with port 0)."""
        return self.port_of("tcp")

    def port_of(self, listener: str) -> int:
        """The port a listener (tcp, ssl, ws, wss) is bound to."""
        if listener not in self._ports:
            raise RuntimeError(f"the embedded broker is not listening on {listener}")
        return self._ports[listener]

    @property
    def dropped_messages(self) -> int:
        """Messages dropped from full session queues since the broker started."""
        broker, census = self._broker, self._census
        if broker is None or census is None:
            return 0
        return broker.dropped_by_ended_sessions + census.tally().dropped

    def numbers(self) -> BrokerNumbers | None:
        """Connections, sessions, subscriptions, stored messages and traffic (census.py: the last
        complete walk over the sessions when the broker is too big to walk at once)."""
        return None if self._census is None else self._census.numbers()

    async def fresh_numbers(self) -> BrokerNumbers | None:
        return None if self._census is None else await self._census.fresh()

    def report_bridge_status(self, read: Callable[[], Mapping[str, str]]) -> None:
        self._bridge_status = read
        if self._sys is not None:
            self._sys.bridge_status = read

    @property
    def output_pauses(self) -> int:
        return self._broker.output_pauses if self._broker is not None else 0

    @property
    def durable(self) -> Mapping[str, int]:
        broker = self._broker
        if broker is None or broker.journal is None:
            return {}
        messages, sessions = broker.journal.store.counts()
        unloaded = self._census.tally().unloaded if self._census is not None else 0
        return {"sessions": sessions, "messages": messages, "unloaded": unloaded}

    def durable_health(self) -> Mapping[str, Any] | None:
        broker = self._broker
        if broker is None or broker.journal is None:
            return None
        return store_health(broker.journal, self._min_free)

    @property
    def refused(self) -> Mapping[str, int]:
        """What the broker's limits refused, closed or dropped, by reason (limits.REFUSALS)."""
        return self._broker.refused if self._broker is not None else self._refused

    @property
    def refusal_reasons(self) -> tuple[str, ...]:
        return (*REFUSALS, *LOGIN_REFUSALS, *ACL_REFUSALS)

    @property
    def gate(self) -> Gate | None:
        """Who may connect, publish and subscribe (None: anyone)."""
        return self._gate

    def reload(self) -> list[str]:
        """SIGHUP: the password and ACL files, read again (on a problem the old ones stay)."""
        return self._gate.reload() if isinstance(self._gate, AuthGate) else []

    async def start(self, sink: EventSink) -> None:
        """Listen and serve; returns once every listener is bound."""
        if self._broker is not None:
            raise RuntimeError("the embedded broker is already started")
        store = DurableStore(self._durable_dir) if self._durable_dir is not None else None
        bans = Bans(self._bans_file)
        bans.load()  # before the first client can connect
        broker = Broker(
            bans=bans,
            node=self._node,
            msgids=self._msgids,
            sink=sink,
            limits=self._limits,
            gate=self._gate,
            takeover=self._takeover,
            store=store,
            commit_interval=self._commit_interval,
            preload=self._preload,
        )
        broker.refused = self._refused  # one counter for the life of this source
        if broker.journal is not None:
            broker.journal.restore(broker)  # before the first client can connect
        host, port = split_listen(self._listen)
        try:
            for listener in (Listener("tcp", host, port, transport=self._tcp_transport), *self._listeners):
                server = await serve(listener, broker)
                self._servers.append(server)
                self._ports[listener.name] = int(server.sockets[0].getsockname()[1])
                log.info(
                    "embedded MQTT broker listening on %s (%s, port %d)",
                    listener.address,
                    listener.name,
                    self._ports[listener.name],
                )
        except BaseException:
            await self._close_servers()
            if broker.journal is not None:
                broker.journal.close()
            raise
        self._broker = broker
        self._census = Census(broker.traffic, broker.states, broker.router.retained, broker.refused)
        self._sys = SysTopics(broker, self._sys_interval, self._census)
        self._sys.bridge_status = self._bridge_status
        self._sys.start()

    async def _close_servers(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for server in servers:
            await server.wait_closed()
        self._ports.clear()

    async def stop(self) -> None:
        """Close every connection (reason "shutdown"), stop listening, flush events."""
        broker, self._broker = self._broker, None
        if broker is None:
            return
        sys_topics, self._sys = self._sys, None
        if sys_topics is not None:
            await sys_topics.stop()
        census, self._census = self._census, None
        if census is not None:
            census.close()
        for server in self._servers:
            server.close()
        await broker.close_all(_STOP_TIMEOUT)
        await self._close_servers()
        await broker.gate.close()
        streams = [state.stream for state in broker.states.values()]
        if streams:
            drained = asyncio.gather(*(stream.drain() for stream in streams), return_exceptions=True)
            try:
                await asyncio.wait_for(drained, _STOP_TIMEOUT)
            except TimeoutError:
                log.warning("event sink did not take the last events within %.0f s", _STOP_TIMEOUT)
                for stream in streams:
                    stream.cancel()
        if broker.journal is not None:
            broker.journal.close()

    async def subscribe(self, clientid: str, topic: str, qos: int) -> bool:
        """Subscribe `clientid` (connected or offline persistent) as if it had sent SUBSCRIBE.

        Retained messages are sent when the client is connected. Fires
        session.subscribed (queued in the client's event order, not awaited).
        Returns False when the client has no session.
        """
        return self._running.proxy_subscribe(clientid, topic, qos)

    async def deliver(self, clientid: str, deliveries: Sequence[Delivery]) -> None:
        """Queue `deliveries` to the one session of `clientid`, in order.

        Connected: sent through its normal QoS flow. Offline persistent: kept in
        its queue until it returns. Raises DeliveryError when there is no session.
        """
        self._running.deliver_to(clientid, deliveries)

    def is_connected(self) -> bool:
        return self._broker is not None

    async def idle(self) -> None:
        broker = self._broker
        while broker is not None and (broker.busy_streams or _tearing_down(broker)):
            # A connection that has ended (its DISCONNECT read, its socket closed) emits
            # client.disconnected only in its teardown: wait for that before the event streams.
            await _teardowns_over(broker)
            await asyncio.gather(*(stream.drain() for stream in list(broker.busy_streams)))

    @property
    def busy(self) -> bool:
        broker = self._broker
        return broker is not None and bool(broker.busy_streams or _tearing_down(broker))

    @property
    def sys_topics(self) -> SysTopics | None:
        """The task publishing `$SYS/broker/...` (systopics.py); None when stopped."""
        return self._sys

    @property
    def core(self) -> Broker | None:
        """The running broker (its sessions, router): what the management API reads; None when stopped."""
        return self._broker

    @property
    def _running(self) -> Broker:
        if self._broker is None:
            raise RuntimeError("the embedded broker is not started")
        return self._broker


def _tearing_down(broker: Broker) -> bool:
    """Whether a connection has ended and its teardown (will, session end, client.disconnected)
    is not over yet."""
    return any(conn.reason is not None and not conn.done.is_set() for conn in broker.connections)


async def _teardowns_over(broker: Broker) -> None:
    """Wait until the teardown of every connection that has ended is over."""
    for conn in list(broker.connections):
        if conn.reason is not None:
            await conn.done.wait()
