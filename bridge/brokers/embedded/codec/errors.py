"""The codec's one exception family: every refusal names the MQTT 5.0 reason code to close with.

A broker answering a 5.0 client sends DISCONNECT (or CONNACK, before the session exists) with
`error.reason`, then closes; a 3.1.1 client is simply disconnected (3.1.1 has no such packet), or
for `UnsupportedProtocolVersion` sent CONNACK return code 1.
"""

from __future__ import annotations

from typing import Any

from bridge.brokers.embedded.codec.reasons import ReasonCode
from bridge.errors import HookbridgeError


class CodecError(HookbridgeError):
    """A byte stream that breaks the protocol. `packets` holds the complete, valid packets that
    preceded the bad one in the same `Decoder.feed` call: they were sent before it and may be
    handled before the connection is closed."""

    reason = ReasonCode.UNSPECIFIED_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        # bridge.brokers.embedded.codec.packets.Packet objects; not imported here: packets.py -> properties.py
        # -> errors.py already, and the codec keeps its modules free of import circles.
        self.packets: list[Any] = []
        # The protocol level of a CONNECT refused before the decoder knew the connection's
        # level (3, 4 or 5; 0 if the bytes name none): a server answers a refused 5.0 CONNECT
        # with CONNACK and `reason`, which a 5.0 client can read.
        self.level = 0

    def __str__(self) -> str:
        return f"{self.message} (reason 0x{self.reason:02X} {self.reason.name.lower()})"


class MalformedPacket(CodecError):
    reason = ReasonCode.MALFORMED_PACKET


class ProtocolError(CodecError):
    reason = ReasonCode.PROTOCOL_ERROR


class PacketTooLarge(CodecError):
    reason = ReasonCode.PACKET_TOO_LARGE


class TooManyUserProperties(PacketTooLarge):
    """A packet (or its will) with more user properties than the receiver accepts: a bound on
    the work and memory one packet costs, within `max_packet_size`. MQTT 5.0 has no reason code
    of its own for it; "packet too large" names a limit the receiver sets on a packet."""


class TooManyEntries(PacketTooLarge):
    """A SUBSCRIBE or UNSUBSCRIBE with more topic filters than the receiver accepts (Bounds.entries)."""


class TooManyTopicLevels(CodecError):
    """A PUBLISH or will topic with more levels than the receiver accepts (Bounds.topic_levels)."""

    reason = ReasonCode.TOPIC_NAME_INVALID


class UnsupportedProtocolVersion(CodecError):
    """CONNECT with protocol name "MQTT" or "MQIsdp" but a level this codec does not speak."""

    reason = ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
