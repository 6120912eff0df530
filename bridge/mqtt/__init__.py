"""The MQTT codec of the broker core: packets of MQTT 3.1.1 and 5.0 (and 3.1), a strict
incremental decoder and a fast encoder. Nothing here does I/O; the broker feeds bytes in and
writes bytes out.

    decoder = Decoder(max_packet_size=1 << 20)       # one per connection, server side
    for packet in decoder.feed(data): ...            # CONNECT sets decoder.level
    transport.write(encode(Puback(packet_id), decoder.level))

Where each part comes from, and why not a library: docs/brokers.md, "The broker core".
"""

from bridge.mqtt.decoder import DEFAULT_MAX_PACKET_SIZE, Decoder
from bridge.mqtt.encoder import encode, encode_puback, encode_publish
from bridge.mqtt.errors import (
    CodecError,
    MalformedPacket,
    PacketTooLarge,
    ProtocolError,
    TooManyUserProperties,
    UnsupportedProtocolVersion,
)
from bridge.mqtt.filters import split_shared
from bridge.mqtt.kinds import PacketType
from bridge.mqtt.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    Ack,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from bridge.mqtt.properties import EMPTY, DataType, Properties, PropertyId, PropertySpec
from bridge.mqtt.reasons import ConnectReturnCode, ReasonCode

__all__ = [
    "DEFAULT_MAX_PACKET_SIZE",
    "EMPTY",
    "MQTT_3_1",
    "MQTT_3_1_1",
    "MQTT_5",
    "Ack",
    "Auth",
    "CodecError",
    "Connack",
    "Connect",
    "ConnectReturnCode",
    "DataType",
    "Decoder",
    "Disconnect",
    "MalformedPacket",
    "Packet",
    "PacketTooLarge",
    "PacketType",
    "Pingreq",
    "Pingresp",
    "Properties",
    "PropertyId",
    "PropertySpec",
    "ProtocolError",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "ReasonCode",
    "Suback",
    "Subscribe",
    "Subscription",
    "TooManyUserProperties",
    "Unsuback",
    "Unsubscribe",
    "UnsupportedProtocolVersion",
    "Will",
    "encode",
    "encode_puback",
    "encode_publish",
    "split_shared",
]
