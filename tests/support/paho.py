"""`PahoClient`: a paho-mqtt client (3.1.1, or 5.0 with `v5`; over TCP, TLS or a WebSocket) on its
own network thread; its callbacks are handed to the test's event loop, so a test awaits CONNACK,
SUBACK, acks and messages instead of sleeping (and never blocks the loop a broker under test may be
running on). `disconnect()` returns once the broker has closed the connection."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt

from bridge.brokers.embedded.codec import Will
from support.mqtt import until_closed_by_broker, watch_for_close

TIMEOUT = 5.0


class PahoClient:
    """paho-mqtt with its network thread; every wait is an awaitable with a timeout."""

    def __init__(
        self,
        port: int,
        client_id: str,
        *,
        clean_session: bool = True,
        username: str | None = None,
        password: str | None = None,
        manual_ack: bool = False,
        v5: bool = False,
        websocket: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`v5`: MQTT 5.0 (else 3.1.1); `websocket`: over a WebSocket at /mqtt; `tls`: over TLS with
        this context (both: WebSocket over TLS)."""
        self.port = port
        self._loop = asyncio.get_running_loop()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            **({} if v5 else {"clean_session": clean_session}),
            protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
            transport="websockets" if websocket else "tcp",
            # Always manual in paho: without manual_ack, _on_message acks before the test sees
            # the message. paho's own ack goes out after on_message returns, so a disconnect()
            # right after message() could overtake it and the message rightly came again.
            manual_ack=True,
            reconnect_on_failure=False,
        )
        self._auto_ack = not manual_ack
        if websocket:
            self.client.ws_set_options(path="/mqtt")
        if tls is not None:
            self.client.tls_set_context(tls)
        if username is not None:
            self.client.username_pw_set(username, password)
        self.messages: asyncio.Queue[mqtt.MQTTMessage] = asyncio.Queue()
        self.disconnected = asyncio.Event()
        self._watch: socket.socket | None = None  # support.mqtt.watch_for_close
        self._connack: asyncio.Future[tuple[int, bool]] = self._loop.create_future()
        self._acks: dict[int, asyncio.Future[Any]] = {}
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_unsubscribe = self._on_unsubscribe
        self.client.on_publish = self._on_publish
        self.client.on_message = self._on_message
        self.client.on_disconnect = self._on_disconnect

    # paho calls these on its own thread: hand them to the event loop.
    def _soon(self, fn: Callable[..., None], *args: Any) -> None:
        self._loop.call_soon_threadsafe(fn, *args)

    def _on_connect(self, _c: Any, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
        result = (int(reason.value), bool(flags.session_present))
        self._soon(lambda: self._connack.done() or self._connack.set_result(result))

    def _on_subscribe(self, _c: Any, _u: Any, mid: int, reasons: Any, _p: Any) -> None:
        self._soon(self._resolve, mid, [int(r.value) for r in reasons])

    def _on_unsubscribe(self, _c: Any, _u: Any, mid: int, _reasons: Any, _p: Any) -> None:
        self._soon(self._resolve, mid, None)

    def _on_publish(self, _c: Any, _u: Any, mid: int, _reason: Any, _p: Any) -> None:
        self._soon(self._resolve, mid, None)

    def _on_message(self, _c: Any, _u: Any, message: mqtt.MQTTMessage) -> None:
        if self._auto_ack and message.qos:
            self.client.ack(message.mid, message.qos)
        self._soon(self.messages.put_nowait, message)

    def _on_disconnect(self, _c: Any, _u: Any, _flags: Any, _reason: Any, _p: Any) -> None:
        self._soon(self.disconnected.set)

    def _ack(self, mid: int) -> asyncio.Future[Any]:
        return self._acks.setdefault(mid, self._loop.create_future())

    def _resolve(self, mid: int, value: Any) -> None:
        future = self._ack(mid)
        if not future.done():
            future.set_result(value)

    async def connect(self, *, keepalive: int = 60, will: Will | None = None) -> tuple[int, bool]:
        """Connect; returns (CONNACK return code, session present)."""
        if will is not None:
            self.client.will_set(will.topic, will.payload, will.qos, will.retain)
        self.client.connect_async("127.0.0.1", self.port, keepalive)
        self.client.loop_start()
        async with asyncio.timeout(TIMEOUT):
            answer = await self._connack
        self._watch = watch_for_close(self.client.socket())
        return answer

    async def subscribe(self, *topics: tuple[str, int]) -> list[int]:
        """Subscribe and wait for SUBACK; returns the granted QoS (128 = failure) per filter."""
        _, mid = self.client.subscribe(list(topics))
        async with asyncio.timeout(TIMEOUT):
            result: list[int] = await self._ack(mid)
            return result

    async def unsubscribe(self, *topics: str) -> None:
        _, mid = self.client.unsubscribe(list(topics))
        async with asyncio.timeout(TIMEOUT):
            await self._ack(mid)

    async def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        """Publish and wait until it is sent (QoS 0), acked (1) or completed (2)."""
        async with asyncio.timeout(TIMEOUT):
            await self.send(topic, payload, qos, retain)

    def send(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> asyncio.Future[Any]:
        """Publish without waiting; the future is done when the broker acks (or completes) it."""
        return self._ack(self.client.publish(topic, payload, qos, retain).mid)

    async def message(self, timeout: float = TIMEOUT) -> mqtt.MQTTMessage:
        async with asyncio.timeout(timeout):
            return await self.messages.get()

    async def disconnect(self) -> None:
        """Send DISCONNECT, stop the network thread and return once the broker has closed the
        connection (it has read the DISCONNECT: what the test reads next sees the session ended)."""
        self.client.disconnect()
        async with asyncio.timeout(TIMEOUT):
            await self.disconnected.wait()
        await asyncio.to_thread(self.client.loop_stop)
        if self._watch is not None:
            watch, self._watch = self._watch, None
            await until_closed_by_broker(watch, what=f"{self.client._client_id!r} closed by the broker")

    def drop(self) -> None:
        """Close the connection without DISCONNECT (an abnormal end); paho's thread notices."""
        sock = self.client.socket()
        if sock is not None:
            sock.close()
        if self._watch is not None:
            self._watch.close()  # the connection ends only when its last descriptor is closed
            self._watch = None

    async def close(self) -> None:
        """Teardown: disconnect if still connected, stop the thread."""
        if self.client.is_connected():
            self.client.disconnect()
        await asyncio.to_thread(self.client.loop_stop)
        if self._watch is not None:
            self._watch.close()
            self._watch = None
