"""The embedded broker's per-client protocol (bridge/brokers/embedded/channel.py) driven with
packets and no socket, as EMQX's emqx_channel_SUITE drives emqx_channel: every packet type a
client sends, and the CONNECT, takeover and will paths through a real Broker (its sessions,
routing and event streams; the sink records the events). What the broker writes to the client is
decoded back with the codec's client-side decoder and checked packet by packet."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.channel import RECEIVE_MAXIMUM, TOPIC_ALIAS_MAXIMUM, AckAgain, Channel, Inbound, Refusal
from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    MQTT_5,
    Auth,
    Connack,
    Connect,
    Decoder,
    Disconnect,
    PacketTooLarge,
    Pingreq,
    Pingresp,
    Properties,
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
)
from bridge.brokers.embedded.ended import Ended
from bridge.brokers.embedded.limits import Limits
from bridge.events import ClientConnected, ClientDisconnected, Event, MessagePublish
from bridge.msgid import MsgIdGenerator

R = ReasonCode


class Recorder:
    """The broker's event sink: every event it was given; nothing to keep (no rules)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


class Socketless(Channel):
    """A channel with no socket: what it writes is kept, closing it ends it as a connection
    does (the broker's teardown runs), delivering hands over whatever is queued at once."""

    def __init__(self, broker: Broker, peername: str = "10.0.0.1:5000") -> None:
        super().__init__(broker)
        self.peername = peername
        self.written = bytearray()
        self.closed_with: tuple[str, int | None] | None = None
        self.listener, self.cert_cn = "tcp", None
        self.opened = self.last_packet = 0.0
        self.inbox, self.serving, self.decoder = None, None, Decoder()
        self.not_reading = False
        self.bytes_in = self.bytes_out = 0
        self.done = Ended()
        self.seen = 0  # bytes of `written` already decoded by `received`
        broker.accept(self)  # type: ignore[arg-type]

    def write(self, data: bytes, packets: int = 1) -> None:
        if self.closed_with is None or self.closed_with[0] == "refused":
            self.written += data

    def close(self, reason: str, code: int | None = None) -> None:
        if self.reason is None:
            self.reason = reason
            self.closed_with = (reason, code)
            if self.acks is not None:
                self.acks.close()
            asyncio.get_running_loop().create_task(self.broker.teardown(self))  # type: ignore[attr-defined]

    def pump(self) -> None:
        if self.state is not None and self.connacked and self.reason is None:
            out, _ = self.deliveries(1 << 20)
            self.written += b"".join(out)

    def turn_away(self) -> None:
        self.reason = "refused"

    def finish(self) -> None:
        pass

    def received(self) -> list[Any]:
        """The packets written to the client since the last call."""
        decoder = Decoder(role="client", level=self.level or MQTT_3_1_1)
        packets = decoder.feed(bytes(self.written[self.seen :]))
        self.seen = len(self.written)
        return packets

    async def send(self, packet: Any) -> Any:
        """Hand `packet` to the channel as the connection does; what it returns goes to the
        broker as the connection's task would take it. Returns the work item."""
        item = self.handle(packet)
        broker: Any = self.broker
        if isinstance(item, Inbound):
            await broker.publish_inbound(self, [item])
        elif isinstance(item, Subscribe):
            await broker.subscribe(self, item)
        elif isinstance(item, Unsubscribe):
            await broker.unsubscribe(self, item)
        elif isinstance(item, AckAgain):
            await self.ack_when_kept(item.held.kept, item.ack)
        await settle()
        return item


async def settle() -> None:
    for _ in range(10):  # the event streams and the ack queue run on the next loop turns
        await asyncio.sleep(0)


@pytest.fixture
def sink() -> Recorder:
    return Recorder()


@pytest.fixture
def broker(sink: Recorder) -> Broker:
    return Broker(node="test", msgids=MsgIdGenerator("test"), sink=sink, limits=Limits(max_inflight=4))


async def connected(broker: Broker, clientid: str, level: int = MQTT_3_1_1, **connect: Any) -> Socketless:
    client = Socketless(broker)
    await broker.connect(client, Connect(clientid, level, **connect))  # type: ignore[arg-type]
    await settle()
    return client


# -- CONNECT -------------------------------------------------------------------------------


async def test_connect_is_answered_with_connack_and_the_session_is_attached(broker: Broker, sink: Recorder) -> None:
    client = await connected(broker, "c1")
    assert client.received() == [Connack(False, 0)]
    assert client.state is broker.states["c1"] and client.connacked and broker.active["c1"] is client
    assert [e.clientid for e in sink.of(ClientConnected)] == ["c1"]


async def test_a_5_0_connect_gets_the_brokers_limits_and_keeps_the_clients(broker: Broker) -> None:
    props = Properties(receive_maximum=2, maximum_packet_size=512)
    client = await connected(broker, "c5", MQTT_5, properties=props)
    (connack,) = client.received()
    assert connack.reason_code == 0
    assert connack.properties.receive_maximum == RECEIVE_MAXIMUM
    assert connack.properties.topic_alias_maximum == TOPIC_ALIAS_MAXIMUM
    assert client.send_window == 2 and client.client_max_packet == 512


async def test_a_3_1_1_connect_with_no_client_id_and_a_session_is_refused(broker: Broker) -> None:
    client = await connected(broker, "", clean_start=False)
    assert client.received() == [Connack(False, 2)]  # identifier rejected [MQTT-3.1.3-8]
    assert client.closed_with == ("refused", None) and client.state is None and not broker.states


async def test_a_5_0_connect_with_no_client_id_is_assigned_one(broker: Broker) -> None:
    client = await connected(broker, "", MQTT_5)
    (connack,) = client.received()
    assigned = connack.properties.assigned_client_identifier
    assert assigned and assigned.startswith("hookbridge-") and assigned in broker.states


# -- takeover and wills ----------------------------------------------------------------------


async def test_takeover_closes_the_old_channel_and_the_new_one_resumes_the_session(
    broker: Broker, sink: Recorder
) -> None:
    first = await connected(broker, "dev", MQTT_5, clean_start=False, properties=Properties(session_expiry_interval=60))
    first.received()
    second = await connected(
        broker, "dev", MQTT_5, clean_start=False, properties=Properties(session_expiry_interval=60)
    )
    assert first.closed_with == ("takeover", R.SESSION_TAKEN_OVER)
    (connack,) = second.received()
    assert connack.session_present and broker.active["dev"] is second and second.state is broker.states["dev"]
    assert [e.reason for e in sink.of(ClientDisconnected)] == ["takeover"]


async def test_the_will_is_published_when_the_connection_is_lost(broker: Broker, sink: Recorder) -> None:
    watcher = await connected(broker, "watcher")
    await watcher.send(Subscribe(1, [Subscription("status/#", 1)]))
    watcher.received()
    dying = await connected(broker, "dying", will=Will("status/dying", b"gone", 1))
    dying.close("closed")  # the socket went away without a DISCONNECT
    await settle()
    (publish,) = watcher.received()
    assert (publish.topic, publish.payload, publish.qos) == ("status/dying", b"gone", 1)
    assert [e.topic for e in sink.of(MessagePublish)] == ["status/dying"]


async def test_a_normal_disconnect_discards_the_will(broker: Broker) -> None:
    watcher = await connected(broker, "watcher")
    await watcher.send(Subscribe(1, [Subscription("status/#", 0)]))
    watcher.received()
    leaving = await connected(broker, "leaving", will=Will("status/leaving", b"gone"))
    await leaving.send(Disconnect())
    await settle()
    assert leaving.closed_with == ("normal", None) and leaving.will is None
    assert watcher.received() == []  # [MQTT-3.1.2-10]


async def test_disconnect_with_will_message_keeps_the_will(broker: Broker) -> None:
    watcher = await connected(broker, "watcher", MQTT_5)
    await watcher.send(Subscribe(1, [Subscription("status/#", 0)]))
    watcher.received()
    leaving = await connected(broker, "leaving", MQTT_5, will=Will("status/leaving", b"gone"))
    await leaving.send(Disconnect(R.DISCONNECT_WITH_WILL_MESSAGE))
    await settle()
    assert [p.topic for p in watcher.received()] == ["status/leaving"]


async def test_a_disconnect_may_not_give_an_expiry_to_a_session_that_had_none(broker: Broker) -> None:
    client = await connected(broker, "c", MQTT_5)
    await client.send(Disconnect(properties=Properties(session_expiry_interval=30)))
    assert client.closed_with == ("closed", R.PROTOCOL_ERROR)  # 5.0 3.14.2.2.2


# -- PUBLISH from the client -------------------------------------------------------------------


async def test_qos_0_publish_is_routed_with_no_answer(broker: Broker) -> None:
    reader = await connected(broker, "reader")
    await reader.send(Subscribe(1, [Subscription("t/#", 0)]))
    reader.received()
    writer = await connected(broker, "writer")
    writer.received()
    item = await writer.send(Publish("t/1", b"zero"))
    assert isinstance(item, Inbound) and item.ack is None
    assert writer.received() == []
    assert [(p.topic, p.payload) for p in reader.received()] == [("t/1", b"zero")]


async def test_qos_1_publish_is_acknowledged_once_kept(broker: Broker) -> None:
    writer = await connected(broker, "writer")
    writer.received()
    await writer.send(Publish("t/1", b"one", 1, packet_id=7))
    assert writer.received() == [Puback(7)]
    assert writer.incoming_unacked == 0  # the exchange is over with its PUBACK


async def test_qos_2_publish_pubrec_resend_and_pubrel(broker: Broker) -> None:
    writer = await connected(broker, "writer", MQTT_5)
    writer.received()
    await writer.send(Publish("t/2", b"two", 2, packet_id=9))
    assert writer.received() == [Pubrec(9)] and 9 in writer.state.incoming_qos2  # type: ignore[union-attr]
    again = await writer.send(Publish("t/2", b"two", 2, dup=True, packet_id=9))
    assert isinstance(again, AckAgain)  # the same message: acknowledged again, not passed on twice
    assert writer.received() == [Pubrec(9)]
    await writer.send(Pubrel(9))
    assert writer.received() == [Pubcomp(9)] and not writer.state.incoming_qos2  # type: ignore[union-attr]
    await writer.send(Pubrel(9))  # its id is released: PUBCOMP says so (5.0)
    assert writer.received() == [Pubcomp(9, R.PACKET_IDENTIFIER_NOT_FOUND)]


async def test_a_publish_the_acl_denies_is_acknowledged_and_not_routed(broker: Broker) -> None:
    writer = await connected(broker, "writer", MQTT_5)
    writer.received()
    item = await writer.send(Publish("$SYS/x", b"no", 1, packet_id=3))
    assert isinstance(item, Inbound) and item.refused
    assert writer.received() == [Puback(3, R.NOT_AUTHORIZED)] and broker.refused["acl_publish_denied"] == 1


async def test_topic_aliases_set_used_and_refused(broker: Broker) -> None:
    reader = await connected(broker, "reader")
    await reader.send(Subscribe(1, [Subscription("a/#", 0)]))
    reader.received()
    writer = await connected(broker, "writer", MQTT_5)
    await writer.send(Publish("a/long/topic", b"1", properties=Properties(topic_alias=3)))
    await writer.send(Publish("", b"2", properties=Properties(topic_alias=3)))
    assert [(p.topic, p.payload) for p in reader.received()] == [("a/long/topic", b"1"), ("a/long/topic", b"2")]
    await writer.send(Publish("", b"3", properties=Properties(topic_alias=5)))
    assert writer.closed_with == ("closed", R.PROTOCOL_ERROR)


async def test_a_topic_alias_over_the_maximum_closes(broker: Broker) -> None:
    writer = await connected(broker, "writer", MQTT_5)
    await writer.send(Publish("a", b"1", properties=Properties(topic_alias=TOPIC_ALIAS_MAXIMUM + 1)))
    assert writer.closed_with == ("closed", R.TOPIC_ALIAS_INVALID)


async def test_over_the_receive_maximum_is_a_refusal(broker: Broker) -> None:
    writer = await connected(broker, "writer", MQTT_5)
    for packet_id in range(1, RECEIVE_MAXIMUM + 1):
        assert isinstance(writer.handle(Publish("t", b"", 1, packet_id=packet_id)), Inbound)
    refusal = writer.handle(Publish("t", b"", 1, packet_id=RECEIVE_MAXIMUM + 1))
    assert isinstance(refusal, Refusal) and refusal.code == R.RECEIVE_MAXIMUM_EXCEEDED
    assert broker.refused["receive_maximum"] == 1


# -- SUBSCRIBE, UNSUBSCRIBE and messages to the client -------------------------------------------


async def test_subscribe_and_unsubscribe_are_answered(broker: Broker) -> None:
    client = await connected(broker, "c", MQTT_5)
    client.received()
    await client.send(Subscribe(4, [Subscription("a/+", 1), Subscription("a/#/b", 0)]))
    assert client.received() == [Suback(4, [1, 0x80])]  # an invalid filter: a failure code
    await client.send(Unsubscribe(5, ["a/+", "never"]))
    assert client.received() == [Unsuback(5, [R.SUCCESS, R.NO_SUBSCRIPTION_EXISTED])]
    assert not client.state.subscriptions  # type: ignore[union-attr]


async def test_qos_1_delivery_waits_in_the_window_until_puback(broker: Broker) -> None:
    reader = await connected(broker, "reader")
    await reader.send(Subscribe(1, [Subscription("t", 1)]))
    reader.received()
    writer = await connected(broker, "writer")
    for n in range(6):
        await writer.send(Publish("t", b"%d" % n, 1, packet_id=n + 1))
    sent = reader.received()
    assert [p.payload for p in sent] == [b"0", b"1", b"2", b"3"]  # max_inflight 4
    assert len(reader.state.inflight) == 4  # type: ignore[union-attr]
    await reader.send(Puback(sent[0].packet_id))
    assert [p.payload for p in reader.received()] == [b"4"]  # one acknowledged: one more goes


async def test_qos_2_delivery_pubrec_pubrel_pubcomp(broker: Broker) -> None:
    reader = await connected(broker, "reader")
    await reader.send(Subscribe(1, [Subscription("t", 2)]))
    reader.received()
    writer = await connected(broker, "writer")
    await writer.send(Publish("t", b"x", 2, packet_id=1))
    (publish,) = reader.received()
    await reader.send(Pubrec(publish.packet_id))
    assert reader.received() == [Pubrel(publish.packet_id)]
    assert reader.state.inflight.get(publish.packet_id).pubrec  # type: ignore[union-attr]
    await reader.send(Pubcomp(publish.packet_id))
    assert len(reader.state.inflight) == 0  # type: ignore[union-attr]


async def test_a_reconnect_resends_what_was_in_flight_with_dup(broker: Broker) -> None:
    reader = await connected(broker, "reader", clean_start=False)
    await reader.send(Subscribe(1, [Subscription("t", 1)]))
    writer = await connected(broker, "writer")
    await writer.send(Publish("t", b"x", 1, packet_id=1))
    reader.close("closed")
    await settle()
    back = await connected(broker, "reader", clean_start=False)
    connack, publish = back.received()
    assert connack.session_present and publish.dup and publish.payload == b"x"  # [MQTT-4.4.0-1]


# -- the rest ----------------------------------------------------------------------------------


async def test_pingreq_is_answered(broker: Broker) -> None:
    client = await connected(broker, "c")
    client.received()
    await client.send(Pingreq())
    assert client.received() == [Pingresp()]


async def test_auth_is_not_offered(broker: Broker) -> None:
    client = await connected(broker, "c", MQTT_5)
    await client.send(Auth())
    assert client.closed_with == ("closed", R.PROTOCOL_ERROR)


async def test_a_packet_the_decoder_refused_is_counted_and_closes(broker: Broker) -> None:
    client = await connected(broker, "c", MQTT_5)
    client.received()
    client.refuse_bad_packet(PacketTooLarge("too large"))
    assert broker.refused["packet_too_large"] == 1
    assert client.closed_with == ("closed", R.PACKET_TOO_LARGE)  # after CONNACK: a 5.0 DISCONNECT says why


async def test_a_refused_5_0_connect_is_answered_with_a_connack_saying_why(broker: Broker) -> None:
    client = Socketless(broker)
    error = PacketTooLarge("too large")
    error.level = MQTT_5  # the CONNECT named 5.0 before it was refused
    client.refuse_bad_packet(error)
    assert client.received() == [Connack(False, R.PACKET_TOO_LARGE)] and client.closed_with == ("refused", None)
