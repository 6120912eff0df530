"""MQTT over WebSocket (MQTT 3.1.1 and 5.0 section 6): the HTTP upgrade and the frames around
the core's `Connection`.

The `websockets` package's sans-I/O `ServerProtocol` parses the upgrade request and the frames;
this module is the asyncio glue. (Chosen over wsproto, the other sans-I/O codec: websockets
parsed masked client frames about 3x faster and wrote server frames 2.6-3x faster, measured on
50,000 frames of 64 B and 1 KB; a sans-I/O codec, unlike websockets' own asyncio server, keeps
the core's protocol-level flow control and costs no task per connection.)

`WebSocketProtocol` is the asyncio protocol the listener serves; it hands the core
`Connection` a `FramedTransport` whose `write` sends one binary frame, so the core reads and
writes MQTT bytes exactly as over TCP. A frame's payload goes straight to
`Connection.data_received`: MQTT packets may span frames and a frame may hold
several packets, so no message is assembled.

Bounded: the upgrade request by the `websockets` limits (8 KB a line, 128 headers), a frame or
fragmented message by `max_packet_size` (close code 1009, counted as `packet_too_large`); the
connection counts against `max_connections` and `connect_timeout` from its first byte, upgrade
included. A request for another path than `/mqtt`, a plain HTTP request or a broken one gets
an HTTP error response, then the connection closes.
"""

from __future__ import annotations

import asyncio
import http
import logging
from typing import TYPE_CHECKING, Any

from websockets.exceptions import PayloadTooBig
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

if TYPE_CHECKING:
    from bridge.brokers.embedded.connection import Connection

log = logging.getLogger("bridge.brokers.embedded")
# websockets logs every connection opened and closed at INFO: only its warnings go through.
_wire_log = logging.getLogger("bridge.brokers.embedded.websocket")
_wire_log.setLevel(logging.WARNING)

PATH = "/mqtt"
# "mqtt" is the name MQTT 3.1.1 and 5.0 register; "mqttv3.1" is what MQTT 3.1 clients sent.
SUBPROTOCOLS = (Subprotocol("mqtt"), Subprotocol("mqttv3.1"))
_DATA = (Opcode.BINARY, Opcode.CONT)


class WebSocketProtocol(asyncio.Protocol):
    """One WebSocket connection carrying one MQTT connection."""

    def __init__(self, conn: Connection, max_size: int) -> None:
        self.conn = conn
        self.ws = ServerProtocol(subprotocols=SUBPROTOCOLS, max_size=max_size, logger=_wire_log)
        self.transport: asyncio.Transport | None = None
        self.framed: FramedTransport | None = None
        self.responded = False  # an HTTP response went out (101 or an error)
        self._request_started = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.framed = FramedTransport(self, transport)
        # Counted and timed from now: a client that never finishes the upgrade is closed by
        # the broker's connect timeout like one that never sends CONNECT.
        self.conn.connection_made(self.framed)

    def data_received(self, data: bytes) -> None:
        ws = self.ws
        if not self.responded and not self._request_started and data:
            # Every HTTP method starts with a capital letter; anything else (an MQTT client on
            # the wrong port) would wait for a line end until the connect timeout.
            if not 0x41 <= data[0] <= 0x5A:
                self._reply_bad_request()
                return
            self._request_started = True
        ws.receive_data(data)
        for event in ws.events_received():
            if isinstance(event, Request):
                self._upgrade(event)
            elif isinstance(event, Frame):
                if event.opcode in _DATA:
                    payload = event.data  # bytes: websockets unmasks into a new bytes object
                    self.conn.data_received(payload if isinstance(payload, bytes) else bytes(payload))
                elif event.opcode is Opcode.TEXT and self.conn.channel.reason is None:
                    self.ws.fail(1003, "MQTT is sent in binary frames")  # [MQTT-6.0.0-1]
                    self._refuse("malformed", "a text frame")
        if ws.parser_exc is not None and self.conn.channel.reason is None:
            too_big = isinstance(ws.parser_exc, PayloadTooBig)
            self._refuse("packet_too_large" if too_big else "malformed", str(ws.parser_exc))
        self.flush()

    def eof_received(self) -> bool:
        self.ws.receive_eof()
        self.flush()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        self.conn.resume_writing()

    def _upgrade(self, request: Request) -> None:
        path = request.path.partition("?")[0]
        if path != PATH:
            response = self.ws.reject(http.HTTPStatus.NOT_FOUND, f"MQTT over WebSocket is on {PATH}\n")
        else:
            response = self.ws.accept(request)
        self.ws.send_response(response)
        self.responded = True
        if response.status_code != 101:
            log.info("WebSocket upgrade from %s refused: %d", self.conn.channel.peer.address, response.status_code)

    def _refuse(self, reason: str, why: str) -> None:
        channel = self.conn.channel
        channel.broker.refused[reason] += 1
        log.info("client %s: WebSocket %s; closing", channel.who(), why)
        channel.close("closed")

    def flush(self) -> None:
        """Write what the WebSocket layer has to send; close the TCP connection at its end."""
        ws, transport = self.ws, self.transport
        if transport is None or transport.is_closing():
            return
        chunks = ws.data_to_send()
        if not self.responded and chunks and chunks[0].startswith(b"HTTP/"):
            self.responded = True  # websockets refused the request itself (431, 414)
        if ws.handshake_exc is not None and not self.responded:
            # Not a parsable HTTP request: websockets would just close; say why first.
            self._reply_bad_request()
            return
        for chunk in chunks:
            if chunk:
                transport.write(chunk)
            else:  # the end of the stream: close once what is buffered is written
                transport.close()
                return

    def _reply_bad_request(self) -> None:
        self.responded = True
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(
                self.ws.reject(http.HTTPStatus.BAD_REQUEST, "not a WebSocket upgrade request\n").serialize()
            )
            transport.close()


class FramedTransport(asyncio.Transport):
    """What the core `Connection` writes to: every write one binary frame."""

    def __init__(self, protocol: WebSocketProtocol, transport: asyncio.Transport) -> None:
        super().__init__()
        self._protocol = protocol
        self._transport = transport
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        ws = self._protocol.ws
        if ws.state is State.OPEN and not self._closing:
            ws.send_binary(bytes(data))
            self._protocol.flush()

    def write_eof(self) -> None:
        """The MQTT connection ends: a close frame; the client answers it and the TCP connection
        closes then (or when the core aborts it)."""
        ws = self._protocol.ws
        if ws.state is State.OPEN:
            ws.send_close(1000)
            self._protocol.flush()

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        ws = self._protocol.ws
        if ws.state is State.OPEN:
            ws.send_close(1000)
        self._protocol.flush()  # the close frame, or the one a failed frame already queued
        self._transport.close()

    def abort(self) -> None:
        self._closing = True
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)
