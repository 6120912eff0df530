"""Strict framing (docs/brokers.md#what-it-guarantees): malformed bytes are refused with the MQTT 5.0 reason code
to disconnect with, before anything of the packet is returned; nothing after a bad packet is read
as a packet of its own. Every case is raw bytes assembled by hand."""

from __future__ import annotations

import pytest

from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    MQTT_5,
    CodecError,
    Connect,
    Decoder,
    MalformedPacket,
    Packet,
    PacketTooLarge,
    ProtocolError,
    Publish,
    ReasonCode,
    UnsupportedProtocolVersion,
    encode,
)

MALFORMED, PROTOCOL, TOO_LARGE = ReasonCode.MALFORMED_PACKET, ReasonCode.PROTOCOL_ERROR, ReasonCode.PACKET_TOO_LARGE


def s(raw: bytes) -> bytes:
    """A length-prefixed string or binary field."""
    return len(raw).to_bytes(2, "big") + raw


def packet(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes((first, len(body))) + body


def connect_body(level: int = MQTT_3_1_1, flags: int = 0x02, client_id: bytes = b"c", rest: bytes = b"") -> bytes:
    props = b"\x00" if level == MQTT_5 else b""
    return s(b"MQTT") + bytes((level, flags)) + b"\x00\x3c" + props + s(client_id) + rest


def refused(data: bytes, level: int = MQTT_3_1_1, role: str = "server") -> CodecError:
    decoder = Decoder(level=level, role=role)  # type: ignore[arg-type]
    with pytest.raises(CodecError) as caught:
        decoder.feed(data)
    return caught.value


CASES: list[tuple[str, int, bytes, ReasonCode, str]] = [
    # -- the strict framing list (docs/brokers.md#what-it-guarantees) --
    ("publish topic not UTF-8", 4, packet(0x30, s(b"a/\xff\xfe") + b"x"), MALFORMED, "not valid UTF-8"),
    ("publish topic with U+0000", 4, packet(0x30, s(b"a\x00b") + b"x"), MALFORMED, "U+0000"),
    ("publish topic with U+0000 (5.0)", 5, packet(0x30, s(b"a\x00") + b"\x00x"), MALFORMED, "U+0000"),
    ("publish topic, surrogate", 4, packet(0x30, s(b"a\xed\xa0\x80") + b"x"), MALFORMED, "not valid UTF-8"),
    ("publish topic, overlong '/'", 4, packet(0x30, s(b"a\xc0\xaf") + b"x"), MALFORMED, "not valid UTF-8"),
    ("publish topic, non-character", 4, packet(0x30, s("a\uffff".encode()) + b"x"), MALFORMED, "U+FFFF"),
    ("publish topic with '+'", 4, packet(0x30, s(b"a/+") + b"x"), MALFORMED, ""),
    ("publish topic with '#'", 5, packet(0x30, s(b"a/#") + b"\x00x"), MALFORMED, ""),
    ("publish topic, non-ASCII with '#'", 4, packet(0x30, s("é/#".encode()) + b"x"), MALFORMED, "wildcard"),
    ("publish empty topic (3.1.1)", 4, packet(0x30, s(b"") + b"x"), MALFORMED, "empty topic"),
    ("publish empty topic, no alias (5.0)", 5, packet(0x30, s(b"") + b"\x00x"), PROTOCOL, "no topic alias"),
    ("publish QoS 3", 4, packet(0x36, s(b"a") + b"\x00\x01x"), MALFORMED, "QoS 3"),
    ("publish DUP at QoS 0", 4, packet(0x38, s(b"a") + b"x"), MALFORMED, "DUP"),
    ("publish packet id 0", 4, packet(0x32, s(b"a") + b"\x00\x00x"), PROTOCOL, "packet identifier 0"),
    ("publish topic longer than packet", 4, packet(0x30, b"\x00\x09abc"), MALFORMED, "declares 9 bytes"),
    ("publish ends in packet id", 4, packet(0x32, s(b"a") + b"\x00"), MALFORMED, "packet identifier"),
    ("publish 5.0 without property length", 5, packet(0x30, s(b"a")), MALFORMED, "variable byte integer"),
    ("connect client id not UTF-8", 0, packet(0x10, connect_body(client_id=b"\xc3\x28")), MALFORMED, "UTF-8"),
    ("connect client id with U+0000", 0, packet(0x10, connect_body(client_id=b"c\x00")), MALFORMED, "U+0000"),
    ("connect trailing bytes", 0, packet(0x10, connect_body(rest=b"\x00")), MALFORMED, "1 bytes past its content"),
    ("connect shorter than content", 0, packet(0x10, connect_body()[:-1]), MALFORMED, "declares 1 bytes"),
    ("connect will QoS 3", 0, packet(0x10, connect_body(flags=0x1E) + s(b"w") + s(b"p")), MALFORMED, "will QoS 3"),
    ("connect will QoS, no will", 0, packet(0x10, connect_body(flags=0x0A)), MALFORMED, "but no will"),
    ("connect will retain, no will", 0, packet(0x10, connect_body(flags=0x22)), MALFORMED, "but no will"),
    (
        "connect wildcard will topic",
        0,
        packet(0x10, connect_body(flags=0x06, rest=s(b"w/#") + s(b"p"))),
        MALFORMED,
        "wildcard",
    ),
    (
        "connect empty will topic",
        0,
        packet(0x10, connect_body(flags=0x06, rest=s(b"") + s(b"p"))),
        MALFORMED,
        "will topic is empty",
    ),
    ("connect reserved flag", 0, packet(0x10, connect_body(flags=0x03)), MALFORMED, "reserved flag"),
    (
        "connect password, no user (3.1.1)",
        0,
        packet(0x10, connect_body(flags=0x42, rest=s(b"p"))),
        MALFORMED,
        "password",
    ),
    ("connect protocol name", 0, packet(0x10, s(b"MQTX") + b"\x04\x02\x00\x3c" + s(b"c")), PROTOCOL, "MQTX"),
    ("connect level 6", 0, packet(0x10, connect_body(level=6)), ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, "level 6"),
    (
        "connect MQIsdp level 4",
        0,
        packet(0x10, s(b"MQIsdp") + b"\x04\x02\x00\x3c" + s(b"c")),
        ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
        "",
    ),
    ("first packet not connect", 0, packet(0xC0, b""), PROTOCOL, "not CONNECT"),
    ("publish before connect", 0, packet(0x30, s(b"a") + b"x"), PROTOCOL, "not CONNECT"),
    ("publish ends before its topic", 4, b"\x30\x01\x00", MALFORMED, "before its topic"),
    ("connect ends before its flags", 0, packet(0x10, s(b"MQTT") + b"\x04"), MALFORMED, "one-byte field"),
    (
        "connect ends inside a length prefix",
        0,
        packet(0x10, s(b"MQTT") + b"\x04\x02\x00\x3c\x00"),
        MALFORMED,
        "length prefix",
    ),
    # -- remaining length --
    ("remaining length of 5 bytes", 4, b"\x30\xff\xff\xff\xff\x01", MALFORMED, "longer than 4 bytes"),
    ("remaining length not minimal", 4, b"\xc0\x80\x00", MALFORMED, "shortest form"),
    ("remaining length too short for puback", 4, b"\x40\x01\x00", MALFORMED, "two-byte integer"),
    ("puback longer than its content (3.1.1)", 4, b"\x40\x03\x00\x01\x00", MALFORMED, "1 bytes past"),
    ("pingreq with a body", 4, b"\xc0\x01\x00", MALFORMED, "1 bytes past"),
    ("disconnect with a body (3.1.1)", 4, b"\xe0\x01\x00", MALFORMED, "1 bytes past"),
    # -- reserved bits and packet types --
    ("subscribe header flags 0", 4, packet(0x80, b"\x00\x01" + s(b"a") + b"\x00"), MALFORMED, "reserved header flags"),
    ("pubrel header flags 0", 4, packet(0x60, b"\x00\x01"), MALFORMED, "reserved header flags"),
    ("puback header flags 2", 4, packet(0x42, b"\x00\x01"), MALFORMED, "reserved header flags"),
    ("pingreq header flags 1", 4, packet(0xC1, b""), MALFORMED, "reserved header flags"),
    ("packet type 0", 4, packet(0x00, b""), MALFORMED, "type 0 is reserved"),
    ("AUTH in 3.1.1", 4, packet(0xF0, b""), MALFORMED, "type 15 is reserved"),
    (
        "subscribe options reserved bits (3.1.1)",
        4,
        packet(0x82, b"\x00\x01" + s(b"a") + b"\x04"),
        MALFORMED,
        "reserved bits",
    ),
    ("subscribe QoS 3 (3.1.1)", 4, packet(0x82, b"\x00\x01" + s(b"a") + b"\x03"), MALFORMED, "QoS 3"),
    (
        "subscribe options reserved bits (5.0)",
        5,
        packet(0x82, b"\x00\x01\x00" + s(b"a") + b"\x40"),
        MALFORMED,
        "reserved bits",
    ),
    ("subscribe QoS 3 (5.0)", 5, packet(0x82, b"\x00\x01\x00" + s(b"a") + b"\x03"), PROTOCOL, "retain handling 3"),
    (
        "subscribe retain handling 3",
        5,
        packet(0x82, b"\x00\x01\x00" + s(b"a") + b"\x30"),
        PROTOCOL,
        "retain handling 3",
    ),
    # -- packet identifiers and topic filters --
    ("subscribe packet id 0", 4, packet(0x82, b"\x00\x00" + s(b"a") + b"\x00"), PROTOCOL, "packet identifier 0"),
    ("unsubscribe packet id 0", 4, packet(0xA2, b"\x00\x00" + s(b"a")), PROTOCOL, "packet identifier 0"),
    ("puback packet id 0", 4, packet(0x40, b"\x00\x00"), PROTOCOL, "packet identifier 0"),
    ("pubrel packet id 0 (5.0)", 5, packet(0x62, b"\x00\x00\x00"), PROTOCOL, "packet identifier 0"),
    ("subscribe without filters", 4, packet(0x82, b"\x00\x01"), PROTOCOL, "without a topic filter"),
    ("unsubscribe without filters", 5, packet(0xA2, b"\x00\x01\x00"), PROTOCOL, "without a topic filter"),
    ("subscribe '#' not last", 4, packet(0x82, b"\x00\x01" + s(b"a/#/b") + b"\x00"), MALFORMED, "'#'"),
    ("subscribe '+' inside a level", 4, packet(0x82, b"\x00\x01" + s(b"a+") + b"\x00"), MALFORMED, "'+'"),
    ("subscribe empty filter", 4, packet(0x82, b"\x00\x01" + s(b"") + b"\x00"), MALFORMED, "empty"),
    ("subscribe filter with U+0000", 4, packet(0x82, b"\x00\x01" + s(b"a\x00") + b"\x00"), MALFORMED, "U+0000"),
    ("unsubscribe filter not UTF-8", 4, packet(0xA2, b"\x00\x01" + s(b"\xff")), MALFORMED, "UTF-8"),
    (
        "shared subscription without filter",
        4,
        packet(0x82, b"\x00\x01" + s(b"$share/g") + b"\x00"),
        MALFORMED,
        "no topic filter",
    ),
    (
        "shared subscription, empty group",
        4,
        packet(0x82, b"\x00\x01" + s(b"$share//a") + b"\x00"),
        MALFORMED,
        "group name",
    ),
    ("shared subscription, wildcard group", 4, packet(0xA2, b"\x00\x01" + s(b"$share/g+/a")), MALFORMED, "group name"),
    (
        "shared subscription, bad filter",
        4,
        packet(0x82, b"\x00\x01" + s(b"$share/g/a/#/b") + b"\x00"),
        MALFORMED,
        "'#'",
    ),
    (
        "shared subscription with no local",
        5,
        packet(0x82, b"\x00\x01\x00" + s(b"$share/g/a") + b"\x04"),
        PROTOCOL,
        "no local",
    ),
    # -- MQTT 5.0 properties --
    (
        "property not allowed in packet",
        5,
        packet(0x30, s(b"a") + b"\x05\x11\x00\x00\x00\x01x"),
        MALFORMED,
        "session_expiry_interval is not allowed in PUBLISH",
    ),
    ("unknown property", 5, packet(0x30, s(b"a") + b"\x02\x7f\x00x"), MALFORMED, "unknown property 0x7F"),
    (
        "duplicate property",
        5,
        packet(0x30, s(b"a") + b"\x08\x03" + s(b"a") + b"\x03" + s(b"b") + b"x"),
        PROTOCOL,
        "content_type appears twice",
    ),
    (
        "two subscription ids in SUBSCRIBE",
        5,
        packet(0x82, b"\x00\x01\x04\x0b\x01\x0b\x02" + s(b"a") + b"\x00"),
        PROTOCOL,
        "appears twice in SUBSCRIBE",
    ),
    ("subscription id 0", 5, packet(0x82, b"\x00\x01\x02\x0b\x00" + s(b"a") + b"\x00"), PROTOCOL, "out of range"),
    ("topic alias 0", 5, packet(0x30, s(b"a") + b"\x03\x23\x00\x00x"), PROTOCOL, "topic_alias = 0"),
    ("payload format indicator 2", 5, packet(0x30, s(b"a") + b"\x02\x01\x02x"), PROTOCOL, "out of range"),
    (
        "properties longer than packet",
        5,
        packet(0x30, s(b"a") + b"\x40\x01\x00"),
        MALFORMED,
        "properties declare 64 bytes",
    ),
    (
        "property value past property block",
        5,
        packet(0x30, s(b"a") + b"\x02\x02\x00\x00\x00\x00x"),
        MALFORMED,
        "four-byte",
    ),
    (
        "user property with U+0000",
        5,
        packet(0x30, s(b"a") + b"\x08\x26" + s(b"k\x00") + s(b"v") + b"x"),
        MALFORMED,
        "U+0000",
    ),
    (
        "will property in PUBLISH",
        5,
        packet(0x30, s(b"a") + b"\x05\x18\x00\x00\x00\x01x"),
        MALFORMED,
        "will_delay_interval",
    ),
    (
        "subscription id in a client's PUBLISH",
        5,
        packet(0x30, s(b"a") + b"\x02\x0b\x01x"),
        PROTOCOL,
        "subscription identifier",
    ),
    ("puback reason code not for puback", 5, packet(0x40, b"\x00\x01\x8f"), PROTOCOL, "reason code 0x8F"),
    ("disconnect reason code 0x18", 5, packet(0xE0, b"\x18"), PROTOCOL, "reason code 0x18"),
    (
        "receive maximum 0",
        0,
        packet(0x10, s(b"MQTT") + b"\x05\x02\x00\x3c\x03\x21\x00\x00" + s(b"c")),
        PROTOCOL,
        "receive_maximum = 0",
    ),
    (
        "authentication data without method",
        0,
        packet(0x10, s(b"MQTT") + b"\x05\x02\x00\x3c\x03\x16" + s(b"") + s(b"c")),
        PROTOCOL,
        "no authentication method",
    ),
    (
        "property varint not minimal",
        5,
        packet(0x82, b"\x00\x01\x03\x0b\x81\x00" + s(b"a") + b"\x00"),
        MALFORMED,
        "shortest form",
    ),
    (
        "property varint over 4 bytes",
        5,
        packet(0x82, b"\x00\x01\x06\x0b\xff\xff\xff\xff\x01" + s(b"a") + b"\x00"),
        MALFORMED,
        "longer than 4 bytes",
    ),
    # -- direction --
    ("server receives CONNACK", 4, packet(0x20, b"\x00\x00"), PROTOCOL, "never sent to a server"),
    ("server receives SUBACK", 4, packet(0x90, b"\x00\x01\x00"), PROTOCOL, "never sent to a server"),
]


@pytest.mark.parametrize(("level", "data", "reason", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_input_is_refused_with_its_reason_code(
    level: int, data: bytes, reason: ReasonCode, message: str
) -> None:
    error = refused(data, level)
    assert error.reason == reason, str(error)
    assert message in error.message
    assert error.packets == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (packet(0x20, b"\x02\x00"), "reserved acknowledge flags"),
        (packet(0x20, b"\x00\x06"), "reason code 0x06"),
        (packet(0x90, b"\x00\x01\x03"), "reason code 0x03"),
        (packet(0x90, b"\x00\x01"), "without a reason code"),
        (packet(0x10, connect_body()), "never sent to a client"),
    ],
)
def test_a_client_side_decoder_checks_what_servers_send(data: bytes, message: str) -> None:
    assert message in refused(data, MQTT_3_1_1, role="client").message


@pytest.mark.parametrize(
    ("data", "level"),
    [
        (packet(0x10, connect_body(MQTT_5, client_id=b"\xc3\x28")), MQTT_5),
        (packet(0x10, connect_body(MQTT_3_1_1, client_id=b"\xc3\x28")), MQTT_3_1_1),
        (packet(0x10, connect_body(MQTT_5, rest=b"\x00")), MQTT_5),  # bytes past its content
        (packet(0x10, connect_body(MQTT_5, flags=0x1E) + s(b"w") + s(b"p")), MQTT_5),  # will QoS 3
        (b"\x10\x80\x80\x80\x01" + connect_body(MQTT_5), MQTT_5),  # too large, from what is there
        (packet(0x10, s(b"MQTT") + b"\x07\x02\x00\x3c"), 0),  # a level no MQTT has
        (packet(0x10, s(b"HTTP") + b"\x05\x02\x00\x3c"), 0),  # not MQTT
        (packet(0x11, connect_body(MQTT_5)), 0),  # reserved flags: not read as a CONNECT
        (packet(0x30, s(b"a") + b"x"), 0),  # not a CONNECT at all
    ],
)
def test_a_refused_first_connect_tells_the_level_it_announced(data: bytes, level: int) -> None:
    """So a server can answer a refused 5.0 CONNECT with a CONNACK >= 0x80 (MQTT 5.0 3.2.2.2)."""
    decoder = Decoder(max_packet_size=1024)
    with pytest.raises(CodecError) as caught:
        decoder.feed(data)
    assert caught.value.level == level
    assert decoder.level == 0  # nothing was accepted


def test_errors_after_the_connect_leave_the_level_to_the_decoder() -> None:
    error = refused(packet(0x10, connect_body(MQTT_5)) + b"\x00\x00", 0)
    assert error.level == 0  # decoder.level already holds 5


def test_a_second_connect_is_refused_after_the_first_is_returned() -> None:
    error = refused(packet(0x10, connect_body()) * 2, 0)
    assert error.reason == PROTOCOL
    assert error.message == "second CONNECT on one connection"
    assert error.packets == [Connect("c", MQTT_3_1_1, True, 60)]


def test_connack_session_present_with_a_refusal_is_a_protocol_error() -> None:
    assert refused(packet(0x20, b"\x01\x87\x00"), MQTT_5, role="client").reason == PROTOCOL


def test_a_bad_topic_never_lets_its_payload_be_read_as_packets() -> None:
    # amqtt's smuggling: a non-UTF-8 topic made it mis-measure the payload, whose tail holds a
    # complete PUBLISH to another topic. Here the whole outer packet is refused, nothing is returned.
    inner = encode(Publish("smuggled", b"evil", 1, packet_id=9), MQTT_3_1_1)
    outer = packet(0x32, s(b"\xff\xfe\xfd") + b"\x00\x01" + b"junk" + inner)
    good = encode(Publish("fine", b"ok", 1, packet_id=1), MQTT_3_1_1)
    error = refused(good + outer + good, MQTT_3_1_1)
    assert isinstance(error, MalformedPacket)
    assert error.packets == [Publish("fine", b"ok", 1, packet_id=1)]


def test_the_decoder_is_unusable_after_a_refusal() -> None:
    decoder = Decoder(level=MQTT_3_1_1)
    with pytest.raises(MalformedPacket):
        decoder.feed(packet(0x36, s(b"a") + b"\x00\x01"))
    with pytest.raises(ProtocolError, match="already broke the protocol"):
        decoder.feed(encode(Publish("a", b""), MQTT_3_1_1))


def test_an_oversized_packet_is_refused_from_its_fixed_header_alone() -> None:
    decoder = Decoder(max_packet_size=1024, level=MQTT_3_1_1)
    header = b"\x30\x80\x80\x80\x01"  # remaining length 2 MiB: no body sent at all
    with pytest.raises(PacketTooLarge, match="2097157 bytes") as caught:
        decoder.feed(header)
    assert caught.value.reason == TOO_LARGE
    assert decoder.buffered == 0


def test_the_size_limit_counts_the_whole_packet() -> None:
    at_limit = encode(Publish("t", b"x" * 100), MQTT_3_1_1)
    assert len(Decoder(max_packet_size=len(at_limit), level=MQTT_3_1_1).feed(at_limit)) == 1
    with pytest.raises(PacketTooLarge):
        Decoder(max_packet_size=len(at_limit) - 1, level=MQTT_3_1_1).feed(at_limit[:2])


def test_a_refusal_inside_a_split_stream_comes_exactly_when_its_packet_is_complete() -> None:
    good = encode(Publish("a", b"1", 1, packet_id=1), MQTT_3_1_1)
    bad = packet(0x30, s(b"a\xff") + b"x")
    stream = good + bad + good
    for cut in range(1, len(stream)):
        decoder = Decoder(level=MQTT_3_1_1)
        refusing_call = 0 if cut >= len(good) + len(bad) else 1
        seen: list[Packet] = []
        refused_at = None
        for call, chunk in enumerate((stream[:cut], stream[cut:])):
            try:
                seen += decoder.feed(chunk)
            except MalformedPacket as error:
                seen += error.packets
                refused_at = call
                break
        assert refused_at == refusing_call, f"split at byte {cut}"
        assert seen == [Publish("a", b"1", 1, packet_id=1)], f"split at byte {cut}"


def test_a_truncated_packet_is_held_not_refused_and_completed_later() -> None:
    decoder = Decoder()
    data = encode(Connect("late", MQTT_5), MQTT_5)
    for index in range(len(data) - 1):
        assert decoder.feed(data[index : index + 1]) == []
    assert decoder.buffered == len(data) - 1
    assert decoder.feed(data[-1:]) == [Connect("late", MQTT_5)]


def test_unsupported_version_names_the_connack_to_send() -> None:
    error = refused(packet(0x10, connect_body(level=2)), 0)
    assert isinstance(error, UnsupportedProtocolVersion)
    assert error.reason == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    assert str(error) == "CONNECT for MQTT protocol level 2 (reason 0x84 unsupported_protocol_version)"


def test_control_characters_are_data_but_nul_is_refused() -> None:
    """A receiver may refuse U+0001-U+001F and U+007F-U+009F; the bridge keeps them as data (a
    client id or topic with a newline is stored byte for byte, docs/architecture.md#bad-input). U+0000 is a MUST."""
    decoder = Decoder(level=4)
    [publish] = decoder.feed(packet(0x30, s(b"line\nbreak") + b"x") + packet(0x30, s("c1\x85".encode()) + b"y"))[:1]
    assert publish.topic == "line\nbreak"
    with pytest.raises(MalformedPacket, match="U\\+0000"):
        Decoder(level=4).feed(packet(0x30, s(b"a\x00b") + b"x"))
