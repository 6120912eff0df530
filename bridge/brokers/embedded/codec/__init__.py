"""The MQTT codec of the broker core: packets of MQTT 3.1.1 and 5.0 (and 3.1), a strict
incremental decoder and a fast encoder. Nothing here does I/O; the broker feeds bytes in and
writes bytes out.

    decoder = Decoder(max_packet_size=1 << 20)       # one per connection, server side
    for packet in decoder.feed(data): ...            # CONNECT sets decoder.level
    transport.write(encode(Puback(packet_id), decoder.level))

Where each part comes from, and why not a library: docs/brokers.md, "The broker core".
"""

from bridge.brokers.embedded.codec.bounds import Bounds
from bridge.brokers.embedded.codec.decoder import DEFAULT_MAX_PACKET_SIZE, Decoder
from bridge.brokers.embedded.codec.encoder import encode, encode_puback, encode_publish, publish_bytes
from bridge.brokers.embedded.codec.errors import (
    CodecError,
    MalformedPacket,
    PacketTooLarge,
    ProtocolError,
    TooManyEntries,
    TooManyTopicLevels,
    TooManyUserProperties,
    UnsupportedProtocolVersion,
)
from bridge.brokers.embedded.codec.filters import split_shared
from bridge.brokers.embedded.codec.kinds import PacketType
from bridge.brokers.embedded.codec.packets import (
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
from bridge.brokers.embedded.codec.properties import EMPTY, DataType, Properties, PropertyId, PropertySpec
from bridge.brokers.embedded.codec.reasons import ConnectReturnCode, ReasonCode

__all__ = [
    "DEFAULT_MAX_PACKET_SIZE",
    "EMPTY",
    "MQTT_3_1",
    "MQTT_3_1_1",
    "MQTT_5",
    "Ack",
    "Auth",
    "Bounds",
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
    "TooManyEntries",
    "TooManyTopicLevels",
    "TooManyUserProperties",
    "Unsuback",
    "Unsubscribe",
    "UnsupportedProtocolVersion",
    "Will",
    "encode",
    "encode_puback",
    "encode_publish",
    "publish_bytes",
    "split_shared",
]
