"""The embedded broker over real TCP: MQTT 3.1.1 behaviour and the events it fires.

Each test names the amqtt 0.12.1 shortcoming it guards against where there is one.
Negative checks ("nothing else arrived") publish a marker afterwards and assert
that the marker is the next thing the client gets: deliveries to one subscriber
go out in publish order, so anything sent in between would come first.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from bridge.brokers.base import Delivery, DeliveryError
from bridge.brokers.embedded import EmbeddedBroker
from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    Subscription,
    Will,
)
from bridge.brokers.embedded.codec.encoder import encode
from bridge.brokers.embedded.limits import Limits
from bridge.conf import registry
from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    MessageAcked,
    MessageDelivered,
    MessagePublish,
    SessionSubscribed,
    SessionUnsubscribed,
)
from bridge.functions import Capability
from bridge.msgid import MsgIdGenerator
from support.mqtt import Client
from support.raw import RawClient
from support.sink import TIMEOUT, RecordingSink

NODE = "test@127.0.0.1"


@dataclass
class Env:
    broker: EmbeddedBroker
    sink: RecordingSink
    make_paho: Callable[..., Client]
    make_raw: Callable[..., Awaitable[tuple[RawClient, Any]]]

    @property
    def port(self) -> int:
        return self.broker.port

    async def client(self, client_id: str, *, expect_present: bool | None = None, **kwargs: Any) -> Client:
        """A connected paho client (connect keyword arguments: keepalive, will)."""
        connect_args = {k: kwargs.pop(k) for k in ("keepalive", "will") if k in kwargs}
        client = self.make_paho(self.port, client_id, **kwargs)
        connack = await client.connect(**connect_args)
        assert connack.reason == 0
        if expect_present is not None:
            assert connack.session_present is expect_present
        return client

    async def raw(self, client_id: str, **kwargs: Any) -> RawClient:
        client, connack = await self.make_raw(self.port, client_id, **kwargs)
        assert connack.reason_code == 0
        return client


@pytest.fixture
async def start_broker() -> AsyncIterator[Callable[..., Awaitable[tuple[EmbeddedBroker, RecordingSink]]]]:
    started: list[EmbeddedBroker] = []

    async def start(**kwargs: Any) -> tuple[EmbeddedBroker, RecordingSink]:
        sink = RecordingSink()
        broker = EmbeddedBroker("127.0.0.1:0", node=NODE, msgids=MsgIdGenerator(NODE), **kwargs)
        await broker.start(sink)
        started.append(broker)
        return broker, sink

    yield start
    for broker in started:
        await broker.stop()


@pytest.fixture
async def env(
    start_broker: Callable[..., Awaitable[tuple[EmbeddedBroker, RecordingSink]]],
    paho_clients: Callable[..., Client],
    raw_connect: Callable[..., Awaitable[tuple[RawClient, Any]]],
) -> Env:
    broker, sink = await start_broker()
    return Env(broker, sink, paho_clients, raw_connect)


async def publish_marker(env: Env, topic: str, *receivers: Client) -> None:
    """Publish a marker and assert it is the next message each receiver gets."""
    sender = await env.client(f"marker-{topic}")
    await sender.publish(topic, b"marker", 1)
    for receiver in receivers:
        message = await receiver.message()
        assert (message.topic, message.payload) == (topic, b"marker")


# -- events of a full QoS 1 / QoS 2 flow ---------------------------------------------


@pytest.mark.parametrize("qos", [1, 2])
async def test_publish_delivered_acked_events(env: Env, qos: int) -> None:
    assert env.broker.mode == "embedded"
    assert registry.modes()[env.broker.mode].capabilities == {Capability.PROXY_SUBSCRIBE, Capability.DELIVER_TO_SESSION}
    assert env.broker.is_connected()
    sub = await env.client("sub1", username="alice")
    sub_port = sub.paho.socket().getsockname()[1]
    assert await sub.subscribe("t/1", qos) == [qos]
    pub = await env.client("pub1")
    pub_port = pub.paho.socket().getsockname()[1]
    await pub.publish("t/1", b"\x00\xffpayload", qos)

    message = await sub.message()
    assert (message.topic, message.payload, message.qos, message.retain) == ("t/1", b"\x00\xffpayload", qos, False)
    await env.sink.wait_for(MessageAcked, clientid="sub1")
    await sub.disconnect()
    await pub.disconnect()
    await env.sink.wait_for(ClientDisconnected, clientid="sub1")
    await env.sink.wait_for(ClientDisconnected, clientid="pub1")

    assert env.sink.kinds("sub1") == [
        "ClientConnected",
        "SessionSubscribed",
        "MessageDelivered",
        "MessageAcked",
        "ClientDisconnected",
    ]
    assert env.sink.kinds("pub1") == ["ClientConnected", "MessagePublish", "ClientDisconnected"]
    connected, subscribed, delivered, acked, disconnected = env.sink.find(clientid="sub1")
    assert connected == ClientConnected(
        clientid="sub1",
        username="alice",
        node=NODE,
        peername=f"127.0.0.1:{sub_port}",
        timestamp=connected.timestamp,
        clean_session=True,
    )
    assert (subscribed.topic, subscribed.qos, subscribed.is_new, subscribed.persistent) == ("t/1", qos, True, False)
    assert subscribed.retained_sent == frozenset()
    (publish,) = env.sink.find(MessagePublish)
    assert publish == MessagePublish(
        msgid=publish.msgid,
        clientid="pub1",
        username=None,
        topic="t/1",
        qos=qos,
        payload=b"\x00\xffpayload",
        retain=False,
        node=NODE,
        peername=f"127.0.0.1:{pub_port}",
        timestamp=publish.timestamp,
    )
    assert subscribed.live_from_msgid is not None
    assert subscribed.live_from_msgid < publish.msgid
    for event in (delivered, acked):
        assert (event.msgid, event.clientid, event.username, event.from_clientid) == (
            publish.msgid,
            "sub1",
            "alice",
            "pub1",
        )
        assert (event.topic, event.qos, event.payload, event.retain) == ("t/1", qos, b"\x00\xffpayload", False)
        assert (event.filters, event.node) == (("t/1",), NODE)
    assert connected.timestamp <= delivered.timestamp <= acked.timestamp <= disconnected.timestamp
    assert disconnected.reason == "normal"
    assert disconnected.peername == f"127.0.0.1:{sub_port}"


async def test_unsubscribe_fires_event_and_stops_delivery(env: Env) -> None:
    sub = await env.client("unsub1")
    await sub.subscribe([("u/a", 1), ("u/b", 1)])
    await sub.unsubscribe(["u/a", "never/subscribed"])
    sender = await env.client("unsub-pub")
    await sender.publish("u/a", b"gone", 1)
    await publish_marker(env, "u/b", sub)
    unsubscribed = env.sink.find(SessionUnsubscribed, clientid="unsub1")
    assert [e.topic for e in unsubscribed] == ["u/a", "never/subscribed"]
    assert env.sink.find(MessageDelivered, clientid="unsub1", topic="u/a") == []


# -- sessions ---------------------------------------------------------------------------


async def test_anonymous_persistent_session_gets_offline_messages_in_order(env: Env) -> None:
    """amqtt does not queue for anonymous sessions, and replays them with retain=1."""
    sub = await env.client("off1", clean=False, expect_present=False)
    # QoS 1 subscription: paho hands a QoS 2 message to the application only on
    # PUBREL, which would reorder what the test sees (not what the broker sent).
    assert await sub.subscribe("q/#", 1) == [1]
    await sub.disconnect()

    pub = await env.client("offpub")
    sent = []
    for i in range(200):
        # delivered at min(publish, subscription) QoS; retained or not, a
        # queued message goes out with retain 0
        await pub.publish("q/a", str(i).encode(), 1 if i % 2 else 2, retain=i % 50 == 0)
        sent.append((str(i).encode(), 1))
        if i % 40 == 0:
            await pub.publish("q/zero", b"qos0 is not queued", 0)
    await env.sink.wait_for(MessagePublish, clientid="offpub", count=205)

    sub = await env.client("off1", clean=False, expect_present=True)
    received = [await sub.message() for _ in range(200)]
    assert [(m.payload, m.qos) for m in received] == sent
    assert not any(m.retain or m.dup for m in received)
    await publish_marker(env, "q/end", sub)  # no QoS 0 message, no retained copy

    published = [e.msgid for e in env.sink.find(MessagePublish, clientid="offpub", topic="q/a")]
    await env.sink.wait_for(MessageAcked, clientid="off1", count=201)
    delivered = [e.msgid for e in env.sink.find(MessageDelivered, clientid="off1", topic="q/a")]
    acked = [e.msgid for e in env.sink.find(MessageAcked, clientid="off1", topic="q/a")]
    assert delivered == published
    assert sorted(acked) == published
    assert all(e.filters == ("q/#",) and not e.retain for e in env.sink.find(MessageDelivered, clientid="off1"))


def data_segments_received(sock: socket.socket) -> int:
    """Linux's count of TCP segments with data this socket received (tcp_info.tcpi_data_segs_in,
    at byte 152 of struct tcp_info since Linux 4.6): each write of the broker is one."""
    return int(struct.unpack_from("I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), 152)[0])


async def test_a_resumed_sessions_queue_goes_out_in_the_connacks_write(env: Env) -> None:
    """The CONNACK and the queue's first turn leave in one write (Channel.attach,
    Connection.pump_now): a fleet reconnecting at once costs the broker one write per device and
    each device one read, not two. Counted as TCP segments at the client, the CONNACK first."""
    sub = await env.raw("joined", clean_session=False)
    await sub.send(Subscribe(1, [Subscription("j/t", 1)]))
    await sub.recv()  # SUBACK
    await sub.send(Disconnect())
    pub = await env.client("joined-pub")
    for n in range(3):
        await pub.publish("j/t", b"m%d" % n, 1)
    await env.sink.wait_for(MessagePublish, clientid="joined-pub", count=3)

    again = await RawClient.open(env.port)
    await again.send(Connect("joined", MQTT_3_1_1, False, 60))
    packets = [await again.recv() for _ in range(4)]
    assert [type(p) for p in packets] == [Connack, Publish, Publish, Publish]
    assert packets[0].session_present and [p.payload for p in packets[1:]] == [b"m0", b"m1", b"m2"]
    assert data_segments_received(again.sock) == 1


async def test_session_present_and_clean_session_discards(env: Env) -> None:
    client = await env.client("sp", clean=False, expect_present=False)
    await client.subscribe("sp/t", 1)
    await client.disconnect()
    client = await env.client("sp", clean=False, expect_present=True)
    await client.subscribe("sp/t", 2)  # the resumed session has it: replaced, not new
    await client.disconnect()
    client = await env.client("sp", clean=True, expect_present=False)
    await client.disconnect()
    client = await env.client("sp", clean=False, expect_present=False)
    sender = await env.client("sp-pub")
    await sender.publish("sp/t", b"no longer subscribed", 1)
    await client.subscribe("sp/other", 1)
    await publish_marker(env, "sp/other", client)
    subscribed = [(e.topic, e.qos, e.is_new, e.persistent) for e in env.sink.find(SessionSubscribed, clientid="sp")]
    assert subscribed == [("sp/t", 1, True, True), ("sp/t", 2, False, True), ("sp/other", 1, True, True)]
    assert env.broker.dropped_messages == 0


async def test_zero_length_client_id(env: Env) -> None:
    client = await env.client("")
    connected = await env.sink.wait_for(ClientConnected)
    assert connected.clientid
    assert connected.clean_session is True
    await client.disconnect()

    raw, connack = await env.make_raw(env.port, "", clean_session=False)
    assert (connack.reason_code, connack.session_present) == (0x02, False)
    assert await raw.recv() is None  # closed by the broker
    assert len(env.sink.find(ClientConnected)) == 1


async def test_takeover_closes_first_connection(env: Env) -> None:
    first = await env.client("tk", clean=False)
    await first.subscribe("tk/t", 1)
    second = await env.client("tk", clean=False, expect_present=True)
    async with asyncio.timeout(5):
        await first.wait_disconnected()
    await env.sink.wait_for(ClientConnected, clientid="tk", count=2)
    assert env.sink.kinds("tk") == ["ClientConnected", "SessionSubscribed", "ClientDisconnected", "ClientConnected"]
    assert env.sink.find(ClientDisconnected, clientid="tk")[0].reason == "takeover"
    await publish_marker(env, "tk/t", second)


async def test_offline_queue_is_bounded_oldest_dropped(
    start_broker: Callable[..., Awaitable[tuple[EmbeddedBroker, RecordingSink]]],
    paho_clients: Callable[..., Client],
    raw_connect: Callable[..., Awaitable[tuple[RawClient, Any]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker, sink = await start_broker(limits=Limits(max_offline_messages=5))
    env = Env(broker, sink, paho_clients, raw_connect)
    sub = await env.client("ob", clean=False)
    await sub.subscribe("ob/t", 1)
    await sub.disconnect()
    watcher = await env.client("ob-watch")
    await watcher.subscribe("ob/t", 1)
    pub = await env.client("ob-pub")
    with caplog.at_level(logging.WARNING, logger="bridge.brokers.embedded"):
        for i in range(8):
            await pub.publish("ob/t", str(i).encode(), 1)
        # routed in publish order, to every subscriber at once: once the watcher
        # has the last one, the offline queue has had all eight
        assert [(await watcher.message()).payload for _ in range(8)][-1] == b"7"
    assert "message queue of client 'ob' is full (5 messages): dropped the oldest, 1 dropped so far" in caplog.text
    assert broker.dropped_messages == 3
    sub = await env.client("ob", clean=False, expect_present=True)
    assert [(await sub.message()).payload for _ in range(5)] == [b"3", b"4", b"5", b"6", b"7"]
    await publish_marker(env, "ob/t", sub)


async def test_max_offline_messages_0_keeps_every_message(
    start_broker: Callable[..., Awaitable[tuple[EmbeddedBroker, RecordingSink]]],
    paho_clients: Callable[..., Client],
    raw_connect: Callable[..., Awaitable[tuple[RawClient, Any]]],
) -> None:
    """0 means no count limit (as Mosquitto's max_queued_messages 0 and docs/brokers.md#limits), not "keep none"."""
    broker, sink = await start_broker(limits=Limits(max_offline_messages=0))
    env = Env(broker, sink, paho_clients, raw_connect)
    sub = await env.client("ol", clean=False)
    await sub.subscribe("ol/t", 1)
    await sub.disconnect()
    watcher = await env.client("ol-watch")
    await watcher.subscribe("ol/t", 1)
    pub = await env.client("ol-pub")
    for i in range(50):
        await pub.publish("ol/t", str(i).encode(), 1)
    assert [(await watcher.message()).payload for _ in range(50)][-1] == b"49"
    assert broker.dropped_messages == 0
    sub = await env.client("ol", clean=False, expect_present=True)
    assert [(await sub.message()).payload for _ in range(50)] == [str(i).encode() for i in range(50)]


async def test_message_published_before_a_subscription_is_not_routed_to_it(env: Env) -> None:
    """live_from: a fetch stops before it, live routing starts at it; nothing twice, nothing lost."""
    plain, retaining = await env.client("lf-pub1"), await env.client("lf-pub2")
    holds = [env.sink.hold(MessagePublish, topic="lf/x"), env.sink.hold(MessagePublish, topic="lf/r")]
    # Both get their message id, then wait in the sink (back-pressure) before routing;
    # their PUBACKs wait too (the broker acks once the bridge has the message).
    acks = [plain.send("lf/x", b"before", 1), retaining.send("lf/r", b"retained before", 1, retain=True)]
    async with asyncio.timeout(5):
        for hold in holds:
            await hold.arrived.wait()
    sub = await env.client("lf-sub")
    await sub.subscribe([("lf/#", 1), ("lf/x", 1)])  # wildcard and exact routing
    subscribed = await env.sink.wait_for(SessionSubscribed, clientid="lf-sub")
    exact = await env.sink.wait_for(SessionSubscribed, clientid="lf-sub", topic="lf/x")
    # The retained message is in the store from the moment it got its id.
    message = await sub.message()
    assert (message.topic, message.payload, message.retain) == ("lf/r", b"retained before", True)
    assert subscribed.retained_sent == {"lf/r"}
    for hold in holds:
        hold.release()
    async with asyncio.timeout(5):
        await asyncio.gather(*acks)
    await env.sink.wait_for(MessagePublish, topic="lf/r")
    await env.sink.wait_for(MessagePublish, topic="lf/x")
    before = [e.msgid for e in env.sink.find(MessagePublish) if e.topic in ("lf/x", "lf/r")]
    assert max(before) < subscribed.live_from_msgid < exact.live_from_msgid
    await publish_marker(env, "lf/y", sub)  # neither is routed live as well
    delivered = env.sink.find(MessageDelivered, clientid="lf-sub")
    assert [(e.topic, e.retain) for e in delivered] == [("lf/r", True), ("lf/y", False)]
    assert delivered[-1].msgid > subscribed.live_from_msgid


async def test_deliveries_follow_publish_order_across_publishers(env: Env) -> None:
    """Routing waits for earlier message ids (amqtt routes each message in its own task)."""
    sub = await env.client("ord-sub")
    await sub.subscribe("ord/#", 1)
    slow, fast = await env.client("ord-slow"), await env.client("ord-fast")
    hold = env.sink.hold(MessagePublish, clientid="ord-slow")
    first_acked = slow.send("ord/a", b"first", 1)
    async with asyncio.timeout(5):
        await hold.arrived.wait()  # "first" has its id; its event is stuck in the sink
    await fast.publish("ord/b", b"second", 1)
    await env.sink.wait_for(MessagePublish, clientid="ord-fast")
    assert not first_acked.done()  # no PUBACK while the bridge does not have the message
    hold.release()
    async with asyncio.timeout(5):
        await first_acked
    assert [(await sub.message()).payload for _ in range(2)] == [b"first", b"second"]
    published = [e.msgid for e in env.sink.find(MessagePublish) if e.topic.startswith("ord/")]
    assert published == sorted(published, reverse=True)  # the sink got them the other way round
    delivered = [e.msgid for e in env.sink.find(MessageDelivered, clientid="ord-sub")]
    assert delivered == sorted(published)


# -- QoS ----------------------------------------------------------------------------------


async def test_delivered_qos_is_min_of_publish_and_subscription(env: Env) -> None:
    """amqtt delivers at the subscription's QoS."""
    sub = await env.client("minq")
    assert await sub.subscribe([("m/0", 0), ("m/1", 1), ("m/2", 2)]) == [0, 1, 2]
    pub = await env.client("minq-pub")
    for sub_qos in range(3):
        for pub_qos in range(3):
            await pub.publish(f"m/{sub_qos}", f"{sub_qos}{pub_qos}".encode(), pub_qos)
    received = [await sub.message() for _ in range(9)]
    assert sorted(m.payload for m in received) == [f"{s}{p}".encode() for s in range(3) for p in range(3)]
    for message in received:
        sub_qos, pub_qos = int(message.payload[:1]), int(message.payload[1:])
        assert message.qos == min(sub_qos, pub_qos), message.payload
    delivered = env.sink.find(MessageDelivered, clientid="minq")
    assert sorted((e.payload, e.qos) for e in delivered) == sorted((m.payload, m.qos) for m in received)
    published = sorted((e.payload, e.qos) for e in env.sink.find(MessagePublish, clientid="minq-pub"))
    assert published == [(f"{s}{p}".encode(), p) for s in range(3) for p in range(3)]


async def test_overlapping_subscriptions_get_one_copy_at_max_qos(env: Env) -> None:
    """amqtt sends one copy per matching filter."""
    sub = await env.client("ovl")
    assert await sub.subscribe([("o/#", 0), ("o/+", 2), ("o/x", 1)]) == [0, 2, 1]
    pub = await env.client("ovl-pub")
    await pub.publish("o/x", b"once", 2)
    message = await sub.message()
    assert (message.topic, message.payload, message.qos) == ("o/x", b"once", 2)
    await publish_marker(env, "o/y", sub)
    first, marker = env.sink.find(MessageDelivered, clientid="ovl")
    assert (first.qos, first.filters) == (2, ("o/#", "o/+", "o/x"))
    assert (marker.qos, marker.filters) == (1, ("o/#", "o/+"))


async def test_unacked_messages_stay_in_flight_and_are_redelivered_with_dup(env: Env) -> None:
    """amqtt drops an unacknowledged message after 5 s and never redelivers it."""
    raw = await env.raw("dup1", clean_session=False)
    suback = await raw.subscribe(1, ("d/1", 1), ("d/2", 2))
    assert suback.reason_codes == [1, 2]
    pub = await env.client("dup-pub")
    await pub.publish("d/1", b"a", 1)
    await pub.publish("d/2", b"b", 2)
    first, second = await raw.recv(), await raw.recv()
    assert [(p.topic, p.payload, p.qos, p.dup) for p in (first, second)] == [
        ("d/1", b"a", 1, False),
        ("d/2", b"b", 2, False),
    ]
    raw.abort()
    await env.sink.wait_for(ClientDisconnected, clientid="dup1")

    raw = await env.raw("dup1", clean_session=False)
    again = [await raw.recv(), await raw.recv()]
    assert [(p.topic, p.payload, p.qos, p.dup, p.packet_id) for p in again] == [
        ("d/1", b"a", 1, True, first.packet_id),
        ("d/2", b"b", 2, True, second.packet_id),
    ]
    # Not acknowledged for longer than amqtt's 5 s ack timeout: still in flight.
    await asyncio.sleep(5.5)
    published = {e.topic: e.msgid for e in env.sink.find(MessagePublish, clientid="dup-pub")}
    await raw.send(Puback(first.packet_id))
    acked = await env.sink.wait_for(MessageAcked, clientid="dup1", topic="d/1")
    assert (acked.msgid, acked.qos, acked.filters) == (published["d/1"], 1, ("d/1",))
    await raw.send(Pubrec(second.packet_id))
    pubrel = await raw.recv()
    assert isinstance(pubrel, Pubrel)
    assert pubrel.packet_id == second.packet_id
    acked = await env.sink.wait_for(MessageAcked, clientid="dup1", topic="d/2")
    assert (acked.msgid, acked.qos) == (published["d/2"], 2)

    # Reconnect between PUBREC and PUBCOMP: the broker resends PUBREL, not the PUBLISH.
    raw.abort()
    await env.sink.wait_for(ClientDisconnected, clientid="dup1", count=2)
    raw = await env.raw("dup1", clean_session=False)
    pubrel = await raw.recv()
    assert isinstance(pubrel, Pubrel)
    assert pubrel.packet_id == second.packet_id
    await raw.send(Pubcomp(second.packet_id))
    await pub.publish("d/1", b"c", 1)
    latest = await raw.recv()
    assert (latest.topic, latest.payload, latest.dup) == ("d/1", b"c", False)
    # One delivered and one acked event per message, whatever the redeliveries.
    assert [e.payload for e in env.sink.find(MessageDelivered, clientid="dup1")] == [b"a", b"b", b"c"]
    assert [e.payload for e in env.sink.find(MessageAcked, clientid="dup1")] == [b"a", b"b"]
    assert [e.reason for e in env.sink.find(ClientDisconnected, clientid="dup1")] == ["closed", "closed"]


async def test_incoming_qos2_released_by_pubrel_after_reconnect(env: Env) -> None:
    """amqtt loses the PUBREL waiter when the publisher reconnects."""
    watcher = await env.client("q2-watch")
    await watcher.subscribe("q2/#", 2)
    raw = await env.raw("q2pub", clean_session=False)
    publish = Publish("q2/x", b"exactly once", 2, packet_id=7)
    await raw.send(publish)
    assert (await raw.recv()).packet_id == 7  # PUBREC
    await raw.send(Publish("q2/x", b"exactly once", 2, dup=True, packet_id=7))  # resent with DUP
    assert (await raw.recv()).packet_id == 7
    raw.abort()
    await env.sink.wait_for(ClientDisconnected, clientid="q2pub")

    raw = await env.raw("q2pub", clean_session=False)
    await raw.send(Pubrel(7))
    pubcomp = await raw.recv()
    assert isinstance(pubcomp, Pubcomp)
    assert pubcomp.packet_id == 7
    message = await watcher.message()
    assert (message.payload, message.qos) == (b"exactly once", 2)
    await publish_marker(env, "q2/end", watcher)
    assert len(env.sink.find(MessagePublish, clientid="q2pub")) == 1


# -- acknowledgement means kept (docs/architecture.md#acknowledged-means-kept) ------------------------------------------------


class KeepingSink(RecordingSink):
    """A sink that returns, for each message.publish, a "kept" future the test completes."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[asyncio.Future[None]] = []
        self.published = asyncio.Queue[asyncio.Future[None]]()

    async def __call__(self, event: Any) -> asyncio.Future[None] | None:  # type: ignore[override]
        await super().__call__(event)
        if not isinstance(event, MessagePublish):
            return None
        kept = asyncio.get_running_loop().create_future()
        await self.published.put(kept)
        return kept

    async def next_kept(self) -> asyncio.Future[None]:
        """The kept future of the next message.publish the broker hands over."""
        return await asyncio.wait_for(self.published.get(), TIMEOUT)


@pytest.fixture
async def keeping_env(
    paho_clients: Callable[..., Client], raw_connect: Callable[..., Awaitable[tuple[RawClient, Any]]]
) -> AsyncIterator[Env]:
    sink = KeepingSink()
    broker = EmbeddedBroker("127.0.0.1:0", node=NODE, msgids=MsgIdGenerator(NODE))
    await broker.start(sink)
    yield Env(broker, sink, paho_clients, raw_connect)
    await broker.stop()


async def nothing_sent_yet(raw: RawClient) -> None:
    """The next packet is the answer to a PINGREQ sent now: nothing else was sent before it."""
    for _ in range(10):
        await asyncio.sleep(0)  # let a wrongly early ack reach the socket first
    await raw.send(Pingreq())
    assert isinstance(await raw.recv(), Pingresp)


async def test_acks_wait_until_kept_and_go_out_in_arrival_order(keeping_env: Env) -> None:
    """amqtt acknowledges on receipt: a kill -9 then loses acknowledged messages."""
    sink = keeping_env.sink
    assert isinstance(sink, KeepingSink)
    raw = await keeping_env.raw("keeper")
    await raw.send(Publish("k/1", b"one", 1, packet_id=1))
    await raw.send(Publish("k/2", b"two", 2, packet_id=2))
    await raw.send(Publish("k/3", b"three", 1, packet_id=3))
    one, two, three = [await sink.next_kept() for _ in range(3)]
    three.set_result(None)  # kept, but the two before it are not: no ack may overtake them
    await nothing_sent_yet(raw)
    one.set_result(None)
    puback = await raw.recv()
    assert isinstance(puback, Puback) and puback.packet_id == 1
    await raw.send(Publish("k/2", b"two", 2, dup=True, packet_id=2))  # resent (DUP) before its PUBREC
    await nothing_sent_yet(raw)
    two.set_result(None)
    acks = [await raw.recv() for _ in range(3)]
    assert [(type(a), a.packet_id) for a in acks] == [(Pubrec, 2), (Puback, 3), (Pubrec, 2)]
    await raw.send(Pubrel(2))
    pubcomp = await raw.recv()
    assert isinstance(pubcomp, Pubcomp) and pubcomp.packet_id == 2
    assert [e.payload for e in sink.find(MessagePublish, clientid="keeper")] == [b"one", b"two", b"three"]


async def test_a_burst_in_one_write_is_acknowledged_routed_and_retained_in_order(keeping_env: Env) -> None:
    """PUBLISH packets that come in one read are begun together (broker.publish_inbound):
    each still gets its ack only once kept and after those before it, reaches a subscriber
    in publish order, and the last retained one is what stays retained."""
    sink = keeping_env.sink
    assert isinstance(sink, KeepingSink)
    watcher = await keeping_env.raw("burst-watcher")
    await watcher.subscribe(1, ("b/#", 0))
    raw = await keeping_env.raw("burst")
    packets = [
        Publish(f"b/{n % 3}", b"%d" % n, n % 3, retain=n % 10 == 0, packet_id=n % 3 and n + 1) for n in range(100)
    ]
    await raw.send_bytes(b"".join(encode(packet, raw.level) for packet in packets))
    kept = {n: await sink.next_kept() for n in range(100)}  # every event reaches the sink, in order
    got = [await watcher.recv() for _ in range(100)]
    assert [p.payload for p in got] == [b"%d" % n for n in range(100)]  # routed before being kept
    for n in reversed(range(100)):  # kept last to first: no ack may overtake an earlier one
        kept[n].set_result(None)
    acked = [n for n in range(100) if n % 3]
    acks = [await raw.recv() for _ in acked]
    assert [(type(a), a.packet_id) for a in acks] == [(Puback if n % 3 == 1 else Pubrec, n + 1) for n in acked]
    assert [e.payload for e in sink.find(MessagePublish, clientid="burst")] == [b"%d" % n for n in range(100)]
    late = await keeping_env.raw("burst-late")
    await late.subscribe(1, ("b/0", 0))
    assert (await late.recv()).payload == b"90"  # n = 90 was the last retained of b/0


async def test_a_message_that_was_not_kept_is_never_acknowledged(keeping_env: Env) -> None:
    sink = keeping_env.sink
    assert isinstance(sink, KeepingSink)
    raw = await keeping_env.raw("unkept")
    await raw.send(Publish("k/lost", b"lost", 1, packet_id=9))
    (await sink.next_kept()).cancel()  # what the event stream hands over when the sink failed
    assert await raw.recv() is None  # closed without a PUBACK: the client sends it again


# -- keepalive and will -------------------------------------------------------------------


async def test_keepalive_timeout_publishes_will(env: Env) -> None:
    """amqtt never enforces the keepalive."""
    watcher = await env.client("ka-watch")
    await watcher.subscribe("will/#", 1)
    loop = asyncio.get_running_loop()
    silent = await env.raw("ka1", keepalive=1, will=Will("will/ka1", b"gone", 1, True))
    pinging = await env.raw("ka2", keepalive=1, will=Will("will/ka2", b"gone", 1, False))
    started = loop.time()

    async def ping_for(seconds: float) -> int:
        replies = 0
        while loop.time() - started < seconds:
            await pinging.send(Pingreq())
            replies += (await pinging.recv()) is not None
            await asyncio.sleep(0.4)  # the client's own ping interval
        return replies

    pinger = asyncio.create_task(ping_for(2.5))
    will = await watcher.message()
    elapsed = loop.time() - started
    assert (will.topic, will.payload, will.qos, will.retain) == ("will/ka1", b"gone", 1, False)
    assert elapsed >= 1.4  # not before 1.5 x the keepalive (how soon after is the machine's timing)
    disconnected = await env.sink.wait_for(ClientDisconnected, clientid="ka1")
    assert disconnected.reason == "keepalive_timeout"
    assert env.sink.kinds("ka1") == ["ClientConnected", "MessagePublish", "ClientDisconnected"]
    will_event = env.sink.find(MessagePublish, clientid="ka1")[0]
    assert (will_event.topic, will_event.payload, will_event.qos, will_event.retain) == ("will/ka1", b"gone", 1, True)
    assert await silent.recv() is None  # the broker closed it

    assert await pinger >= 5  # a client that pings in time stays connected
    assert env.sink.kinds("ka2") == ["ClientConnected"]

    late = await env.client("ka-late")
    await late.subscribe("will/#", 1)
    retained = await late.message()
    assert (retained.topic, retained.payload, retained.retain) == ("will/ka1", b"gone", True)


async def test_keepalive_does_not_count_time_the_broker_was_not_reading(env: Env) -> None:
    """A client whose packets wait behind back-pressure (sink busy) is not timed out."""
    raw = await env.raw("kb", keepalive=1)
    assert (await raw.subscribe(1, ("kb/t", 1))).reason_codes == [1]
    hold = env.sink.hold(MessageAcked, clientid="kb")
    pub = await env.client("kb-pub")
    await pub.publish("kb/t", b"x", 1)
    publish = await raw.recv()
    await raw.send(Puback(publish.packet_id))
    async with asyncio.timeout(5):
        await hold.arrived.wait()  # the broker's reader now waits for the sink
    for _ in range(6):  # 2.4 s of pings nobody reads: well past 1.5x the keepalive
        await raw.send(Pingreq())
        await asyncio.sleep(0.4)
    hold.release()
    replies = [await raw.recv() for _ in range(6)]
    assert all(isinstance(packet, Pingresp) for packet in replies)
    assert env.sink.find(ClientDisconnected, clientid="kb") == []


async def test_will_on_abnormal_close_only(env: Env) -> None:
    watcher = await env.client("w-watch")
    await watcher.subscribe("w/#", 1)
    dropped = await env.raw("w-a", will=Will("w/a", b"a died", 1))
    polite = await env.raw("w-b", will=Will("w/b", b"b died", 1))
    dropped.abort()
    message = await watcher.message()
    assert (message.topic, message.payload) == ("w/a", b"a died")
    await polite.send(Disconnect())
    assert await polite.recv() is None
    assert (await env.sink.wait_for(ClientDisconnected, clientid="w-a")).reason == "closed"
    assert (await env.sink.wait_for(ClientDisconnected, clientid="w-b")).reason == "normal"
    await publish_marker(env, "w/marker", watcher)
    assert env.sink.find(MessagePublish, clientid="w-b") == []


# -- retained messages ----------------------------------------------------------------


async def test_retained_set_replace_delete_and_wildcards(env: Env) -> None:
    pub = await env.client("r-pub")
    await pub.publish("r/a", b"1", 1, retain=True)
    await pub.publish("r/b", b"2", 2, retain=True)
    await pub.publish("r/c/d", b"3", 0, retain=True)
    await pub.publish("r/a", b"4", 1, retain=True)  # replaces r/a

    plus = await env.client("r-plus")
    await plus.subscribe("r/+", 1)
    got = sorted([await plus.message() for _ in range(2)], key=lambda m: m.topic)
    assert [(m.topic, m.payload, m.qos, m.retain) for m in got] == [("r/a", b"4", 1, True), ("r/b", b"2", 1, True)]
    subscribed = await env.sink.wait_for(SessionSubscribed, clientid="r-plus")
    assert subscribed.retained_sent == {"r/a", "r/b"}

    hash_ = await env.client("r-hash")
    await hash_.subscribe("r/#", 2)
    got = sorted([await hash_.message() for _ in range(3)], key=lambda m: m.topic)
    assert [(m.topic, m.payload, m.qos, m.retain) for m in got] == [
        ("r/a", b"4", 1, True),
        ("r/b", b"2", 2, True),
        ("r/c/d", b"3", 0, True),
    ]
    delivered = env.sink.find(MessageDelivered, clientid="r-hash")
    assert all(e.retain and e.filters == ("r/#",) for e in delivered)
    published = {e.payload: e.msgid for e in env.sink.find(MessagePublish, clientid="r-pub")}
    assert {e.payload: e.msgid for e in delivered} == {p: published[p] for p in (b"4", b"2", b"3")}

    await pub.publish("r/a", b"", 1, retain=True)  # deletes r/a; still routed, still an event
    deleted = await plus.message()
    assert (deleted.topic, deleted.payload, deleted.retain) == ("r/a", b"", False)
    assert env.sink.find(MessagePublish, clientid="r-pub", topic="r/a", payload=b"", retain=True)
    later = await env.client("r-later")
    await later.subscribe("r/+", 2)
    message = await later.message()
    assert (message.topic, message.payload, message.qos) == ("r/b", b"2", 2)
    await publish_marker(env, "r/end", later)


async def test_retained_not_resent_on_reconnect(env: Env) -> None:
    """amqtt sends retained messages for every filter of every client on each connect."""
    pub = await env.client("rr-pub")
    await pub.publish("rr/x", b"kept", 1, retain=True)
    other = await env.client("rr-other")
    await other.subscribe([("rr/x", 1), ("#", 1)])
    assert len([await other.message() for _ in range(2)]) == 2
    persistent = await env.client("rr1", clean=False)
    await persistent.subscribe("rr/#", 1)
    assert (await persistent.message()).retain
    # the PUBACK must reach the broker before DISCONNECT, or the message is rightly redelivered
    await env.sink.wait_for(MessageAcked, clientid="rr1")
    await persistent.disconnect()
    persistent = await env.client("rr1", clean=False, expect_present=True)
    await publish_marker(env, "rr/marker", persistent)
    fresh = await env.client("rr2")
    await fresh.subscribe("other/#", 1)
    await publish_marker(env, "other/marker", fresh)


async def test_dollar_topics_not_matched_by_first_level_wildcards(env: Env) -> None:
    every, plus = await env.client("dl-all"), await env.client("dl-plus")
    dollar, system = await env.client("dl-dollar"), await env.client("dl-sys")
    await every.subscribe("#", 1)
    await plus.subscribe([("+/x", 1), ("+/fake", 1)])
    await dollar.subscribe("$app/#", 1)
    await system.subscribe("$SYS/#", 1)
    pub = await env.client("dl-pub")
    await pub.publish("$app/x", b"dollar", 1)
    await pub.publish("$SYS/fake", b"clients may not publish here", 1)
    await pub.publish("$app/y", b"after the refused one", 1)
    assert [(await dollar.message()).topic for _ in range(2)] == ["$app/x", "$app/y"]
    assert env.sink.find(MessagePublish, topic="$SYS/fake") == []
    await publish_marker(env, "m/x", every, plus)  # neither got $app/x nor $SYS/fake first
    # The marker was routed after $SYS/fake: had that been routed, dl-sys would have it by now.
    # (This broker is made with sys_interval 0: no $SYS/broker/... status of its own either.)
    assert env.sink.find(MessageDelivered, clientid="dl-sys") == []


# -- bridge calls: proxy subscription and delivery to one session ---------------------------


async def test_proxy_subscribe(env: Env) -> None:
    pub = await env.client("px-pub")
    await pub.publish("p/x", b"retained", 1, retain=True)
    await pub.publish("p2/z", b"retained too", 1, retain=True)
    client = await env.client("px", clean=False)
    assert await env.broker.subscribe("px", "p/#", 1) is True
    subscribed = await env.sink.wait_for(SessionSubscribed, clientid="px")
    assert (subscribed.topic, subscribed.qos, subscribed.is_new, subscribed.persistent) == ("p/#", 1, True, True)
    assert subscribed.retained_sent == {"p/x"}
    message = await client.message()
    assert (message.topic, message.payload, message.retain) == ("p/x", b"retained", True)
    await pub.publish("p/y", b"live", 1)
    message = await client.message()
    assert (message.topic, message.retain) == ("p/y", False)
    live = env.sink.find(MessagePublish, topic="p/y")[0]
    retained = env.sink.find(MessagePublish, topic="p/x")[0]
    assert retained.msgid < subscribed.live_from_msgid < live.msgid

    assert await env.broker.subscribe("px", "p/#", 2) is True
    again = await env.sink.wait_for(SessionSubscribed, clientid="px", count=2)
    assert (again.is_new, again.qos) == (False, 2)
    assert (await client.message()).retain  # retained re-sent on a repeated subscription
    assert await env.broker.subscribe("nobody", "p/#", 1) is False
    with pytest.raises(ValueError, match="must be a whole level"):
        await env.broker.subscribe("px", "p/#/x", 1)

    await client.disconnect()
    await env.sink.wait_for(ClientDisconnected, clientid="px")
    assert await env.broker.subscribe("px", "p2/#", 1) is True
    offline = await env.sink.wait_for(SessionSubscribed, clientid="px", topic="p2/#")
    assert (offline.is_new, offline.retained_sent) == (True, frozenset())
    await pub.publish("p2/w", b"queued", 1)
    await env.sink.wait_for(MessagePublish, topic="p2/w")
    client = await env.client("px", clean=False, expect_present=True)
    message = await client.message()
    assert (message.topic, message.payload) == ("p2/w", b"queued")
    await publish_marker(env, "p2/end", client)


async def test_deliver_goes_to_exactly_one_session(env: Env) -> None:
    first, second = await env.client("dA"), await env.client("dB")
    await first.subscribe("d/t", 1)
    await second.subscribe("d/t", 1)
    ids = MsgIdGenerator("origin")
    one, two = ids.next(), ids.next()
    await env.broker.deliver(
        "dA",
        [
            Delivery(one, "d/t", b"one", 1, True, "origin", "d/t"),
            Delivery(two, "d/t", b"two", 0, False, "origin", "d/t"),
        ],
    )
    got = [await first.message(), await first.message()]
    assert [(m.payload, m.qos, m.retain) for m in got] == [(b"one", 1, True), (b"two", 0, False)]
    acked = await env.sink.wait_for(MessageAcked, clientid="dA")
    assert (acked.msgid, acked.from_clientid, acked.filters, acked.retain) == (one, "origin", ("d/t",), True)
    delivered = env.sink.find(MessageDelivered, clientid="dA")
    assert [(e.msgid, e.qos, e.filters) for e in delivered] == [(one, 1, ("d/t",)), (two, 0, ("d/t",))]
    await publish_marker(env, "d/t", second)
    assert env.sink.find(MessageDelivered, clientid="dB", msgid=one) == []
    assert env.sink.find(MessagePublish, msgid=one) == env.sink.find(MessagePublish, msgid=two) == []

    offline = await env.client("dC", clean=False)
    await offline.subscribe("d/c", 1)
    await offline.disconnect()
    await env.sink.wait_for(ClientDisconnected, clientid="dC")
    queued = [Delivery(ids.next(), "d/c", f"{i}".encode(), 1, False, "origin", "d/c") for i in range(3)]
    await env.broker.deliver("dC", queued)
    offline = await env.client("dC", clean=False, expect_present=True)
    assert [(await offline.message()).payload for _ in range(3)] == [b"0", b"1", b"2"]
    with pytest.raises(DeliveryError):
        await env.broker.deliver("nobody", queued)


async def test_stop_reports_shutdown(
    start_broker: Callable[..., Awaitable[tuple[EmbeddedBroker, RecordingSink]]],
    paho_clients: Callable[..., Client],
) -> None:
    broker, sink = await start_broker()
    client = paho_clients(broker.port, "bye")
    assert (await client.connect()).reason == 0
    await broker.stop()
    assert not broker.is_connected()
    assert sink.find(ClientDisconnected, clientid="bye")[0].reason == "shutdown"
    async with asyncio.timeout(5):
        await client.wait_disconnected()


async def test_puback_and_pubcomp_wait_until_the_bridge_has_the_message(env: Env) -> None:
    """At least once: the publisher's ack means the publish event reached the bridge."""
    pub = await env.client("ack-pub")
    for qos in (1, 2):
        hold = env.sink.hold(MessagePublish, clientid="ack-pub", qos=qos)
        acked = pub.send(f"ack/{qos}", b"x", qos)
        async with asyncio.timeout(5):
            await hold.arrived.wait()
        await asyncio.sleep(0.3)
        assert not acked.done(), f"QoS {qos} acked before the bridge took the message"
        hold.release()
        async with asyncio.timeout(5):
            await acked


# -- answers due after the client left ----------------------------------------------


async def test_answers_due_after_a_disconnect_are_dropped_without_an_error(env: Env) -> None:
    """A SUBSCRIBE and a DISCONNECT in one write (mosquitto_sub stopped right after it connected):
    the SUBACK is due once the subscription is made, after the DISCONNECT half-closed the socket.
    It is dropped; before, writing it raised "Cannot call write() after write_eof()" in a task
    nobody awaited."""
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        for n in range(20):
            raw = await env.raw(f"leaver-{n}")
            await raw.send_bytes(encode(Subscribe(1, [Subscription(f"leave/{n}/#", 1)]), 4) + encode(Disconnect(), 4))
            await env.sink.wait_for(ClientDisconnected, clientid=f"leaver-{n}")
            raw.abort()
        await asyncio.sleep(0.1)  # a task that failed is reported when it is collected
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [str(e.get("exception") or e.get("message")) for e in errors] == []
