"""What an idle client costs (docs/benchmarks.md#memory-per-idle-connection): a session with no
subscription, no QoS 2 message from its client and nothing in flight holds no container of its
own, only shared read-only empty ones, and gets its own the moment it needs one; a decoder with
no partial packet holds no buffer; connections under the same limits share one set of decoder
bounds. The containers still behave as they did for the code that reads them."""

from __future__ import annotations

from collections import Counter

import pytest

from bridge.brokers.embedded.codec import Decoder
from bridge.brokers.embedded.inflight import InflightWindow
from bridge.brokers.embedded.limits import Limits, decoder_bounds
from bridge.brokers.embedded.sessions import IncomingQos2, Outgoing, SessionState, Subscription
from bridge.brokers.embedded.stream import EventStream
from bridge.events import Event


async def _sink(_event: Event) -> None:
    return None


def _session(clientid: str) -> SessionState:
    return SessionState(
        clientid, expiry=0, username=None, stream=EventStream(_sink, clientid), limits=Limits(), refused=Counter()
    )


def test_idle_sessions_share_their_empty_containers() -> None:
    first, second = _session("a"), _session("b")
    assert first.subscriptions is second.subscriptions and not first.subscriptions
    assert first.incoming_qos2 is second.incoming_qos2 and not first.incoming_qos2
    assert first.inflight._messages is second.inflight._messages


def test_a_subscription_gets_its_session_a_dict_of_its_own_and_leaves_the_others_empty() -> None:
    first, second = _session("a"), _session("b")
    sub = Subscription("t/#", 1, "0")
    first.add_subscription(sub)
    assert dict(first.subscriptions) == {"t/#": sub} and not second.subscriptions
    first.add_subscription(other := Subscription("u", 0, "0"))
    assert first.remove_subscription("t/#") is sub and dict(first.subscriptions) == {"u": other}
    assert first.remove_subscription("t/#") is None
    assert first.remove_subscription("u") is other
    assert first.subscriptions is second.subscriptions  # emptied: back to the shared one


def test_qos2_ids_are_held_per_session_and_released_once() -> None:
    first, second = _session("a"), _session("b")
    held = IncomingQos2()
    first.hold_incoming_qos2(7, held)
    assert first.incoming_qos2.get(7) is held and 7 not in second.incoming_qos2
    assert first.release_incoming_qos2(7) is held
    assert first.release_incoming_qos2(7) is None and second.release_incoming_qos2(7) is None
    assert first.incoming_qos2 is second.incoming_qos2


def test_the_shared_empty_containers_refuse_a_write_that_skips_the_methods() -> None:
    session = _session("a")
    with pytest.raises(TypeError):
        session.subscriptions["t"] = Subscription("t", 0, "0")  # type: ignore[index]
    with pytest.raises(TypeError):
        session.incoming_qos2[1] = IncomingQos2()  # type: ignore[index]


def test_a_window_gets_its_own_dict_at_its_first_message() -> None:
    first, second = InflightWindow[Outgoing](), InflightWindow[Outgoing]()
    message = Outgoing("m", "t", b"p", 1, False, "from", ("t",))
    assert first.remove(1) is None and len(first) == 0
    first.clear()
    assert first.send(message) == 1
    assert len(first) == 1 and len(second) == 0 and list(second.values()) == []
    restored = Outgoing("n", "t", b"p", 1, False, "from", ("t",), packet_id=9)
    second.restore(restored)
    assert second.get(9) is restored and first.get(9) is None


def test_a_decoder_holds_a_buffer_only_for_a_partial_packet() -> None:
    decoder = Decoder()
    assert decoder.buffered == 0
    pingreq = b"\xc0\x00"
    connect = bytes.fromhex("101000044d5154540402003c000463303031")
    assert decoder.feed(connect[:5]) == [] and decoder.buffered == 5
    assert len(decoder.feed(connect[5:] + pingreq[:1])) == 1 and decoder.buffered == 1
    assert len(decoder.feed(pingreq[1:])) == 1 and decoder.buffered == 0


def test_connections_under_the_same_limits_share_their_decoder_bounds() -> None:
    limits = Limits()
    assert decoder_bounds(limits) is decoder_bounds(Limits())
