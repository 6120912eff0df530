"""The broker core's MQTT codec (bridge/brokers/embedded/codec/): every packet type round-trips in 3.1.1 and 5.0,
known bytes from the specification decode to the right fields, what paho-mqtt (an encoder
written by others) sends decodes to the fields it was given, packets split at any byte boundary
come out whole, and the decoder learns the protocol level from CONNECT."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.reasoncodes import ReasonCode as PahoReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from bridge.brokers.embedded.codec import (
    EMPTY,
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    Auth,
    Connack,
    Connect,
    Decoder,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    PropertyId,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    encode,
    encode_puback,
    encode_publish,
    split_shared,
)
from bridge.brokers.embedded.codec.kinds import WILL, PacketType
from bridge.brokers.embedded.codec.properties import SPECS, DataType

FULL_PUBLISH_PROPS = Properties(
    payload_format_indicator=1,
    message_expiry_interval=3600,
    content_type="application/json",
    response_topic="replies/é",
    correlation_data=b"\x00\x01",
    topic_alias=3,
    user_property=(("a", "1"), ("a", "2"), ("ключ", "значение")),
)
CONNECT_PROPS = Properties(
    session_expiry_interval=0xFFFFFFFF,
    receive_maximum=20,
    maximum_packet_size=1 << 20,
    topic_alias_maximum=10,
    request_response_information=1,
    request_problem_information=0,
    authentication_method="SCRAM-SHA-1",
    authentication_data=b"\xff\x00",
    user_property=(("k", "v"),),
)
CONNACK_PROPS = Properties(
    session_expiry_interval=60,
    receive_maximum=32,
    maximum_qos=1,
    retain_available=1,
    maximum_packet_size=1 << 20,
    assigned_client_identifier="auto-1",
    topic_alias_maximum=0,
    reason_string="fine",
    wildcard_subscription_available=1,
    subscription_identifier_available=1,
    shared_subscription_available=1,
    server_keep_alive=30,
    response_information="resp/",
    server_reference="other:1883",
    authentication_method="m",
    authentication_data=b"d",
)
WILL_PROPS = Properties(will_delay_interval=5, payload_format_indicator=0, message_expiry_interval=9, content_type="t")

# (packet, side that receives it) for each version; 3.1.1 packets carry no 5.0-only fields.
CLIENT_TO_SERVER_311: list[Packet] = [
    Publish("a/b", b"payload", 1, retain=True, dup=True, packet_id=65535),
    Publish("a/b", b"", 0),
    Publish("ä/ö/ü", b"\x00" * 300, 2, packet_id=1),
    Puback(1),
    Pubrec(2),
    Pubrel(3),
    Pubcomp(4),
    Subscribe(5, [Subscription("a/+/c", 1), Subscription("#", 2), Subscription("$share/g/x/#", 0)]),
    Unsubscribe(6, ["a/+/c", "$share/g/x/#"]),
    Subscribe(7, [Subscription("x/" * 70 + "#", 1)]),  # a body over 127 bytes: two-byte remaining length
    Pingreq(),
    Disconnect(),
]
SERVER_TO_CLIENT_311: list[Packet] = [
    Connack(True, 0),
    Connack(False, 5),
    Publish("x", b"y" * 200_000, 1, packet_id=9),
    Puback(7),
    Pubrec(8),
    Pubrel(9),
    Pubcomp(10),
    Suback(11, [0, 1, 2, 0x80]),
    Unsuback(12),
    Pingresp(),
]
CLIENT_TO_SERVER_5: list[Packet] = [
    Publish("a/b", b"payload", 1, packet_id=2, properties=FULL_PUBLISH_PROPS),
    Publish("", b"aliased", 0, properties=Properties(topic_alias=3)),
    Publish("a/b", b"", 0),
    Puback(1),
    Puback(1, ReasonCode.NO_MATCHING_SUBSCRIBERS),
    Puback(1, ReasonCode.QUOTA_EXCEEDED, Properties(reason_string="full", user_property=(("x", "y"),))),
    Pubrec(2, ReasonCode.SUCCESS, Properties(reason_string="ok")),
    Pubrel(3, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND),
    Pubcomp(4),
    Subscribe(
        5,
        [
            Subscription("a/#", 2, no_local=True, retain_as_published=True, retain_handling=2),
            Subscription("$share/grp/a/+", 1, retain_handling=1),
        ],
        Properties(subscription_identifier=(268_435_455,), user_property=(("u", "p"),)),
    ),
    Unsubscribe(6, ["a/#"], Properties(user_property=(("u", "p"),))),
    Pingreq(),
    Disconnect(),
    Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE, Properties(session_expiry_interval=0, reason_string="bye")),
    Auth(),
    Auth(ReasonCode.CONTINUE_AUTHENTICATION, Properties(authentication_method="m", authentication_data=b"x")),
]
SERVER_TO_CLIENT_5: list[Packet] = [
    Connack(True, ReasonCode.SUCCESS, CONNACK_PROPS),
    Connack(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD),
    Publish("a/b", b"p", 1, packet_id=3, properties=Properties(subscription_identifier=(1, 7, 268_435_455))),
    Puback(1, ReasonCode.NOT_AUTHORIZED),
    Pubrec(2),
    Pubrel(3),
    Pubcomp(4, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND, Properties(reason_string="gone")),
    Suback(5, [0, 1, 2, 0x87, 0x8F, 0x9E, 0xA1, 0xA2], Properties(reason_string="partly")),
    Unsuback(6, [0x00, 0x11, 0x87], Properties(user_property=(("a", "b"),))),
    Pingresp(),
    Disconnect(ReasonCode.SERVER_MOVED, Properties(server_reference="b:1883")),
    Auth(ReasonCode.RE_AUTHENTICATE, Properties(authentication_method="m")),
]
CONNECTS = [
    Connect("", MQTT_3_1_1, clean_start=True, keepalive=0),
    Connect("c1", MQTT_3_1_1, False, 65535, "user", b"\x00pass", Will("w/t", b"gone", 2, True)),
    Connect("legacy", MQTT_3_1, True, 30, "u"),
    Connect("c5", MQTT_5, True, 10, None, b"pw-without-user", None, CONNECT_PROPS),
    Connect("c5", MQTT_5, False, 10, "u", None, Will("w", b"", 1, False, WILL_PROPS)),
]


def decode_all(data: bytes, level: int, role: str) -> list[Packet]:
    decoder = Decoder(level=level, role=role)  # type: ignore[arg-type]
    packets = decoder.feed(data)
    assert decoder.buffered == 0
    return packets


@pytest.mark.parametrize(
    ("level", "role", "packets"),
    [
        (MQTT_3_1_1, "server", CLIENT_TO_SERVER_311),
        (MQTT_3_1_1, "client", SERVER_TO_CLIENT_311),
        (MQTT_5, "server", CLIENT_TO_SERVER_5),
        (MQTT_5, "client", SERVER_TO_CLIENT_5),
    ],
    ids=["3.1.1-to-server", "3.1.1-to-client", "5.0-to-server", "5.0-to-client"],
)
def test_every_packet_round_trips_one_by_one_and_as_one_stream(level: int, role: str, packets: list[Packet]) -> None:
    for packet in packets:
        assert decode_all(encode(packet, level), level, role) == [packet]
    assert decode_all(b"".join(encode(packet, level) for packet in packets), level, role) == packets


def test_every_packet_type_and_every_property_is_covered() -> None:
    covered = {p.TYPE for p in CLIENT_TO_SERVER_5 + SERVER_TO_CLIENT_5 + CONNECTS}
    assert covered == set(PacketType)
    used: set[str] = set()
    for packet in [*CLIENT_TO_SERVER_5, *SERVER_TO_CLIENT_5, *CONNECTS]:
        for props in (
            getattr(packet, "properties", EMPTY),
            getattr(getattr(packet, "will", None), "properties", EMPTY),
        ):
            used |= {spec.field for spec in SPECS.values() if getattr(props, spec.field) not in (None, ())}
    assert used == {spec.field for spec in SPECS.values()}


@pytest.mark.parametrize("connect", CONNECTS, ids=lambda c: f"level{c.protocol_level}-{c.client_id or 'empty'}")
def test_connect_round_trips_and_sets_the_decoders_level(connect: Connect) -> None:
    decoder = Decoder()
    assert decoder.level == 0
    assert decoder.feed(encode(connect, connect.protocol_level)) == [connect]
    assert decoder.level == connect.protocol_level


def test_the_27_properties_of_mqtt5_with_their_types_and_packets() -> None:
    assert len(SPECS) == 27
    assert SPECS[PropertyId.USER_PROPERTY].type is DataType.UTF8_STRING_PAIR
    assert SPECS[PropertyId.SUBSCRIPTION_IDENTIFIER].type is DataType.VARIABLE_BYTE_INTEGER
    assert SPECS[PropertyId.CORRELATION_DATA].type is DataType.BINARY_DATA
    assert SPECS[PropertyId.WILL_DELAY_INTERVAL].packets == {WILL}
    assert SPECS[PropertyId.TOPIC_ALIAS].packets == {PacketType.PUBLISH}
    assert PacketType.PINGREQ not in SPECS[PropertyId.USER_PROPERTY].packets
    assert SPECS[PropertyId.REASON_STRING].packets == {
        PacketType.CONNACK,
        PacketType.PUBACK,
        PacketType.PUBREC,
        PacketType.PUBREL,
        PacketType.PUBCOMP,
        PacketType.SUBACK,
        PacketType.UNSUBACK,
        PacketType.DISCONNECT,
        PacketType.AUTH,
    }


def test_reason_codes_have_the_specifications_names() -> None:
    assert ReasonCode(0x81).name == "MALFORMED_PACKET"
    assert ReasonCode(0x82).name == "PROTOCOL_ERROR"
    assert ReasonCode(0x95).name == "PACKET_TOO_LARGE"
    assert ReasonCode.NORMAL_DISCONNECTION == ReasonCode.GRANTED_QOS_0 == 0
    assert len({code.value for code in ReasonCode}) == 43


# Bytes assembled by hand from the specifications' examples and field layouts.
GOLDEN = [
    # 3.1.1 CONNECT, clean session, keepalive 60, client id "c"
    (MQTT_3_1_1, b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01c", Connect("c", MQTT_3_1_1, True, 60)),
    # 3.1.1 PUBLISH QoS 1 retain, topic "a/b", packet id 10, payload "hi"
    (MQTT_3_1_1, b"\x33\x09\x00\x03a/b\x00\x0ahi", Publish("a/b", b"hi", 1, True, False, 10)),
    # 5.0 PUBLISH QoS 0, topic "t", properties: message expiry 16, user property ("k", "v")
    (
        MQTT_5,
        b"\x30\x12\x00\x01t\x0c\x02\x00\x00\x00\x10\x26\x00\x01k\x00\x01vp!",
        Publish("t", b"p!", properties=Properties(message_expiry_interval=16, user_property=(("k", "v"),))),
    ),
    # 5.0 PUBACK in its short form, and with reason code 0x10 and no properties
    (MQTT_5, b"\x40\x02\x01\x00", Puback(256)),
    (MQTT_5, b"\x40\x03\x01\x00\x10", Puback(256, ReasonCode.NO_MATCHING_SUBSCRIBERS)),
    # 5.0 SUBSCRIBE packet id 1, subscription identifier 200 (two-byte varint), "a/#" with QoS 1 + no local
    (
        MQTT_5,
        b"\x82\x0c\x00\x01\x03\x0b\xc8\x01\x00\x03a/#\x05",
        Subscribe(1, [Subscription("a/#", 1, no_local=True)], Properties(subscription_identifier=(200,))),
    ),
    # 5.0 DISCONNECT with nothing after the fixed header means normal disconnection
    (MQTT_5, b"\xe0\x00", Disconnect()),
]


@pytest.mark.parametrize(("level", "data", "packet"), GOLDEN)
def test_known_bytes_decode_to_their_fields_and_encode_back(level: int, data: bytes, packet: Packet) -> None:
    decoder = Decoder(level=0 if isinstance(packet, Connect) else level)
    assert decoder.feed(data) == [packet]
    assert encode(packet, level) == data


def paho_sends(
    level: int, act: Callable[[paho.Client], None], count: int, properties: PahoProperties | None = None
) -> list[Packet]:
    """The first `count` packets paho-mqtt (an encoder written by others) sends to a server on a
    loopback socket, decoded by our server-side decoder. `act` prepares the client before it
    connects (a will, an on_connect that sends the rest); the server answers CONNECT with a
    plain CONNACK so paho goes on."""
    protocol = paho.MQTTv5 if level == MQTT_5 else paho.MQTTv311
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="oracle", protocol=protocol)
    client.username_pw_set("u", "p")
    act(client)
    packets: list[Packet] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(5)
        decoder = Decoder()
        client.connect("127.0.0.1", server.getsockname()[1], keepalive=30, properties=properties)
        connection, _ = server.accept()
        with connection:
            connection.settimeout(0.05)
            answered = False
            deadline = time.monotonic() + 5
            while len(packets) < count:
                assert time.monotonic() < deadline, f"paho sent {packets}"
                client.loop(0.05)  # paho reads the CONNACK, runs on_connect, writes what is queued
                try:
                    data = connection.recv(65536)
                except TimeoutError:
                    continue
                assert data, f"paho closed after {packets}"
                packets += decoder.feed(data)
                if packets and not answered:
                    connection.sendall(encode(Connack(), level))
                    answered = True
    client.loop(0.01)  # paho sees the close and releases its socket
    return packets


def test_packets_paho_encodes_in_311_decode_to_the_same_fields() -> None:
    def act(client: paho.Client) -> None:
        client.will_set("w/t", b"bye", 2, False)

        def on_connect(*_: Any) -> None:
            client.publish("a/b", b"x" * 5, 1, True)
            client.subscribe([("a/#", 1), ("b", 0)])
            client.unsubscribe(["a/#"])
            client.disconnect()

        client.on_connect = on_connect

    assert paho_sends(MQTT_3_1_1, act, 5) == [
        Connect("oracle", MQTT_3_1_1, True, 30, "u", b"p", Will("w/t", b"bye", 2, False)),
        Publish("a/b", b"xxxxx", 1, retain=True, packet_id=1),
        Subscribe(2, [Subscription("a/#", 1), Subscription("b", 0)]),
        Unsubscribe(3, ["a/#"]),
        Disconnect(),
    ]


def test_packets_paho_encodes_in_5_decode_to_the_same_fields() -> None:
    def props(kind: int, **values: Any) -> PahoProperties:
        made = PahoProperties(kind)
        for name, value in values.items():
            setattr(made, name, value)
        return made

    def act(client: paho.Client) -> None:
        will = props(PacketTypes.WILLMESSAGE, WillDelayInterval=5, ContentType="text/plain")
        client.will_set("w/t", b"bye", 1, True, properties=will)

        def on_connect(*_: Any) -> None:
            publish = props(
                PacketTypes.PUBLISH,
                MessageExpiryInterval=30,
                PayloadFormatIndicator=1,
                ContentType="application/json",
                ResponseTopic="r/t",
                CorrelationData=b"c",
                UserProperty=[("k", "v"), ("k", "w")],
            )
            client.publish("a/b", b"x" * 5, 1, True, properties=publish)
            options = SubscribeOptions(qos=1, noLocal=True, retainAsPublished=True, retainHandling=2)
            client.subscribe(
                [("a/#", options), ("b", SubscribeOptions(qos=0))],
                properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7),
            )
            client.unsubscribe(["a/#"], properties=props(PacketTypes.UNSUBSCRIBE, UserProperty=[("u", "1")]))
            client.disconnect(PahoReasonCode(PacketTypes.DISCONNECT, "Disconnect with will message"))

        client.on_connect = on_connect

    expected_connect = Connect(
        "oracle",
        MQTT_5,
        True,
        30,
        "u",
        b"p",
        Will("w/t", b"bye", 1, True, Properties(will_delay_interval=5, content_type="text/plain")),
        Properties(session_expiry_interval=60, receive_maximum=10, user_property=(("a", "b"),)),
    )
    connect = props(PacketTypes.CONNECT, SessionExpiryInterval=60, ReceiveMaximum=10, UserProperty=[("a", "b")])
    assert paho_sends(MQTT_5, act, 5, connect) == [
        expected_connect,
        Publish(
            "a/b",
            b"xxxxx",
            1,
            retain=True,
            packet_id=1,
            properties=Properties(
                payload_format_indicator=1,
                message_expiry_interval=30,
                content_type="application/json",
                response_topic="r/t",
                correlation_data=b"c",
                user_property=(("k", "v"), ("k", "w")),
            ),
        ),
        Subscribe(
            2,
            [Subscription("a/#", 1, True, True, 2), Subscription("b", 0)],
            Properties(subscription_identifier=(7,)),
        ),
        Unsubscribe(3, ["a/#"], Properties(user_property=(("u", "1"),))),
        Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE),
    ]


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_stream_split_at_every_byte_boundary_yields_the_same_packets(level: int) -> None:
    connect = Connect("split", level, properties=CONNECT_PROPS if level == MQTT_5 else EMPTY)
    packets: list[Packet] = [connect, *(CLIENT_TO_SERVER_5 if level == MQTT_5 else CLIENT_TO_SERVER_311)]
    packets.append(Publish("big", b"b" * 20_000, 1, packet_id=1))  # a three-byte remaining length
    stream = b"".join(encode(packet, level) for packet in packets)
    for cut in range(1, len(stream)):
        decoder = Decoder()
        assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == packets, f"split at byte {cut}"
    decoder, out = Decoder(), []
    for index in range(len(stream)):
        out += decoder.feed(stream[index : index + 1])
    assert out == packets
    assert decoder.buffered == 0


def test_only_the_one_partial_packet_is_kept() -> None:
    decoder = Decoder(level=MQTT_3_1_1)
    whole = encode(Publish("a", b"x" * 1000, 1, packet_id=1), MQTT_3_1_1)
    assert decoder.feed(whole * 3 + whole[:10]) == [Publish("a", b"x" * 1000, 1, packet_id=1)] * 3
    assert decoder.buffered == 10


def test_pipelined_connect_and_publish_decode_with_the_level_connect_announced() -> None:
    # paho and others may send CONNECT and the first packets in one write: the PUBLISH after a
    # 5.0 CONNECT has a property length byte that 3.1.1 would read as payload.
    publish = Publish("t", b"v", 1, packet_id=1, properties=Properties(content_type="c"))
    data = encode(Connect("c", MQTT_5), MQTT_5) + encode(publish, MQTT_5)
    assert Decoder().feed(data)[1] == publish


def test_encode_fast_paths_agree_with_encode() -> None:
    for level in (MQTT_3_1_1, MQTT_5):
        publish = Publish("s/1", b"v" * 100, 1, packet_id=42)
        assert encode_publish(publish, level) == encode(publish, level)
        for ack in (Puback(42), Puback(42, ReasonCode.QUOTA_EXCEEDED)):
            assert encode_puback(ack, level) == encode(ack, level)
    assert encode(Pubrel(1), MQTT_3_1_1) == b"\x62\x02\x00\x01"
    assert encode(Puback(1, ReasonCode.QUOTA_EXCEEDED), MQTT_3_1_1) == b"\x40\x02\x00\x01"


def test_encode_refuses_what_mqtt_cannot_frame() -> None:
    with pytest.raises(ValueError, match="65535"):
        encode(Publish("t" * 70_000, b""), MQTT_3_1_1)
    with pytest.raises(ValueError, match="AUTH"):
        encode(Auth(), MQTT_3_1_1)


def test_shared_subscription_filters_split_into_group_and_filter() -> None:
    assert split_shared("$share/g1/a/+/c") == ("g1", "a/+/c")
    assert split_shared("a/b") == (None, "a/b")
    assert split_shared("$shared/x") == (None, "$shared/x")


def test_a_decoder_told_its_level_later_decodes_at_that_level() -> None:
    # a client knows the level from the CONNECT it sent; the broker core may also set it itself
    decoder = Decoder(role="client")
    decoder.level = MQTT_5
    publish = Publish("t", b"v", 0, properties=Properties(content_type="c"))
    assert decoder.feed(encode(publish, MQTT_5)) == [publish]
