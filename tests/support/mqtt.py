"""A paho-mqtt test client whose waits are awaitable.

The broker under test runs in the test's own event loop, so a test must never
block that loop: every wait here polls with `asyncio.sleep`.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion


@dataclass(frozen=True)
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    mid: int


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


class Client:
    def __init__(
        self, clientid: str, port: int, *, clean: bool = True, manual_ack: bool = False, username: str | None = None
    ) -> None:
        self.clientid = clientid
        self.port = port
        self.inbox: queue.Queue[Received] = queue.Queue()
        self._acks: set[int] = set()
        self._lock = threading.Lock()
        self.connack: tuple[bool, int] | None = None  # (session present, reason code)
        self.disconnected = threading.Event()
        self._watch: socket.socket | None = None  # see _watch_for_close
        self.paho = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=clientid,
            clean_session=clean,
            protocol=paho.MQTTv311,
            manual_ack=manual_ack,
        )
        self.paho.max_inflight_messages_set(65535)
        self.paho.max_queued_messages_set(0)
        if username:
            self.paho.username_pw_set(username)
        self.paho.on_connect = self._on_connect
        self.paho.on_message = self._on_message
        self.paho.on_publish = self._on_done
        self.paho.on_subscribe = self._on_done
        self.paho.on_unsubscribe = self._on_done
        self.paho.on_disconnect = lambda *a: self.disconnected.set()

    def _on_connect(
        self, client: paho.Client, userdata: object, flags: paho.ConnectFlags, reason: object, props: object
    ) -> None:
        self.connack = (flags.session_present, int(getattr(reason, "value", reason)))  # type: ignore[call-overload]

    def _on_message(self, client: paho.Client, userdata: object, msg: paho.MQTTMessage) -> None:
        self.inbox.put(Received(msg.topic, msg.payload, msg.qos, bool(msg.retain), bool(msg.dup), msg.mid))

    def _on_done(self, client: paho.Client, userdata: object, mid: int, *rest: object) -> None:
        with self._lock:
            self._acks.add(mid)

    async def connect(self, keepalive: int = 60) -> Client:
        self.paho.connect_async("127.0.0.1", self.port, keepalive=keepalive)
        self.paho.loop_start()
        await wait_until(lambda: self.connack is not None, what=f"CONNACK for {self.clientid}")
        self._watch = watch_for_close(self.paho.socket())
        return self

    async def _wait_mid(self, mid: int, what: str) -> None:
        await wait_until(lambda: mid in self._acks, what=what)

    async def subscribe(self, topic: str, qos: int = 1) -> None:
        _, mid = self.paho.subscribe(topic, qos)
        await self._wait_mid(mid, f"SUBACK {topic}")

    async def unsubscribe(self, topic: str) -> None:
        _, mid = self.paho.unsubscribe(topic)
        await self._wait_mid(mid, f"UNSUBACK {topic}")

    async def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False) -> None:
        info = self.paho.publish(topic, payload, qos, retain)
        if qos > 0:
            await self._wait_mid(info.mid, f"PUBACK/PUBCOMP {topic}")

    async def publish_many(self, items: list[tuple[str, bytes]], qos: int = 1) -> None:
        mids = [self.paho.publish(topic, payload, qos).mid for topic, payload in items]
        if qos > 0:
            await wait_until(lambda: all(m in self._acks for m in mids), timeout=60, what="all PUBACKs")

    async def expect(self, count: int, timeout: float = 10.0) -> list[Received]:
        got: list[Received] = []

        def drain() -> bool:
            while len(got) < count:
                try:
                    got.append(self.inbox.get_nowait())
                except queue.Empty:
                    return False
            return True

        await wait_until(drain, timeout, what=f"{count} messages at {self.clientid} (got {len(got)})")
        return got

    async def expect_nothing(self, within: float = 0.3) -> None:
        await asyncio.sleep(within)
        assert self.inbox.empty(), f"{self.clientid} received {self.inbox.get_nowait()}"

    def ack(self, mid: int, qos: int) -> None:
        self.paho.ack(mid, qos)

    async def disconnect(self) -> None:
        """Send DISCONNECT and return once the broker has closed the connection: the broker has
        read the DISCONNECT and ended the session, so what the test reads next (a stored client
        state after `bridge.idle()`) sees it. paho reports the disconnect once it has *sent* it."""
        self.paho.disconnect()
        await wait_until(self.disconnected.is_set, what=f"{self.clientid} disconnect")
        self.paho.loop_stop()
        if self._watch is not None:
            await until_closed_by_broker(self._watch, what=f"{self.clientid}'s connection closed by the broker")
            self._watch = None

    def drop(self) -> None:
        """Close the socket without DISCONNECT (an abnormal end)."""
        sock = self.paho.socket()
        if sock is not None:
            sock.close()
        if self._watch is not None:
            self._watch.close()  # the connection ends only when its last descriptor is closed
            self._watch = None
        self.paho.loop_stop()


def watch_for_close(sock: object) -> socket.socket | None:
    """A second descriptor of paho's socket, to read the broker's close through.

    paho closes its socket as soon as it has written DISCONNECT; the connection itself stays
    open while this duplicate is, so the test can read on until the broker closes its end."""
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket):
        return None  # a WebSocket or TLS client (neither can be duplicated): nothing to watch
    watch = sock.dup()
    watch.setblocking(False)
    return watch


async def until_closed_by_broker(sock: socket.socket, what: str, timeout: float = 10.0) -> None:
    """Read (and drop) what the broker still sends until it closes the connection, then close
    `sock`. A reset counts as closed."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            while await loop.sock_recv(sock, 65536):
                pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None
    finally:
        sock.close()


def paho_connect_blocking(port: int, clientid: str) -> None:
    """Connect and disconnect cleanly, blocking (for a broker in another process)."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=clientid, protocol=paho.MQTTv311)
    connected = threading.Event()
    client.on_connect = lambda *args: connected.set()
    client.connect("127.0.0.1", port)
    client.loop_start()
    assert connected.wait(10), f"no CONNACK for {clientid}"
    client.disconnect()
    client.loop_stop()
