"""`Client`: the one MQTT test client, paho-mqtt v2 with waits the test's event loop can await.

Every test that speaks MQTT through a library uses it (a test that needs packets paho refuses to
send uses `support.raw.RawClient`). MQTT 3.1.1 (the default) or 5.0 (`version=V5`, with
properties: `support.mqtt_properties`); over TCP, TLS (`tls=`) or a WebSocket (`websocket=True`).

paho runs its network on a thread of its own; every callback is handed to the test's loop with
`call_soon_threadsafe`, so a test awaits CONNACK, SUBACK, acks, messages and the broker's close
instead of sleeping, and never blocks the loop an in-process broker under test runs on.

    client = await Client(port, "dev1", clean=False).connected()   # CONNECT accepted, or fail
    connack = await Client(port, "dev2", version=V5).connect()      # read the CONNACK itself
    await client.subscribe("t/#", 1)
    await client.publish("t/1", b"x", qos=1)                         # returns once PUBACKed
    [message] = await client.expect(1)
    await client.expect_nothing()
    await client.disconnect()      # returns once the broker has ended the session

`client.paho` is the paho client itself, for what a test does below this API.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from support.broker_close import until_closed_by_broker, watch_for_close
from support.mqtt_properties import as_dict, props, reason_code

TIMEOUT = 10.0  # how long any one wait may take before the test fails (never what a test asserts)
V311 = MQTTProtocolVersion.MQTTv311
V5 = MQTTProtocolVersion.MQTTv5


@dataclass(frozen=True)
class ConnAck:
    reason: int  # 3.1.1: the return code; 5.0: the reason code
    session_present: bool
    properties: dict[str, Any]


@dataclass(frozen=True)
class Message:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    mid: int
    properties: dict[str, Any]


@dataclass(frozen=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties | None = None


def unique(prefix: str) -> str:
    """A name no other test (or earlier run against the same broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def wait_until(predicate: Callable[[], bool], timeout: float = TIMEOUT, what: str = "condition") -> None:
    """Poll `predicate` without blocking the event loop; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


@dataclass
class _Pending:
    """Futures keyed by packet id, resolved from paho's thread."""

    loop: asyncio.AbstractEventLoop
    futures: dict[int, asyncio.Future[Any]] = field(default_factory=dict)

    def get(self, mid: int) -> asyncio.Future[Any]:
        return self.futures.setdefault(mid, self.loop.create_future())

    def resolve(self, mid: int, value: Any) -> None:
        _settle(self.get(mid), value)


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    """Set a result once: paho may report the same event twice (a DISCONNECT, then the socket closing)."""
    if not future.done():
        future.set_result(value)


class Client:
    """One paho-mqtt v2 client on its own network thread; every wait is awaitable and bounded."""

    def __init__(
        self,
        port: int,
        clientid: str = "",
        *,
        version: MQTTProtocolVersion = V311,
        clean: bool = True,
        manual_ack: bool = False,
        username: str | None = None,
        password: str | None = None,
        websocket: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`manual_ack`: the test acks each QoS 1/2 message itself (`ack`); `websocket`: over a
        WebSocket at /mqtt; `tls`: over TLS with this context (both: a WebSocket over TLS)."""
        self.port = port
        self.clientid = clientid
        self.version = version
        self._loop = asyncio.get_running_loop()
        self._clean = clean
        self._auto_ack = not manual_ack
        kwargs: dict[str, Any] = {} if version == V5 else {"clean_session": clean}
        self.paho = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=clientid,
            protocol=version,
            transport="websockets" if websocket else "tcp",
            # Always manual in paho: left to paho, the ack goes out after on_message returns, so a
            # disconnect() right after the test got the message could overtake it (and the
            # message rightly came again). _on_message acks before the test sees the message.
            manual_ack=True,
            reconnect_on_failure=False,  # a lost connection is the test's to see, not paho's to mend
            **kwargs,
        )
        # No window of the client's own: what a test floods is the broker's flow control.
        self.paho.max_inflight_messages_set(65535)
        if websocket:
            self.paho.ws_set_options(path="/mqtt")
        if tls is not None:
            self.paho.tls_set_context(tls)
        if username is not None:
            self.paho.username_pw_set(username, password)
        self.messages: asyncio.Queue[Message] = asyncio.Queue()
        self.connack: ConnAck | None = None
        self.disconnected: asyncio.Future[tuple[int, dict[str, Any]]] = self._loop.create_future()
        self._connack: asyncio.Future[ConnAck] = self._loop.create_future()
        self._pending = _Pending(self._loop)
        self._watch: socket.socket | None = None  # support.broker_close.watch_for_close
        self.paho.on_connect = self._on_connect
        self.paho.on_subscribe = self._on_subscribe
        self.paho.on_unsubscribe = self._on_unsubscribe
        self.paho.on_publish = self._on_publish
        self.paho.on_message = self._on_message
        self.paho.on_disconnect = self._on_disconnect

    # paho calls these on its own thread: hand them to the event loop.
    def _soon(self, fn: Callable[..., None], *args: Any) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    def _on_connect(self, _c: Any, _u: Any, flags: Any, reason: ReasonCode, properties: Any) -> None:
        connack = ConnAck(int(reason.value), bool(flags.session_present), as_dict(properties))
        self._soon(_settle, self._connack, connack)

    def _on_subscribe(self, _c: Any, _u: Any, mid: int, reasons: list[ReasonCode], _p: Any) -> None:
        self._soon(self._pending.resolve, mid, [int(r.value) for r in reasons])

    def _on_unsubscribe(self, _c: Any, _u: Any, mid: int, reasons: list[ReasonCode], _p: Any) -> None:
        self._soon(self._pending.resolve, mid, [int(r.value) for r in reasons])

    def _on_publish(self, _c: Any, _u: Any, mid: int, reason: ReasonCode, _p: Any) -> None:
        self._soon(self._pending.resolve, mid, int(reason.value))

    def _on_message(self, _c: Any, _u: Any, msg: paho.MQTTMessage) -> None:
        if self._auto_ack and msg.qos:
            self.paho.ack(msg.mid, msg.qos)
        message = Message(
            msg.topic,
            bytes(msg.payload),
            msg.qos,
            bool(msg.retain),
            bool(msg.dup),
            msg.mid,
            as_dict(getattr(msg, "properties", None)),
        )
        self._soon(self.messages.put_nowait, message)

    def _on_disconnect(self, _c: Any, _u: Any, _flags: Any, reason: ReasonCode, properties: Any) -> None:
        result = (int(reason.value), as_dict(properties))
        self._soon(_settle, self.disconnected, result)

    async def connect(
        self, *, keepalive: int = 60, will: Will | None = None, properties: Properties | None = None
    ) -> ConnAck:
        """Send CONNECT and return the CONNACK (a refusal too: check `.reason`); also kept in `.connack`."""
        if will is not None:
            self.paho.will_set(will.topic, will.payload, will.qos, will.retain, will.properties)
        extra: dict[str, Any] = {"clean_start": self._clean} if self.version == V5 else {}
        self.paho.connect_async("127.0.0.1", self.port, keepalive, properties=properties, **extra)
        self.paho.loop_start()
        async with asyncio.timeout(TIMEOUT):
            self.connack = await self._connack
        if self.connack.reason == 0:
            self._watch = watch_for_close(self.paho.socket())
        return self.connack

    async def connected(
        self, *, keepalive: int = 60, will: Will | None = None, properties: Properties | None = None
    ) -> Client:
        """Connect, fail the test unless the broker accepted, and return this client."""
        connack = await self.connect(keepalive=keepalive, will=will, properties=properties)
        assert connack.reason == 0, f"{self.clientid!r} refused: {connack}"
        return self

    async def subscribe(
        self,
        topic_filter: str | list[tuple[str, int]],
        qos: int = 1,
        *,
        no_local: bool = False,
        retain_as_published: bool = False,
        retain_handling: int = 0,
        subscription_id: int | None = None,
    ) -> list[int]:
        """SUBSCRIBE one filter, or a list of (filter, QoS) in one packet; returns the SUBACK's
        granted QoS / reason codes (128 / 0x80 and up: refused), one per filter."""
        properties = None
        if subscription_id is not None:
            properties = props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=subscription_id)
        if isinstance(topic_filter, list):
            _, mid = self.paho.subscribe(topic_filter, properties=properties)
        elif self.version == V5:
            options = SubscribeOptions(qos, no_local, retain_as_published, retain_handling)
            _, mid = self.paho.subscribe(topic_filter, options=options, properties=properties)
        else:
            _, mid = self.paho.subscribe(topic_filter, qos)
        assert mid is not None, "not connected"
        async with asyncio.timeout(TIMEOUT):
            result: list[int] = await self._pending.get(mid)
            return result

    async def unsubscribe(self, topic_filter: str | list[str]) -> list[int]:
        """UNSUBSCRIBE one filter or a list in one packet; returns the UNSUBACK's reason codes."""
        _, mid = self.paho.unsubscribe(topic_filter)
        assert mid is not None, "not connected"
        async with asyncio.timeout(TIMEOUT):
            result: list[int] = await self._pending.get(mid)
            return result

    def send(
        self,
        topic: str,
        payload: bytes | str,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> asyncio.Future[int]:
        """PUBLISH without waiting; the future holds the PUBACK/PUBREC reason code (0 once sent, QoS 0)."""
        return self._pending.get(self.paho.publish(topic, payload, qos, retain, properties).mid)

    async def publish(
        self,
        topic: str,
        payload: bytes | str,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> int:
        """PUBLISH and wait until sent (QoS 0), acked (1) or completed (2); returns the reason code."""
        async with asyncio.timeout(TIMEOUT):
            return await self.send(topic, payload, qos, retain, properties)

    async def publish_many(self, items: list[tuple[str, bytes]], qos: int = 1, timeout: float = 60.0) -> None:
        """PUBLISH all of `items` (topic, payload) at once and wait for every ack (QoS 1 unless told)."""
        acks = [self.send(topic, payload, qos) for topic, payload in items]
        async with asyncio.timeout(timeout):
            await asyncio.gather(*acks)

    async def message(self, timeout: float = TIMEOUT) -> Message:
        """The next message delivered to this client (TimeoutError if none comes)."""
        async with asyncio.timeout(timeout):
            return await self.messages.get()

    async def expect(self, count: int, timeout: float = TIMEOUT) -> list[Message]:
        """The next `count` messages, in the order delivered; fails if they do not all come within `timeout`."""
        got: list[Message] = []
        try:
            async with asyncio.timeout(timeout):
                while len(got) < count:
                    got.append(await self.messages.get())
        except TimeoutError:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {count} messages at {self.clientid!r} (got {len(got)})"
            ) from None
        return got

    async def expect_nothing(self, within: float = 0.3) -> None:
        """Fail if a message arrives within `within` seconds. Prefer `until` where a marker
        message can bound the wait: it needs no guess at how long is long enough."""
        await asyncio.sleep(within)
        assert self.messages.empty(), f"{self.clientid!r} received {self.messages.get_nowait()}"

    async def until(self, topic: str, payload: bytes, timeout: float = TIMEOUT) -> list[Message]:
        """Every message up to (not including) the marker `topic`/`payload`.

        Deliveries to one client keep publish order, so a marker published after the
        messages a test expects (or expects not to get) bounds the wait without a sleep."""
        got = []
        while (message := await self.message(timeout)).topic != topic or message.payload != payload:
            got.append(message)
        return got

    def ack(self, message: Message) -> None:
        """Acknowledge a message received with manual_ack=True."""
        self.paho.ack(message.mid, message.qos)

    async def wait_disconnected(self, timeout: float = TIMEOUT) -> tuple[int, dict[str, Any]]:
        """Wait until the connection ended; returns (reason code, DISCONNECT properties)."""
        async with asyncio.timeout(timeout):
            return await asyncio.shield(self.disconnected)

    async def disconnect(self, reason: str | None = None, properties: Properties | None = None) -> None:
        """Send DISCONNECT (5.0: with the named reason code), stop the network thread and return
        once the broker has closed the connection: it has read the DISCONNECT and ended the
        session, so what the test reads next (a stored client state after `bridge.idle()`) sees it."""
        code = reason_code(PacketTypes.DISCONNECT, reason) if reason else None
        self.paho.disconnect(code, properties)
        await self.wait_disconnected()
        await asyncio.to_thread(self.paho.loop_stop)
        if self._watch is not None:
            watch, self._watch = self._watch, None
            await until_closed_by_broker(watch, what=f"{self.clientid!r} closed by the broker")

    async def drop(self) -> None:
        """Close the socket without DISCONNECT (an abnormal end: the will is due)."""
        sock = self.paho.socket()
        if sock is not None:
            sock.close()
        self._forget_watch()  # the connection ends only when its last descriptor is closed
        await asyncio.to_thread(self.paho.loop_stop)

    async def freeze(self) -> None:
        """Stop the network thread but keep the socket open: no PINGREQ, no reading (keepalive runs out)."""
        await asyncio.to_thread(self.paho.loop_stop)

    async def close(self) -> None:
        """Teardown: disconnect if still connected, stop the thread."""
        if self.paho.is_connected():
            self.paho.disconnect()
        await asyncio.to_thread(self.paho.loop_stop)
        self._forget_watch()

    def _forget_watch(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


async def connect_v5(
    make: Callable[..., Client],
    clientid: str = "",
    *,
    clean: bool = True,
    keepalive: int = 60,
    will: Will | None = None,
    manual_ack: bool = False,
    **connect_properties: Any,
) -> tuple[Client, ConnAck]:
    """A 5.0 client (from a `clients` fixture) whose CONNECT was accepted, and its CONNACK.

    Keyword arguments beyond the named ones are CONNECT properties (SessionExpiryInterval=...)."""
    client = make(clientid, version=V5, clean=clean, manual_ack=manual_ack)
    properties = props(PacketTypes.CONNECT, **connect_properties) if connect_properties else None
    connack = await client.connect(keepalive=keepalive, will=will, properties=properties)
    assert connack.reason == 0, connack
    return client, connack


def paho_connect_blocking(port: int, clientid: str) -> None:
    """Connect and disconnect cleanly, blocking (for a broker in another process, from sync code)."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=clientid, protocol=paho.MQTTv311)
    connected = threading.Event()
    client.on_connect = lambda *args: connected.set()
    client.connect("127.0.0.1", port)
    client.loop_start()
    assert connected.wait(10), f"no CONNACK for {clientid}"
    client.disconnect()
    client.loop_stop()
