"""The in-flight window (bridge/brokers/embedded/inflight.py): packet ids given and taken back,
send order kept, room against the client's window, ids never shared by two messages in flight."""

from __future__ import annotations

import pytest

from bridge.brokers.embedded.inflight import InflightWindow, NoFreePacketId
from bridge.brokers.embedded.sessions import Outgoing


def _message(n: int, qos: int = 1) -> Outgoing:
    return Outgoing(f"m{n}", "t", b"p", qos, False, "from", ("t",))


def test_send_gives_ids_in_turn_and_keeps_send_order() -> None:
    window = InflightWindow()
    sent = [_message(n) for n in range(3)]
    assert [window.send(m) for m in sent] == [1, 2, 3]
    assert [m.packet_id for m in sent] == [1, 2, 3]
    assert list(window.values()) == sent and [pid for pid, _ in window.items()] == [1, 2, 3]
    assert len(window) == 3 and 2 in window and window.get(2) is sent[1]


def test_remove_takes_the_message_once() -> None:
    window = InflightWindow()
    first, second = _message(1), _message(2)
    window.send(first)
    window.send(second)
    assert window.remove(1) is first
    assert window.remove(1) is None  # a second PUBACK for it finds nothing
    assert window.remove(0) is None  # a QoS 0 message never had an id
    assert list(window.values()) == [second]


def test_has_room_against_the_clients_window() -> None:
    window = InflightWindow()
    assert window.has_room(2)
    window.send(_message(1))
    assert window.has_room(2)
    window.send(_message(2))
    assert not window.has_room(2)
    window.remove(1)
    assert window.has_room(2)


def test_ids_wrap_and_skip_those_still_in_flight() -> None:
    window = InflightWindow()
    held = _message(0)
    window.send(held)  # id 1, never acknowledged
    for n in range(65534):  # ids 2..65535, each acknowledged at once
        window.remove(window.send(_message(n)))
    # the counter wraps past 65535: id 1 is still in flight, so the next message gets 2
    assert window.send(_message(99)) == 2
    assert window.get(1) is held


def test_restore_keeps_the_stored_id_and_the_next_id_avoids_it() -> None:
    window = InflightWindow()
    restored = _message(1)
    restored.packet_id = 1
    window.restore(restored)  # a durable session read back after a restart
    assert window.get(1) is restored
    assert window.send(_message(2)) == 2


def test_a_full_id_space_is_an_error_not_a_duplicate() -> None:
    window = InflightWindow()
    for n in range(65535):
        window.send(_message(n))
    with pytest.raises(NoFreePacketId):
        window.send(_message(-1))
    window.clear()
    assert len(window) == 0 and window.send(_message(0)) >= 1
