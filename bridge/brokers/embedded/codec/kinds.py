"""The fifteen MQTT control packet types (the high nibble of the first byte)."""

from __future__ import annotations

from enum import IntEnum


class PacketType(IntEnum):
    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15
    """MQTT 5.0 only; type 15 is reserved (malformed) in 3.1.1."""


WILL = 16
"""Not a packet type: the will properties inside CONNECT, which allow their own property set."""


def context_name(context: int) -> str:
    return "will properties" if context == WILL else PacketType(context).name
