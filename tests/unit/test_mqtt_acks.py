"""The external modes' message path without a broker: in-order acknowledgements (acks.py) and the
QoS 1 PUBLISH fast path of the gmqtt handler (client.py), fed the bytes a broker sends."""

from __future__ import annotations

from typing import Any

import pytest
from gmqtt.mqtt.protocol import Package

from bridge.brokers.external.mqtt.acks import AckWindow, Unacked
from bridge.brokers.external.mqtt.client import Connection


def window() -> tuple[AckWindow, list[list[int | None]]]:
    acked: list[list[int | None]] = []
    return AckWindow(lambda messages: acked.append([m.packet_id for m in messages])), acked


def test_a_message_is_acknowledged_only_with_every_older_one() -> None:
    acks, acked = window()
    first, second, third = (acks.arrived(n, True) for n in (1, 2, 3))
    acks.settle(third)  # dispatched; no rule holds it
    acks.settle(second)
    assert acked == [] and len(acks) == 3 and not acks.emptied.is_set()
    acks.settle(first)  # the oldest is done: the whole run leaves at once, oldest first
    assert acked == [[1, 2, 3]]
    assert len(acks) == 0 and acks.emptied.is_set()


def test_a_message_waits_for_each_of_its_rules() -> None:
    acks, acked = window()
    message = acks.arrived(9, True)
    message.waiting += 2  # two rules matched
    acks.settle(message)  # dispatching done
    acks.settle(message)  # one rule committed
    assert acked == []
    acks.settle(message)
    assert acked == [[9]]


def test_later_messages_leave_in_their_own_run() -> None:
    acks, acked = window()
    first = acks.arrived(1, True)
    acks.settle(first)
    second: Unacked = acks.arrived(2, True)
    acks.settle(second)
    assert acked == [[1], [2]]


def _publish(topic: bytes, packet_id: int, payload: bytes, properties: bytes = b"\x00") -> bytes:
    return len(topic).to_bytes(2, "big") + topic + packet_id.to_bytes(2, "big") + properties + payload


@pytest.fixture
def handler() -> tuple[Any, list[tuple[Any, ...]]]:
    delivered: list[tuple[Any, ...]] = []
    connection = Connection(
        "127.0.0.1",
        1,
        clientid="t",
        on_message=lambda *message: delivered.append(message),  # type: ignore[arg-type,return-value]
        subscriptions=[],
        receive_maximum=10,
        session_expiry=10,
    )
    return connection.client._package_handler, delivered


async def test_a_qos1_publish_without_properties_is_parsed_with_its_flags(handler: Any) -> None:
    parse, delivered = handler
    parse(Package(0x33, _publish(b"a/b", 7, b"\x00\xffbytes")))  # QoS 1, retain
    parse(Package(0x3A, _publish("ü/x".encode(), 65535, b"")))  # QoS 1, DUP
    assert delivered == [
        ("a/b", b"\x00\xffbytes", 1, False, True, 7, ()),
        ("ü/x", b"", 1, True, False, 65535, ()),
    ]


async def test_a_publish_with_user_properties_takes_gmqtts_parser_and_keeps_them(handler: Any) -> None:
    parse, delivered = handler
    user_property = b"\x26" + b"\x00\x01k" + b"\x00\x02v1"  # id 0x26, name "k", value "v1"
    properties = len(user_property).to_bytes(1, "big") + user_property
    parse(Package(0x32, _publish(b"t", 3, b"p", properties)))
    assert delivered == [("t", b"p", 1, False, False, 3, (("k", "v1"),))]


async def test_a_malformed_publish_is_skipped_and_a_non_utf8_topic_keeps_its_bytes(handler: Any) -> None:
    parse, delivered = handler
    parse(Package(0x32, b"\x00\x09ab"))  # topic length past the end: gmqtt logs and skips it
    parse(Package(0x32, _publish(b"\xff/t", 4, b"p")))  # not UTF-8 (a broker should never send it)
    assert delivered == [(b"\xff/t".decode("utf-8", "surrogateescape"), b"p", 1, False, False, 4, ())]
