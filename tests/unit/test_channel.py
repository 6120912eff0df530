"""The embedded broker's per-client protocol (bridge/brokers/embedded/channel.py) driven with
packets and no socket, as EMQX's emqx_channel_SUITE drives emqx_channel: every packet type a
client sends, and the CONNECT, takeover and will paths through a real Broker (its sessions,
routing and event streams; the sink records the events). What the broker writes to the client is
decoded back with the codec's client-side decoder and checked packet by packet."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from bridge.brokers.embedded.aftercommit import Commit
from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.channel import RECEIVE_MAXIMUM, TOPIC_ALIAS_MAXIMUM, AckAgain, Channel, Refusal
from bridge.brokers.embedded.client import Inbound, Peer
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
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.wire import Hangup
from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    Event,
    Hookpoint,
    MessageAcked,
    MessageDelivered,
    MessagePublish,
)
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


class Socketless:
    """A client with no socket: its `Channel` and, as the channel's `Wire`, a recorder of what
    it writes. Hanging up ends it as a connection does (the broker's teardown runs); pumping
    hands over whatever the session has queued, in the next loop turn as a connection does."""

    opened = last_packet = 0.0
    not_reading = busy = False

    def __init__(self, broker: Broker, peername: str = "10.0.0.1:5000") -> None:
        self.broker = broker
        self.channel = Channel(broker, self, Peer(peername, "tcp"))
        self.written = bytearray()
        self.hung_up: Hangup | None = None
        self.seen = 0  # bytes of `written` already decoded by `received`
        assert broker.accept(self.channel)

    # -- the Wire --------------------------------------------------------------------------

    def write(self, data: bytes, packets: int = 1) -> None:
        if self.hung_up is None:
            self.written += data

    def write_ordered(self, data: bytes, packets: int, commit: Commit | None) -> None:
        self.write(data, packets)  # no durable store here: nothing waits

    def hang_up(self, how: Hangup) -> None:
        self.hung_up = how
        asyncio.get_running_loop().create_task(self.broker.teardown(self.channel))

    def pump(self) -> None:
        asyncio.get_running_loop().call_soon(self._deliver)

    def pump_now(self, first: bytes) -> None:
        self.write(first)
        self._deliver()

    def _deliver(self) -> None:
        channel = self.channel
        if channel.state is not None and channel.reason is None:
            out, _, _ = channel.deliveries(1 << 20)
            self.written += b"".join(out)

    def abandon(self) -> None:
        pass

    # -- driving it ------------------------------------------------------------------------

    @property
    def closed_with(self) -> tuple[str, Hangup] | None:
        """Why the channel ended and how the socket was told to end."""
        reason = self.channel.reason
        return None if reason is None or self.hung_up is None else (reason, self.hung_up)

    def received(self) -> list[Any]:
        """The packets written to the client since the last call."""
        decoder = Decoder(role="client", level=self.channel.level or MQTT_3_1_1)
        packets = decoder.feed(bytes(self.written[self.seen :]))
        self.seen = len(self.written)
        return packets

    async def send(self, packet: Any) -> Any:
        """Hand `packet` to the channel as the connection does; what it returns goes to the
        broker as the connection's task would take it. Returns the work item."""
        channel = self.channel
        if isinstance(packet, Connect):
            channel.speaks(packet.protocol_level)
            await self.broker.connect(channel, packet)
            await settle()
            return packet
        item = channel.handle(packet)
        broker = self.broker
        if isinstance(item, Inbound):
            await broker.publish_inbound(channel, [item])
        elif isinstance(item, Subscribe):
            await broker.subscribe(channel, item)
        elif isinstance(item, Unsubscribe):
            await broker.unsubscribe(channel, item)
        elif isinstance(item, AckAgain):
            await channel.ack_when_kept(item.held.kept, item.ack)
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
    await client.send(Connect(clientid, level, **connect))
    return client


# -- CONNECT -------------------------------------------------------------------------------


async def test_connect_is_answered_with_connack_and_the_session_is_attached(broker: Broker, sink: Recorder) -> None:
    client = await connected(broker, "c1")
    assert client.received() == [Connack(False, 0)]
    assert (
        client.channel.state is broker.states["c1"]
        and client.channel.connacked
        and broker.active["c1"] is client.channel
    )
    assert [e.clientid for e in sink.of(ClientConnected)] == ["c1"]


async def test_a_5_0_connect_gets_the_brokers_limits_and_keeps_the_clients(broker: Broker) -> None:
    props = Properties(receive_maximum=2, maximum_packet_size=512)
    client = await connected(broker, "c5", MQTT_5, properties=props)
    (connack,) = client.received()
    assert connack.reason_code == 0
    assert connack.properties.receive_maximum == RECEIVE_MAXIMUM
    assert connack.properties.topic_alias_maximum == TOPIC_ALIAS_MAXIMUM
    assert client.channel.send_window == 2 and client.channel.client_max_packet == 512


async def test_a_3_1_1_connect_with_no_client_id_and_a_session_is_refused(broker: Broker) -> None:
    client = await connected(broker, "", clean_start=False)
    assert client.received() == [Connack(False, 2)]  # identifier rejected [MQTT-3.1.3-8]
    assert client.closed_with == ("refused", Hangup.FLUSH) and client.channel.state is None and not broker.states


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
    assert first.closed_with == ("takeover", Hangup.LINGER)  # after its DISCONNECT, read by the client
    assert first.received() == [Disconnect(R.SESSION_TAKEN_OVER)]
    (connack,) = second.received()
    assert (
        connack.session_present
        and broker.active["dev"] is second.channel
        and second.channel.state is broker.states["dev"]
    )
    assert [e.reason for e in sink.of(ClientDisconnected)] == ["takeover"]


async def test_the_will_is_published_when_the_connection_is_lost(broker: Broker, sink: Recorder) -> None:
    watcher = await connected(broker, "watcher")
    await watcher.send(Subscribe(1, [Subscription("status/#", 1)]))
    watcher.received()
    dying = await connected(broker, "dying", will=Will("status/dying", b"gone", 1))
    dying.channel.close("closed")  # the socket went away without a DISCONNECT
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
    assert leaving.closed_with == ("normal", Hangup.LINGER) and leaving.channel.will is None
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
    client.received()
    await client.send(Disconnect(properties=Properties(session_expiry_interval=30)))
    assert client.closed_with == ("closed", Hangup.LINGER)
    assert client.received() == [Disconnect(R.PROTOCOL_ERROR)]  # 5.0 3.14.2.2.2


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
    assert writer.channel.incoming_unacked == 0  # the exchange is over with its PUBACK


async def test_qos_2_publish_pubrec_resend_and_pubrel(broker: Broker) -> None:
    writer = await connected(broker, "writer", MQTT_5)
    writer.received()
    await writer.send(Publish("t/2", b"two", 2, packet_id=9))
    assert writer.received() == [Pubrec(9)] and 9 in writer.channel.state.incoming_qos2  # type: ignore[union-attr]
    again = await writer.send(Publish("t/2", b"two", 2, dup=True, packet_id=9))
    assert isinstance(again, AckAgain)  # the same message: acknowledged again, not passed on twice
    assert writer.received() == [Pubrec(9)]
    await writer.send(Pubrel(9))
    assert writer.received() == [Pubcomp(9)] and not writer.channel.state.incoming_qos2  # type: ignore[union-attr]
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
    writer.received()
    await writer.send(Publish("", b"3", properties=Properties(topic_alias=5)))
    assert writer.closed_with == ("closed", Hangup.LINGER) and writer.received() == [Disconnect(R.PROTOCOL_ERROR)]


async def test_a_topic_alias_over_the_maximum_closes(broker: Broker) -> None:
    writer = await connected(broker, "writer", MQTT_5)
    writer.received()
    await writer.send(Publish("a", b"1", properties=Properties(topic_alias=TOPIC_ALIAS_MAXIMUM + 1)))
    assert writer.closed_with == ("closed", Hangup.LINGER) and writer.received() == [Disconnect(R.TOPIC_ALIAS_INVALID)]


async def test_over_the_receive_maximum_is_a_refusal(broker: Broker) -> None:
    writer = await connected(broker, "writer", MQTT_5)
    for packet_id in range(1, RECEIVE_MAXIMUM + 1):
        assert isinstance(writer.channel.handle(Publish("t", b"", 1, packet_id=packet_id)), Inbound)
    refusal = writer.channel.handle(Publish("t", b"", 1, packet_id=RECEIVE_MAXIMUM + 1))
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
    assert not client.channel.state.subscriptions  # type: ignore[union-attr]


async def test_qos_1_delivery_waits_in_the_window_until_puback(broker: Broker) -> None:
    reader = await connected(broker, "reader")
    await reader.send(Subscribe(1, [Subscription("t", 1)]))
    reader.received()
    writer = await connected(broker, "writer")
    for n in range(6):
        await writer.send(Publish("t", b"%d" % n, 1, packet_id=n + 1))
    sent = reader.received()
    assert [p.payload for p in sent] == [b"0", b"1", b"2", b"3"]  # max_inflight 4
    assert len(reader.channel.state.inflight) == 4  # type: ignore[union-attr]
    await reader.send(Puback(sent[0].packet_id))
    assert [p.payload for p in reader.received()] == [b"4"]  # one acknowledged: one more goes


async def delivered(broker: Broker, qos: int, level: int = MQTT_3_1_1) -> tuple[Socketless, Any]:
    """A reader subscribed to "t" at QoS 2 and the PUBLISH it got of one message published at `qos`."""
    reader = await connected(broker, "reader", level)
    await reader.send(Subscribe(1, [Subscription("t", 2)]))
    reader.received()
    writer = await connected(broker, "writer")
    await writer.send(Publish("t", b"x", qos, packet_id=1))
    (publish,) = reader.received()
    return reader, publish


async def test_qos_2_delivery_pubrec_pubrel_pubcomp(broker: Broker) -> None:
    reader, publish = await delivered(broker, 2)
    await reader.send(Pubrec(publish.packet_id))
    assert reader.received() == [Pubrel(publish.packet_id)]
    assert reader.channel.state.inflight.get(publish.packet_id).pubrec  # type: ignore[union-attr]
    await reader.send(Pubcomp(publish.packet_id))
    assert len(reader.channel.state.inflight) == 0  # type: ignore[union-attr]


async def test_pubrec_and_pubcomp_of_no_qos_2_exchange_leave_a_qos_1_message_in_flight(broker: Broker) -> None:
    """A PUBREC or PUBCOMP under the packet id of a QoS 1 message in flight (a client answering
    an exchange it still holds from before a restart, MQTT 4.3.3) ends nothing: the message stays
    in flight until its PUBACK. Before, a PUBCOMP took any message out of the window."""
    reader, publish = await delivered(broker, 1, MQTT_5)
    assert publish.qos == 1
    await reader.send(Pubrec(publish.packet_id))
    assert reader.received() == [Pubrel(publish.packet_id, R.PACKET_IDENTIFIER_NOT_FOUND)]
    await reader.send(Pubcomp(publish.packet_id))
    window = reader.channel.state.inflight  # type: ignore[union-attr]
    assert publish.packet_id in window and not window.get(publish.packet_id).pubrec  # type: ignore[union-attr]
    await reader.send(Puback(publish.packet_id))
    assert len(window) == 0


async def test_a_pubcomp_before_the_pubrec_does_not_end_a_qos_2_delivery(broker: Broker) -> None:
    reader, publish = await delivered(broker, 2)
    await reader.send(Pubcomp(publish.packet_id))  # no PUBREC yet: the client cannot have it
    assert publish.packet_id in reader.channel.state.inflight  # type: ignore[union-attr]


async def test_a_reconnect_resends_what_was_in_flight_with_dup(broker: Broker) -> None:
    reader = await connected(broker, "reader", clean_start=False)
    await reader.send(Subscribe(1, [Subscription("t", 1)]))
    writer = await connected(broker, "writer")
    await writer.send(Publish("t", b"x", 1, packet_id=1))
    reader.channel.close("closed")
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
    client.received()
    await client.send(Auth())
    assert client.closed_with == ("closed", Hangup.LINGER) and client.received() == [Disconnect(R.PROTOCOL_ERROR)]


async def test_a_packet_the_decoder_refused_is_counted_and_closes(broker: Broker) -> None:
    client = await connected(broker, "c", MQTT_5)
    client.received()
    client.channel.refuse_bad_packet(PacketTooLarge("too large"))
    assert broker.refused["packet_too_large"] == 1
    assert client.closed_with == ("closed", Hangup.LINGER)
    assert client.received() == [Disconnect(R.PACKET_TOO_LARGE)]  # after CONNACK: a 5.0 DISCONNECT says why


async def test_a_refused_5_0_connect_is_answered_with_a_connack_saying_why(broker: Broker) -> None:
    client = Socketless(broker)
    error = PacketTooLarge("too large")
    error.level = MQTT_5  # the CONNECT named 5.0 before it was refused
    client.channel.refuse_bad_packet(error)
    assert client.received() == [Connack(False, R.PACKET_TOO_LARGE)] and client.closed_with == ("refused", Hangup.FLUSH)


# -- events nothing wants --------------------------------------------------------------------


class Choosy(Recorder):
    """A sink that, as the dispatcher does, says which events it wants (a pure question) and is
    told of every event the broker skipped for it (counted as the dispatcher's events)."""

    def __init__(self, wanted: set[Hookpoint]) -> None:
        super().__init__()
        self.wanted = wanted
        self.skips: Counter[Hookpoint] = Counter()

    def wants(self, hookpoint: Hookpoint, clientid: str, topic: str | None = None) -> bool:
        return hookpoint in self.wanted

    def skipped(self, hookpoint: Hookpoint) -> None:
        self.skips[hookpoint] += 1


async def test_an_event_nothing_wants_is_not_posted_and_is_counted_as_skipped() -> None:
    sink = Choosy({Hookpoint.CLIENT_CONNECTED, Hookpoint.SESSION_SUBSCRIBED})
    broker = Broker(node="test", msgids=MsgIdGenerator("test"), sink=sink, limits=Limits())
    reader = await connected(broker, "reader")
    await reader.send(Subscribe(1, [Subscription("t", 1)]))
    reader.received()
    writer = await connected(broker, "writer")
    writer.received()
    await writer.send(Publish("t", b"x", 1, packet_id=5))
    assert writer.received() == [Puback(5)]  # acknowledged all the same
    (publish,) = reader.received()
    await reader.send(Puback(publish.packet_id))
    # message.publish (flows.py), message.delivered (the delivery), message.acked (the PUBACK):
    # none built or posted, each counted once.
    assert sink.of(MessagePublish) == [] and sink.of(MessageDelivered) == [] and sink.of(MessageAcked) == []
    assert sink.skips == {Hookpoint.MESSAGE_PUBLISH: 1, Hookpoint.MESSAGE_DELIVERED: 1, Hookpoint.MESSAGE_ACKED: 1}


@pytest.mark.parametrize("wanted", [False, True])
async def test_connect_and_disconnect_events_are_posted_only_when_wanted(wanted: bool) -> None:
    """A fleet reconnecting at once posts no client.connected / client.disconnected that no rule
    takes (Broker.connect, Broker.teardown): each is counted as skipped; a wanted one is posted."""
    hookpoints = {Hookpoint.CLIENT_CONNECTED, Hookpoint.CLIENT_DISCONNECTED}
    sink = Choosy(hookpoints if wanted else set())
    broker = Broker(node="test", msgids=MsgIdGenerator("test"), sink=sink, limits=Limits())
    client = await connected(broker, "quiet")
    assert client.received() == [Connack(False, 0)]
    await client.send(Disconnect())
    await settle()
    posted = [(type(e), e.clientid) for e in sink.events]
    if wanted:
        assert posted == [(ClientConnected, "quiet"), (ClientDisconnected, "quiet")] and not sink.skips
    else:
        assert posted == [] and sink.skips == dict.fromkeys(hookpoints, 1)


# -- deadlines (the broker's wheel asks the channel, with the socket's clock facts) -----------


async def test_no_connect_within_the_connect_timeout_closes(broker: Broker) -> None:
    client = Socketless(broker)
    assert client.channel.check_deadline(5.0, 10.0) == 10.0  # not yet: look again at its deadline
    client.busy = True  # a CONNECT read and being decided: not closed for the time it takes
    assert client.channel.check_deadline(11.0, 10.0) == 11.0
    client.busy = False
    assert client.channel.check_deadline(11.0, 10.0) is None
    assert client.closed_with == ("connect_timeout", Hangup.ABORT) and broker.refused["connect_timeout"] == 1


async def test_keepalive_closes_a_client_silent_for_one_and_a_half_times_it(broker: Broker) -> None:
    client = await connected(broker, "c", MQTT_5, keepalive=10)
    client.received()
    channel = client.channel
    assert channel.keepalive_limit == 15.0 and channel.watched_keepalive
    client.last_packet = 100.0
    assert channel.check_deadline(110.0, 10.0) == 115.0  # within it: looked at again when it falls due
    client.not_reading = True  # reading paused (its output unread): the time does not count
    assert channel.check_deadline(120.0, 10.0) == 135.0
    client.not_reading = False
    assert channel.check_deadline(120.0, 10.0) is None
    assert client.closed_with == ("keepalive_timeout", Hangup.LINGER)
    assert client.received() == [Disconnect(R.KEEP_ALIVE_TIMEOUT)] and broker.refused["keepalive_timeout"] == 1
