"""`broker.mode = mqtt`: events from any MQTT 3.1.1/5 broker the bridge subscribes to.

Messages arrive on the bridge's own persistent session (client.py) and become
message.publish events; with Mosquitto's `log_dest topic`, its log lines become
client and session events (mosquitto_log.py). The broker is acknowledged only
after every rule for a message has committed, in arrival order:

    PUBLISH (client.py) --(arrival order)--> ack window + intake queue --> one
    task calls the dispatcher per event (order preserved) --> each rule's "committed"
    future --> ack window (acks.py: mine and every older message done) --> PUBACKs

The broker itself bounds what is in flight (receive maximum), and reading pauses
when it sends more, so the intake queue never holds much more than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.brokers.base import BrokerSource, EventSink, callback_sink
from bridge.brokers.eventloop import running_loop
from bridge.brokers.external.mqtt.acks import AckWindow, Unacked
from bridge.brokers.external.mqtt.client import Connection, MessageHandler
from bridge.brokers.external.mqtt.filters import covers
from bridge.brokers.external.mqtt.ledger import PacketLedger, digest, ledger_path
from bridge.brokers.external.mqtt.mosquitto_log import LOG_TOPICS, MosquittoLog
from bridge.events import Event, MessagePublish, UserProperties
from bridge.msgid import MsgIdGenerator, timestamp_us

log = logging.getLogger("bridge.brokers.external.mqtt")

_STOP_TIMEOUT = 5.0
# Retiring waits longer than a plain stop: a stalled database has its actions moved to the spool
# within its request_timeout (5 s by default), and only then can the last messages be acknowledged.
_RETIRE_TIMEOUT = 40.0


@dataclass(frozen=True)
class Upstream:
    """How to reach the broker (the `broker.*` settings)."""

    host: str
    port: int
    clientid: str
    username: str = ""
    password: str = ""
    tls: object = None  # an ssl.SSLContext, or None
    shared_group: str = ""
    receive_maximum: int = 1024
    session_expiry: int = 7 * 86400
    state_dir: str = "data/spool"


class MqttSource(BrokerSource):
    """Subscribes to the rules' topics (and Mosquitto's log topics) on a persistent session."""

    mode = "mqtt"
    acks_after_commit = True

    def __init__(
        self,
        upstream: Upstream,
        *,
        node: str,
        msgids: MsgIdGenerator,
        message_filters: Sequence[str],
        client_events: bool,
    ) -> None:
        self.upstream = upstream
        self.node = node
        self._msgids = msgids
        self._message_filters = list(message_filters)
        self._client_events = client_events
        self._sink: EventSink | None = None
        self._intake: asyncio.Queue[tuple[list[Event], Unacked]] = asyncio.Queue()
        self._window = AckWindow(self._acknowledge)
        self._worker: asyncio.Task[None] | None = None
        self._connection: Connection | None = None
        self._ledger: PacketLedger | None = None
        self._paused = False  # socket reading paused: inflight reached the receive maximum
        self._retired = False  # retire() ran: stop() ends the session instead of keeping it
        self._arrivals = 0  # messages received so far (retire's barrier: did one come during a ping?)
        self._log = MosquittoLog(node, upstream.clientid)

    # -- what to subscribe to, and what a message means (emqx mode overrides these) --

    def control_subscriptions(self) -> list[tuple[str, int]]:
        """Non-message topics: Mosquitto's log lines (QoS 0, as Mosquitto publishes them)."""
        return [(topic, 0) for topic in LOG_TOPICS] if self._client_events else []

    def control_events(self, topic: str, payload: bytes) -> list[Event] | None:
        """Events from a control topic; None when `topic` carries application messages."""
        if not topic.startswith("$SYS/broker/log/"):
            return None
        event = self._log.parse(topic, payload)
        return [] if event is None else [event]

    def subscriptions(self) -> list[tuple[str, int]]:
        group = self.upstream.shared_group
        # A control topic the message filters already cover (emqx's event topic under `#`) comes
        # through them: a second, overlapping subscription would bring each message twice.
        messages = self._message_filters
        control = [(t, q) for t, q in self.control_subscriptions() if not any(covers(f, t) for f in messages)]
        subs = [(f, 1) for f in self._message_filters] + control
        return [(f"$share/{group}/{f}" if group else f, qos) for f, qos in subs]

    # -- lifecycle ------------------------------------------------------------------

    async def start(self, sink: EventSink) -> None:
        up = self.upstream
        self._sink = sink
        self._ledger = PacketLedger(ledger_path(up.state_dir, up.clientid))
        self._worker = asyncio.create_task(self._dispatch_loop(), name=f"{self.mode}-intake")
        handler: MessageHandler = self._arrived
        self._connection = Connection(
            up.host,
            up.port,
            clientid=up.clientid,
            on_message=handler,
            subscriptions=self.subscriptions(),
            receive_maximum=up.receive_maximum,
            session_expiry=up.session_expiry,
            username=up.username,
            password=up.password,
            tls=up.tls,  # type: ignore[arg-type]
        )
        await self._connection.start()
        log.info("%s mode: subscribed to %s", self.mode, ", ".join(t for t, _ in self.subscriptions()) or "nothing")

    async def stop(self) -> None:
        """Let messages in flight commit and be acknowledged (up to 5 s), then disconnect: keeping
        the session (what a restart picks up), or ending it after `retire`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle(), _STOP_TIMEOUT)
        if self._connection is not None:
            await self._connection.close(end_session=self._retired)
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        if self._ledger is not None:
            self._ledger.close()
            if self._retired and self._connection is not None and self._connection.is_mqtt5:
                self._ledger.path.unlink(missing_ok=True)  # its session is gone: its packet ids mean nothing

    async def retire(self) -> None:
        """Leave for good (a worker scaled down): unsubscribe, take and acknowledge every message
        the session still holds, so that `stop` can end the session with nothing in it.

        After the UNSUBACK no new message joins the session, but the broker may still hold some it
        had queued behind the receive maximum; it sends them as PUBACKs free room. So: wait until
        everything received is acknowledged, then a ping round trip (client.py: the broker
        answers it after it handled those PUBACKs); nothing new came meanwhile, the session is empty.
        """
        connection = self._connection
        if connection is None or not connection.connected.is_set():
            log.warning("retiring while not connected: the session stays until broker.session_expiry")
            return
        try:
            await asyncio.wait_for(self._empty_session(connection), _RETIRE_TIMEOUT)
        except TimeoutError:
            log.warning("messages still unacknowledged after %.0f s: keeping the session", _RETIRE_TIMEOUT)
            return
        self._retired = True
        if not connection.is_mqtt5:
            log.warning("MQTT 3.1.1 broker: the session cannot be ended; it stays until the broker expires it")
        log.info("retired: unsubscribed, every message it held is acknowledged; ending the session")

    async def _empty_session(self, connection: Connection) -> None:
        await connection.unsubscribe_all()
        while True:
            await self.idle()
            seen = self._arrivals
            await connection.round_trip()
            if self._arrivals == seen and not self.busy:
                return

    def is_connected(self) -> bool:
        return self._connection is not None and self._connection.connected.is_set()

    async def idle(self) -> None:
        await self._window.emptied.wait()

    @property
    def busy(self) -> bool:
        return len(self._window) > 0

    @property
    def inflight(self) -> int:
        """Messages received and not yet acknowledged."""
        return len(self._window)

    @property
    def redeliveries_recognised(self) -> int:
        return self._ledger.reused if self._ledger is not None else 0

    # -- the message path -------------------------------------------------------------

    def _arrived(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        dup: bool,
        retain: bool,
        packet_id: int | None,
        user_properties: UserProperties,
    ) -> asyncio.Future[None] | None:
        """Take a message in arrival order. A QoS 1 message is acknowledged by `_acknowledge`; for
        QoS 0 and 2 the returned future is done when gmqtt may answer."""
        self._arrivals += 1
        events = self.control_events(topic, payload)
        if events is None:
            events = [self._publish(topic, payload, qos, dup, retain, packet_id, user_properties)]
        message = self._window.arrived(packet_id, qos == 1)
        self._intake.put_nowait((events, message))
        if len(self._window) >= self.upstream.receive_maximum and not self._paused and self._connection is not None:
            self._paused = True
            self._connection.pause_reading(True)
        if qos == 1:
            return None
        message.acked = running_loop().create_future()
        return message.acked

    def _acknowledge(self, messages: list[Unacked]) -> None:
        """These messages, oldest first, are committed and so is every message before them."""
        ledger, pubacks = self._ledger, list[int]()
        for message in messages:
            # The ledger marks the id acknowledged before its PUBACK / PUBREC can reach the broker.
            if message.packet_id is not None and ledger is not None:
                ledger.acked(message.packet_id)
            if message.puback and message.packet_id is not None:
                pubacks.append(message.packet_id)
            elif message.acked is not None and not message.acked.done():
                message.acked.set_result(None)
        connection = self._connection
        if connection is None:
            return
        if pubacks:
            connection.send_pubacks(pubacks)
        if self._paused and len(self._window) <= self.upstream.receive_maximum // 2:
            self._paused = False
            connection.pause_reading(False)

    def _publish(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        dup: bool,
        retain: bool,
        packet_id: int | None,
        user_properties: UserProperties,
    ) -> Event:
        msgid = self._msgids.next()
        ledger = self._ledger
        if packet_id is not None and ledger is not None:
            fresh = msgid
            msgid = ledger.assign(packet_id, digest(topic, payload, qos, retain), dup, fresh)
            if msgid != fresh and ledger.reused in (1, 10, 100, 1000, 10000):
                log.info(
                    "redelivered message recognised (packet id %d keeps msgid %s); %d so far",
                    packet_id,
                    msgid,
                    ledger.reused,
                )
        # The publisher's client id and protocol level are not carried by MQTT (proto_ver stays
        # 4); its user properties are, forwarded unchanged by a 5.0 broker. The timestamp comes
        # from the msgid so that a redelivery writes exactly what the first delivery wrote.
        return MessagePublish(
            msgid=msgid,
            clientid="",
            username=None,
            topic=topic,
            qos=qos,
            payload=payload,
            retain=retain,
            node=self.node,
            peername="",
            timestamp=timestamp_us(msgid) / 1e6,
            user_properties=user_properties,
        )

    async def _dispatch_loop(self) -> None:
        assert self._sink is not None
        dispatch = callback_sink(self._sink)
        settle = self._window.settle
        while True:
            events, message = await self._intake.get()
            for event in events:
                message.waiting += 1  # before dispatching: a rule may commit while a later one queues

                def committed(message: Unacked = message) -> None:
                    settle(message)

                try:
                    if not await dispatch(event, committed):
                        message.waiting -= 1  # no rule: nothing to wait for
                except Exception:  # a bug in a rule must not stop the stream: log it, ack the message
                    log.exception("dispatching %s failed", event.hookpoint)
                    message.waiting -= 1
            settle(message)  # dispatched: from now on only its rules' commits hold it
