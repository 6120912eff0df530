"""Real MQTT clients for the broker suite, with waits the test's event loop can await.

`Client` wraps paho-mqtt v2 for both MQTT 3.1.1 and 5.0. paho runs its network on a thread
of its own; every callback is handed to the test's loop with `call_soon_threadsafe`, so a
test awaits CONNACK, SUBACK, acks, messages and DISCONNECT instead of sleeping, and never
blocks the loop an in-process broker under test may be running on.

`props()` builds paho properties from keyword arguments and `as_dict()` reads them back,
so assertions compare plain dicts (`{"UserProperty": [("a", "1")], ...}`).
"""

from __future__ import annotations

import asyncio
import socket
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

from support.mqtt import until_closed_by_broker, watch_for_close

TIMEOUT = 5.0
V311 = MQTTProtocolVersion.MQTTv311
V5 = MQTTProtocolVersion.MQTTv5


def unique(prefix: str) -> str:
    """A name no other test (or earlier run against the same broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def props(packet_type: int, **values: Any) -> Properties:
    """paho properties for one packet type, e.g. `props(PacketTypes.CONNECT, SessionExpiryInterval=5)`."""
    properties = Properties(packet_type)  # type: ignore[no-untyped-call]
    for name, value in values.items():
        setattr(properties, name, value)
    return properties


def as_dict(properties: Properties | None) -> dict[str, Any]:
    """The properties a packet carried, by paho's attribute names (absent ones left out)."""
    if properties is None:
        return {}
    attributes = (name.replace(" ", "") for name in properties.names)  # "User Property" -> UserProperty
    return {attribute: getattr(properties, attribute) for attribute in attributes if hasattr(properties, attribute)}


def reason_code(packet_type: int, name: str) -> ReasonCode:
    return ReasonCode(packet_type, name)


@dataclass(frozen=True)
class Broker:
    """A broker under test: its name (the test parameter) and its loopback port."""

    name: str
    port: int

    def client(self, clientid: str = "", **kwargs: Any) -> Client:
        """An unconnected client; prefer the `clients` fixture, which also stops it."""
        return Client(self.port, clientid, **kwargs)


@dataclass(frozen=True)
class ConnAck:
    reason: int
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
    """One paho-mqtt v2 client (3.1.1 or 5.0) on its own network thread."""

    def __init__(
        self,
        port: int,
        clientid: str = "",
        *,
        version: MQTTProtocolVersion = V5,
        clean: bool = True,
        manual_ack: bool = False,
    ) -> None:
        self.port = port
        self.version = version
        self._loop = asyncio.get_running_loop()
        self._clean = clean
        kwargs: dict[str, Any] = {} if version == V5 else {"clean_session": clean}
        self.paho = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=clientid,
            protocol=version,
            manual_ack=manual_ack,
            reconnect_on_failure=False,
            **kwargs,
        )
        self.messages: asyncio.Queue[Message] = asyncio.Queue()
        self.disconnected: asyncio.Future[tuple[int, dict[str, Any]]] = self._loop.create_future()
        self._connack: asyncio.Future[ConnAck] = self._loop.create_future()
        self._pending = _Pending(self._loop)
        self._watch: socket.socket | None = None  # support.mqtt.watch_for_close
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
        """Send CONNECT and return the CONNACK (a refusal too: check `.reason`)."""
        if will is not None:
            self.paho.will_set(will.topic, will.payload, will.qos, will.retain, will.properties)
        extra: dict[str, Any] = {"clean_start": self._clean} if self.version == V5 else {}
        self.paho.connect_async("127.0.0.1", self.port, keepalive, properties=properties, **extra)
        self.paho.loop_start()
        async with asyncio.timeout(TIMEOUT):
            connack = await self._connack
        if connack.reason == 0:
            self._watch = watch_for_close(self.paho.socket())
        return connack

    async def subscribe(
        self,
        topic_filter: str,
        qos: int = 1,
        *,
        no_local: bool = False,
        retain_as_published: bool = False,
        retain_handling: int = 0,
        subscription_id: int | None = None,
    ) -> list[int]:
        """SUBSCRIBE one filter; returns the SUBACK's granted QoS / reason codes."""
        if self.version == V5:
            options = SubscribeOptions(qos, no_local, retain_as_published, retain_handling)
            properties = None
            if subscription_id is not None:
                properties = props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=subscription_id)
            _, mid = self.paho.subscribe(topic_filter, options=options, properties=properties)
        else:
            _, mid = self.paho.subscribe(topic_filter, qos)
        assert mid is not None, "not connected"
        async with asyncio.timeout(TIMEOUT):
            result: list[int] = await self._pending.get(mid)
            return result

    async def unsubscribe(self, topic_filter: str) -> list[int]:
        _, mid = self.paho.unsubscribe(topic_filter)
        assert mid is not None, "not connected"
        async with asyncio.timeout(TIMEOUT):
            result: list[int] = await self._pending.get(mid)
            return result

    def send(
        self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, properties: Properties | None = None
    ) -> asyncio.Future[int]:
        """PUBLISH without waiting; the future holds the PUBACK/PUBREC reason code (0 once sent, QoS 0)."""
        return self._pending.get(self.paho.publish(topic, payload, qos, retain, properties).mid)

    async def publish(
        self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, properties: Properties | None = None
    ) -> int:
        """PUBLISH and wait until sent (QoS 0), acked (1) or completed (2); returns the reason code."""
        async with asyncio.timeout(TIMEOUT):
            return await self.send(topic, payload, qos, retain, properties)

    async def message(self, timeout: float = TIMEOUT) -> Message:
        async with asyncio.timeout(timeout):
            return await self.messages.get()

    async def messages_n(self, count: int, timeout: float = TIMEOUT) -> list[Message]:
        return [await self.message(timeout) for _ in range(count)]

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
        """Wait until the broker closed the connection; returns (reason code, DISCONNECT properties)."""
        async with asyncio.timeout(timeout):
            return await asyncio.shield(self.disconnected)

    async def disconnect(self, reason: str | None = None, properties: Properties | None = None) -> None:
        """Send DISCONNECT (5.0: with the named reason code), stop the network thread and return
        once the broker has closed the connection (it has read the DISCONNECT and ended the session)."""
        code = reason_code(PacketTypes.DISCONNECT, reason) if reason else None
        self.paho.disconnect(code, properties)
        await self.wait_disconnected()
        await asyncio.to_thread(self.paho.loop_stop)
        if self._watch is not None:
            watch, self._watch = self._watch, None
            await until_closed_by_broker(watch, what=f"{self.paho._client_id!r} closed by the broker")

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
    """A 5.0 client (from the `clients` fixture) whose CONNECT was accepted, and its CONNACK.

    Keyword arguments beyond the named ones are CONNECT properties (SessionExpiryInterval=...)."""
    client = make(clientid, version=V5, clean=clean, manual_ack=manual_ack)
    properties = props(PacketTypes.CONNECT, **connect_properties) if connect_properties else None
    connack = await client.connect(keepalive=keepalive, will=will, properties=properties)
    assert connack.reason == 0, connack
    return client, connack
