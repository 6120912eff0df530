"""The bridge's MQTT connection to an external broker, on gmqtt.

- MQTT 5 (gmqtt falls back to 3.1.1 when the broker refuses 5), a fixed client
  id with clean start off and a session expiry, so messages wait in the broker
  while the bridge is down.
- Nothing is acknowledged on receipt (`optimistic_acknowledgement=False`): a QoS 1
  message's PUBACK goes out when the source calls `send_pubacks`, once every rule
  for it (and for every message before it) has committed (source.py, acks.py);
  QoS 2 keeps gmqtt's path (PUBREC when the handler's future is done). `receive_maximum` bounds how many
  unacknowledged messages the broker sends, so a slow database stops the
  broker's sending instead of growing the bridge's memory.
- Reconnects with a capped exponential backoff; every CONNACK resubscribes
  (a lost session has no subscriptions; a kept one ignores the repeat).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from gmqtt import Client, Subscription
from gmqtt.mqtt.constants import MQTTv50
from gmqtt.mqtt.handler import MqttPackageHandler

from bridge.brokers.eventloop import running_loop
from bridge.events import UserProperties

log = logging.getLogger("bridge.brokers.external.mqtt")

# (topic, payload, qos, dup, retain, packet id or None, user properties) -> for QoS 0 and 2, a
# future done when the message may be acknowledged (None: at once). A QoS 1 message is
# acknowledged with `Connection.send_pubacks` instead, once the source decides it may be.
MessageHandler = Callable[[str, bytes, int, bool, bool, int | None, UserProperties], "asyncio.Future[None] | None"]

BACKOFF_MIN = 0.1
BACKOFF_MAX = 10.0

_PUBLISH_QOS_1 = 0x32  # fixed header of a QoS 1 PUBLISH, without its DUP (0x08) and RETAIN (0x01) bits


class _PacketIdHandler(MqttPackageHandler):  # type: ignore[misc]  # gmqtt is untyped
    """Hands QoS 1 messages over with their packet id; their PUBACKs go out when the source says.

    gmqtt does not pass the packet id to on_message (the ledger needs it, ledger.py), runs each
    message as a task of its own and sends each PUBACK in a write of its own. QoS 1 is the
    bridge's hot path (every message subscription is QoS 1), so it bypasses all three: a
    PUBLISH without properties (what Mosquitto forwards from a 3.1.1 publisher, and any 3.1.1
    session) is parsed here in a few slices and handed to `deliver`; one with properties (user
    properties, a topic alias) takes gmqtt's parser, then the same hand-over. QoS 0 and 2 keep
    gmqtt's path.
    """

    deliver: MessageHandler  # set by Connection
    on_pingresp: Callable[[], None]  # set by Connection: a PINGRESP came (retire.py's barrier)
    _pubacks: list[int]  # packet ids whose PUBACK goes out at the end of this loop turn

    def __call__(self, package: Any) -> None:
        cmd = package.cmd
        if cmd & 0xF6 == _PUBLISH_QOS_1 and self._fast_publish(cmd, package.data):
            return
        super().__call__(package)

    def _fast_publish(self, cmd: int, data: bytes) -> bool:
        """Deliver a QoS 1 PUBLISH without properties; False (nothing done) for any other form."""
        try:
            end = 2 + (data[0] << 8 | data[1])
            mid = data[end] << 8 | data[end + 1]
            start = end + 2
            if self._connection_state.protocol_version >= MQTTv50:
                if data[start] != 0:
                    return False  # properties: gmqtt parses them (user properties, topic alias)
                start += 1
            topic = data[2:end].decode("utf-8")
        except (IndexError, UnicodeDecodeError):
            return False  # malformed, or a topic that is not UTF-8: gmqtt's path (logged; bytes kept)
        if not topic or mid == 0:
            return False
        self.deliver(topic, data[start:], 1, bool(cmd & 0x08), bool(cmd & 0x01), mid, ())
        return True

    def _handle_qos_1_publish_packet(
        self, mid: int, packet: bytes, topic: str | bytes, properties: dict[str, Any]
    ) -> None:
        dup, retain = bool(properties.get("dup")), bool(properties.get("retain"))
        if isinstance(topic, bytes):  # gmqtt hands over a topic that is not UTF-8 as it came: keep its bytes
            topic = topic.decode("utf-8", "surrogateescape")
        self.deliver(topic, packet, 1, dup, retain, mid, user_properties(properties))

    # A committed batch acknowledges many messages in one loop turn: their PUBACKs go out in one
    # write instead of one send() each. The minimal form (remaining length 2, reason code 0
    # omitted) is valid in MQTT 3.1.1 and 5.
    def send_pubacks(self, mids: list[int]) -> None:
        pending = self.__dict__.setdefault("_pubacks", [])
        if not pending:
            running_loop().call_soon(self._flush_pubacks)
        pending.extend(mids)

    def _flush_pubacks(self) -> None:
        mids, self._pubacks = self._pubacks, []
        connection = self._connection
        if connection is None or connection.is_closing():
            return  # the broker sends them again on the next connection; the ledger keeps their ids
        connection._transport.write(b"".join(b"\x40\x02" + mid.to_bytes(2, "big") for mid in mids))

    def _handle_qos_2_publish_packet(self, mid: int, packet: bytes, topic: str, properties: dict[str, Any]) -> None:
        properties["packet_id"] = mid
        super()._handle_qos_2_publish_packet(mid, packet, topic, properties)

    def _handle_pingresp_packet(self, cmd: int, packet: bytes) -> None:
        self.on_pingresp()

    def _handle_unsuback_packet(self, cmd: int, packet: bytes) -> None:
        super()._handle_unsuback_packet(cmd, packet)
        self.on_unsuback()

    on_unsuback: Callable[[], None]  # set by Connection


def user_properties(properties: dict[str, Any]) -> UserProperties:
    """A PUBLISH's MQTT 5.0 user properties, as gmqtt parsed them: (name, value) pairs in order."""
    return tuple(properties.get("user_property", ()))


class Connection:
    """One persistent MQTT session to the broker, kept up until `close`."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        clientid: str,
        on_message: MessageHandler,
        subscriptions: Sequence[tuple[str, int]],
        receive_maximum: int,
        session_expiry: int,
        username: str = "",
        password: str = "",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host, self.port, self.clientid = host, port, clientid
        self._on_message = on_message
        self._subscriptions = list(subscriptions)
        self._tls: ssl.SSLContext | bool = tls or False
        self.connected = asyncio.Event()
        self._gate = asyncio.Event()  # set: gmqtt may read the socket (pause_reading)
        self._gate.set()
        self._backoff = BACKOFF_MIN
        self._closing = False
        self._retry: asyncio.Task[None] | None = None
        self.client = Client(
            clientid,
            clean_session=False,
            optimistic_acknowledgement=False,
            receive_maximum=receive_maximum,
            session_expiry_interval=session_expiry,
        )
        self.client._package_handler.__class__ = _PacketIdHandler
        self.client._package_handler.deliver = on_message
        self._pongs = asyncio.Queue[None]()
        self._unsubacks = asyncio.Queue[None]()
        self.client._package_handler.on_pingresp = lambda: self._pongs.put_nowait(None)
        self.client._package_handler.on_unsuback = lambda: self._unsubacks.put_nowait(None)
        if username:
            self.client.set_auth_credentials(username, password or None)
        self.client.on_connect = self._connected
        self.client.on_disconnect = self._disconnected
        self.client.on_message = self._message
        self.client.reconnect_delay = BACKOFF_MIN

    async def start(self) -> None:
        """Connect now; when the broker cannot be reached, keep trying in the background."""
        try:
            await self._connect_once()
        except Exception as exc:
            log.warning("cannot reach the broker at %s:%d (%s); retrying", self.host, self.port, exc)
            self._retry = asyncio.create_task(self._connect_until_up(), name="mqtt-connect")

    async def _connect_once(self) -> None:
        await self.client.connect(self.host, self.port, ssl=self._tls, keepalive=30)

    async def _connect_until_up(self) -> None:
        delay = BACKOFF_MIN
        while not self._closing:
            await asyncio.sleep(delay)
            try:
                await self._connect_once()
                return
            except Exception as exc:
                delay = min(BACKOFF_MAX, delay * 2)
                log.debug("broker still unreachable (%s); next try in %.1f s", exc, delay)

    def pause_reading(self, paused: bool) -> None:
        """Stop (or resume) taking packets off the socket: TCP flow control then holds the broker back.

        Needed because a broker may send more unacknowledged messages than the receive maximum
        allows (Mosquitto 2.0.11 does, when it flushes a session's queue). gmqtt reads through
        an asyncio StreamReader, which resumes the transport on its own, so the gate is on
        gmqtt's read loop (see `_install_gate`); the StreamReader's buffer then fills and
        pauses the transport."""
        if paused:
            self._gate.clear()
        else:
            self._gate.set()

    def _install_gate(self) -> None:
        """Make this connection's gmqtt read loop wait for the gate before each read."""
        protocol = getattr(self.client._connection, "_protocol", None)
        if protocol is None or getattr(protocol, "_hookbridge_gate", None) is self._gate:
            return
        read = protocol.read
        gate = self._gate

        async def gated_read(n: int = -1) -> bytes:
            await gate.wait()
            data: bytes = await read(n)
            return data

        protocol.read = gated_read
        protocol._hookbridge_gate = gate

    async def close(self, *, end_session: bool = False) -> None:
        """Disconnect. `end_session`: with session expiry 0 (MQTT 5), so the broker drops the
        session at once instead of keeping it (and queuing messages in it) until it expires."""
        self._closing = True
        if self._retry is not None:
            self._retry.cancel()
        if self.client.is_connected:
            if end_session and self.is_mqtt5:
                await self.client.disconnect(session_expiry_interval=0)
            else:
                await self.client.disconnect()
        self.client.stop_reconnect()

    @property
    def is_mqtt5(self) -> bool:
        return bool(self.client._connection_state.protocol_version >= MQTTv50)

    async def unsubscribe_all(self) -> None:
        """Leave every subscription (shared ones too) and wait for the broker's UNSUBACK."""
        topics = [topic for topic, _ in self._subscriptions]
        self._subscriptions = []  # a reconnect from now on subscribes to nothing
        if not topics or not self.client.is_connected:
            return
        self.client.unsubscribe(topics)
        await self._unsubacks.get()

    async def round_trip(self) -> None:
        """A ping round trip. A broker handles one connection's packets in order, so every PUBACK
        sent before the ping has been handled, and what it sends on handling them (the next
        messages queued in the session) is on the wire before the PINGRESP.

        Two PINGREQs, and two PINGRESPs awaited: gmqtt's own keep-alive ping (at most one at a
        time) may be answered first, and its answer says nothing about what was sent after it."""
        while not self._pongs.empty():
            self._pongs.get_nowait()  # answers to earlier keep-alive pings
        for _ in range(2):
            self.client._connection._send_ping_request()
        for _ in range(2):
            await self._pongs.get()

    # -- gmqtt callbacks ---------------------------------------------------------

    def _connected(self, client: Client, flags: int, rc: int, properties: dict[str, Any]) -> None:
        self._backoff = BACKOFF_MIN
        self.client.reconnect_delay = BACKOFF_MIN
        self._install_gate()
        self.connected.set()
        log.info(
            "connected to the broker at %s:%d as %s (session present: %s)", self.host, self.port, self.clientid, flags
        )
        if self._subscriptions:
            # retain_handling 1: retained messages only for a subscription the session did not have,
            # so a reconnect does not replay every retained message as a new publish (MQTT 5).
            client.subscribe(
                [
                    Subscription(topic, qos=qos, retain_handling_options=1, retain_as_published=True)
                    for topic, qos in self._subscriptions
                ]
            )

    def _disconnected(self, client: Client, packet: Any, exc: BaseException | None = None) -> None:
        self.connected.clear()
        if self._closing:
            return
        log.warning("lost the broker at %s:%d; reconnecting in %.1f s", self.host, self.port, self._backoff)
        self.client.reconnect_delay = self._backoff
        self._backoff = min(BACKOFF_MAX, self._backoff * 2)

    def send_pubacks(self, packet_ids: list[int]) -> None:
        """Acknowledge these QoS 1 messages (in this order), in one write at the end of this loop turn."""
        self.client._package_handler.send_pubacks(packet_ids)

    async def _message(self, client: Client, topic: str, payload: bytes, qos: int, properties: dict[str, Any]) -> int:
        """gmqtt's path, for QoS 0 and 2: it sends the PUBREC when this returns."""
        done = self._on_message(
            topic,
            payload,
            qos,
            bool(properties.get("dup")),
            bool(properties.get("retain")),
            properties.get("packet_id"),
            user_properties(properties),
        )
        if done is not None:
            await done
        return 0  # the PUBREC's reason code: success
