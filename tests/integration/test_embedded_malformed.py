"""Strict framing of the embedded broker (docs/brokers.md#what-it-guarantees, strict framing): malformed input on a raw socket.

Every case runs against a real bridge process (embedded broker, rules that store each publish,
connection and subscription in Redis), in MQTT 3.1.1 and, where the answer differs, 5.0. Each
test asserts three things:

- the connection is closed; in 5.0 a refused CONNECT gets a CONNACK with a reason code >= 0x80
  and a bad packet after CONNECT a DISCONNECT 0x81 (malformed) or 0x82 (protocol error) first,
  0x95 for an oversized packet; in 3.1.1 nothing is sent back, except that a refused CONNECT may
  get a CONNACK with a non-zero return code (3.1.1 allows it for a bad client id or will, and
  a broker that can tell the refusal is no worse for saying so);
- nothing of the bad packet is stored or routed: the Redis lists hold exactly what the
  well-behaved clients did, and a subscriber to `#` gets nothing before the next good message
  (deliveries to one subscriber go out in publish order, so anything routed from the bad packet
  would come first);
- a well-behaved client connected before still publishes and receives, and a new one connects,
  subscribes, publishes and receives.

The refusal is also counted once at /metrics (`hookbridge_broker_refused_total{reason=...}`,
the REFUSALS of bridge/brokers/embedded/limits.py), except for a `$`-topic will: that CONNECT
is well formed and refused by the broker's rules, and REFUSALS names no reason for it.

One bridge serves the whole module (the cases cost a connection each, a bridge costs a process);
since every case checks that the broker still serves, no case can leave it damaged unnoticed.
Its limits are small so the limit cases run fast: `broker.max_packet_size = 64KB`,
`broker.connect_timeout = 1s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis as redis_sync

from bridge.brokers.embedded.codec import MQTT_3_1_1, MQTT_5, Connack, Disconnect, Puback, Publish, Will, encode
from support.bridges import eventually
from support.mqtt import Client
from support.process import BridgeProcess
from support.raw import RawClient, brief

REDIS = "backend.redis.pool1.server = 127.0.0.1:{port}\nbackend.redis.pool1.batch_time = 1ms\n"
RULES = (
    'backend.redis.hook.client.connected.1 = {"action": {"commands": ["RPUSH seen:clients ${clientid}"]}}\n'
    'backend.redis.hook.session.subscribed.1 = {"action": {"commands": ["RPUSH seen:filters ${topic}"]}}\n'
    "backend.redis.hook.message.publish.1 = "
    '{"action": {"commands": ["RPUSH seen:topics ${topic}", "RPUSH seen:payloads ${payload}"]}}\n'
)
MAX_PACKET_SIZE = 64 << 10
LIMITS = "broker.max_packet_size = 64KB\nbroker.connect_timeout = 1s\n"

MALFORMED = frozenset({0x81, 0x82})
"""5.0 DISCONNECT reason codes for a packet that breaks the protocol (docs/brokers.md#what-it-guarantees)."""
PACKET_TOO_LARGE = frozenset({0x95})


# -- raw bytes, written here rather than by the codec under test ------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + varint(len(body)) + body


def s(raw: bytes) -> bytes:
    """An MQTT string (or binary) field: two-byte length, then the bytes as given."""
    return struct.pack(">H", len(raw)) + raw


def u16(value: int) -> bytes:
    return struct.pack(">H", value)


def connect_body(client_id: bytes, level: int, *, will: tuple[bytes, int] | None = None, keepalive: int = 60) -> bytes:
    """A clean-session CONNECT body; `will` is (topic, will QoS bits), its payload b"bye"."""
    flags = 0x02
    if will is not None:
        flags |= 0x04 | will[1] << 3
    props = b"\x00" if level == MQTT_5 else b""
    body = s(b"MQTT") + bytes((level, flags)) + u16(keepalive) + props + s(client_id)
    if will is not None:
        body += props + s(will[0]) + s(b"bye")
    return body


def publish(topic: bytes, level: int, *, packet_id: int = 1, qos: int = 1, payload: bytes = b"bad") -> bytes:
    body = s(topic) + (u16(packet_id) if qos else b"") + (b"\x00" if level == MQTT_5 else b"") + payload
    return frame(0x30 | qos << 1, body)


# -- the bridge and one test's clients -----------------------------------------------------------


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory, redis_port: int) -> Iterator[BridgeProcess]:
    process = BridgeProcess(tmp_path_factory.mktemp("malformed"), REDIS.format(port=redis_port), RULES, LIMITS)
    try:
        yield process.start()
    finally:
        process.stop()


@pytest.fixture(params=[MQTT_3_1_1, MQTT_5], ids=["3.1.1", "5.0"])
def level(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@dataclass
class Scene:
    """The bridge, its Redis, and a watcher: a well-behaved client subscribed to `#` that
    published and received one message before the test sends anything bad."""

    bridge: BridgeProcess
    redis: redis_sync.Redis
    make_paho: Callable[..., Client]
    level: int
    _watcher: Client | None = None
    watched: tuple[str, ...] = ()
    """Filters the watcher holds besides `#` (left out of the stored filters compared)."""
    raws: list[RawClient] = field(default_factory=list)

    @property
    def watcher(self) -> Client:
        assert self._watcher is not None, "Scene.start() first"
        return self._watcher

    async def start(self, *extra_filters: str) -> Scene:
        self.watched = extra_filters
        self._watcher = await self.paho("good-before")
        await self.watcher.subscribe([("#", 1), *((topic, 1) for topic in extra_filters)])
        await self.watcher.publish("good/before", b"before", 1)
        message = await self.watcher.message()
        assert (message.topic, message.payload) == ("good/before", b"before")
        return self

    async def paho(self, client_id: str) -> Client:
        client = self.make_paho(self.bridge.mqtt_port, client_id)
        assert (await client.connect()).reason == 0
        return client

    async def open(self) -> RawClient:
        """A raw connection at the test's protocol level, nothing sent."""
        raw = await RawClient.open(self.bridge.mqtt_port, self.level)
        self.raws.append(raw)
        return raw

    async def connected(self, client_id: str, **kwargs: Any) -> tuple[RawClient, Connack]:
        """A raw client whose CONNECT was accepted."""
        raw, connack = await RawClient.connect(self.bridge.mqtt_port, client_id, level=self.level, **kwargs)
        self.raws.append(raw)
        assert isinstance(connack, Connack) and connack.reason_code == 0, connack
        return raw, connack

    async def refusals(self, reason: str) -> float:
        return await asyncio.to_thread(self.bridge.metric, "hookbridge_broker_refused_total", reason=reason)

    @contextlib.asynccontextmanager
    async def counted(self, reason: str) -> AsyncIterator[None]:
        """What runs inside makes the broker refuse once for `reason`, counted at /metrics."""
        before = await self.refusals(reason)
        yield
        try:
            await eventually(lambda: self.refusals(reason), lambda now: now >= before + 1, timeout=5)
        except AssertionError as error:
            raise AssertionError(f"refused_total{{reason={reason!r}}} not counted at /metrics: {error}") from None
        assert await self.refusals(reason) == before + 1

    async def still_serves(
        self,
        *,
        published: tuple[tuple[str, bytes], ...] = (),
        clients: tuple[str, ...] = (),
        filters: tuple[str, ...] = (),
    ) -> None:
        """The broker serves the watcher and a new client, and Redis holds only what good clients
        did, plus what the test's raw client legitimately did: `published` (topic, payload),
        `clients` connected and `filters` subscribed."""
        after = await self.paho("good-after")
        assert await after.subscribe("good/after", 1) == [1]
        await after.publish("good/after", b"after", 1)
        for client in (self.watcher, after):
            message = await client.message()  # the first thing the watcher got since "before"
            assert (message.topic, message.payload) == ("good/after", b"after")
        await self.watcher.publish("good/again", b"again", 1)
        message = await self.watcher.message()
        assert (message.topic, message.payload) == ("good/again", b"again")

        good = [("good/before", b"before"), *published, ("good/after", b"after"), ("good/again", b"again")]
        expected = {
            "seen:topics": sorted(topic for topic, _ in good),
            "seen:payloads": sorted(payload.decode() for _, payload in good),
            "seen:clients": sorted(["good-before", *clients, "good-after"]),
            "seen:filters": sorted(["#", *filters, "good/after"]),
        }

        async def read() -> dict[str, list[str]]:
            return {
                key: sorted(
                    text
                    for item in self.redis.lrange(key, 0, -1)
                    if (text := item.decode(errors="backslashreplace")) not in self.watched or key != "seen:filters"
                )
                for key in expected
            }

        # Connection events are stored without an ack to wait on: wait until all are there.
        stored = await eventually(read, lambda got: all(len(got[key]) >= len(expected[key]) for key in expected))
        assert stored == expected


SceneFactory = Callable[..., Awaitable[Scene]]


@pytest.fixture
async def scene(
    bridge: BridgeProcess,
    redis_db: redis_sync.Redis,
    paho_clients: Callable[..., Client],
) -> AsyncIterator[SceneFactory]:
    """`await scene(level, *extra_watched_filters)`: a started Scene; raw clients closed at the end."""
    made: list[Scene] = []

    async def start(level: int = MQTT_3_1_1, *extra_filters: str) -> Scene:
        made.append(Scene(bridge, redis_db, paho_clients, level))
        return await made[-1].start(*extra_filters)

    yield start
    for one in made:
        for raw in one.raws:
            raw.abort()


async def closed_after(raw: RawClient, level: int, reasons: frozenset[int], timeout: float = 5.0) -> None:
    """3.1.1: closed with nothing sent back. 5.0: a DISCONNECT with one of `reasons`, then closed."""
    packets = await raw.until_closed(timeout)
    sent = [brief(packet) for packet in packets]
    if level == MQTT_5:
        assert len(packets) == 1 and isinstance(packets[0], Disconnect), sent
        assert packets[0].reason_code in reasons, f"DISCONNECT 0x{packets[0].reason_code:02X}"
    else:
        assert packets == [], sent


async def connect_refused(raw: RawClient, level: int) -> None:
    """5.0: a CONNACK >= 0x80, then closed. 3.1.1: closed, at most after a CONNACK refusing it."""
    packets = await raw.until_closed()
    refusal = len(packets) == 1 and isinstance(packets[0], Connack)
    sent = [brief(packet) for packet in packets]
    if level == MQTT_5:
        assert refusal and packets[0].reason_code >= 0x80, sent
    else:
        assert packets == [] or (refusal and packets[0].reason_code != 0), sent


# -- framing: a field that does not fit the packet -------------------------------------------------


def smuggling_publish(level: int) -> bytes:
    """A QoS 1 PUBLISH whose topic is not UTF-8 and whose payload ends in a whole PUBLISH to
    `smuggled/inner`. amqtt 0.12.1 turned the topic into its repr (3 + 3 characters per bad
    byte longer) and so read that many bytes too few as payload: the topic here is as much longer
    as the inner packet, which it then read as a packet of its own, stored and acknowledged."""
    pad = b""
    while True:
        inner = encode(Publish("smuggled/inner", b"evil" + pad, 1, packet_id=2), level)
        if (len(inner) - 3) % 3 == 0:
            break
        pad += b"!"
    topic = b"t/" + b"\xff" * ((len(inner) - 3) // 3)
    return publish(topic, level, payload=b"xjunk" + inner)


async def test_a_non_utf8_topic_cannot_smuggle_a_packet_in_its_payload(scene: SceneFactory, level: int) -> None:
    env = await scene(level)
    raw, _ = await env.connected("bad-smuggle")
    async with env.counted("malformed"):
        await raw.send_bytes(smuggling_publish(level))
        await closed_after(raw, level, MALFORMED)  # no PUBACK for either packet
    await env.still_serves(clients=("bad-smuggle",))  # smuggled/inner never stored nor routed


@pytest.mark.parametrize(
    "client_id",
    [b"bad-\xff\xfe-id", b"bad-\x00-nul", b"bad-\xed\xa0\x80-surrogate"],
    ids=["invalid-utf8", "u0000", "utf16-surrogate"],
)
async def test_connect_with_a_client_id_that_is_not_valid_text_is_refused(
    scene: SceneFactory, level: int, client_id: bytes
) -> None:
    env = await scene(level)
    raw = await env.open()
    async with env.counted("malformed"):
        await raw.send_bytes(frame(0x10, connect_body(client_id, level)))
        await connect_refused(raw, level)
    await env.still_serves()  # amqtt stored the id as the text "b'bad-\\xff\\xfe-id'"


async def test_connect_with_bytes_after_its_last_field_is_refused(scene: SceneFactory, level: int) -> None:
    """Remaining length longer than the content: two bytes no field accounts for."""
    env = await scene(level)
    raw = await env.open()
    async with env.counted("malformed"):
        await raw.send_bytes(frame(0x10, connect_body(b"bad-long", level) + b"\x00\x00"))
        await connect_refused(raw, level)
    await env.still_serves()


async def test_connect_whose_last_field_runs_past_its_length_is_refused(scene: SceneFactory, level: int) -> None:
    """Remaining length shorter than the content: the client id's last two bytes lie after the
    declared end. A broker that reads fields from the stream rather than from the packet takes
    them (and accepted "bad-short"); the packet ends inside the client id, so it is malformed."""
    env = await scene(level)
    raw = await env.open()
    body = connect_body(b"bad-short", level)
    async with env.counted("malformed"):
        await raw.send_bytes(b"\x10" + varint(len(body) - 2) + body)
        await connect_refused(raw, level)
    await env.still_serves()


@pytest.mark.parametrize("topic", [b"bad/\x00/nul", b"bad/\xc0\xaf/overlong"], ids=["u0000", "overlong-utf8"])
async def test_publish_with_a_topic_that_is_not_valid_text_is_refused(
    scene: SceneFactory, level: int, topic: bytes
) -> None:
    env = await scene(level)
    raw, _ = await env.connected("bad-text")
    async with env.counted("malformed"):
        await raw.send_bytes(publish(topic, level))
        await closed_after(raw, level, MALFORMED)
    await env.still_serves(clients=("bad-text",))


# -- wills ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("will_topic", "qos"),
    [(b"will/qos3", 3), (b"will/+", 1), (b"will/#", 1), (b"$SYS/x", 1)],
    ids=["qos3", "plus-wildcard", "hash-wildcard", "sys-topic"],
)
async def test_connect_with_an_invalid_will_is_refused_and_the_will_never_sent(
    scene: SceneFactory, level: int, will_topic: bytes, qos: int
) -> None:
    env = await scene(level, "$SYS/x")  # the watcher would get a $SYS will too
    raw = await env.open()
    # A $-topic will is well formed, refused by the broker's rules: counted under its own reason.
    refusal = contextlib.nullcontext() if will_topic.startswith(b"$") else env.counted("malformed")
    async with refusal:
        await raw.send_bytes(frame(0x10, connect_body(b"bad-will", level, will=(will_topic, qos))))
        await connect_refused(raw, level)
    await env.still_serves()  # "bad-will" never connected, its will never out


# -- packets after CONNECT -------------------------------------------------------------------------


@pytest.mark.parametrize("topic", [b"bad/+/x", b"bad/#"], ids=["plus", "hash"])
async def test_publish_with_a_wildcard_topic_is_refused(scene: SceneFactory, level: int, topic: bytes) -> None:
    env = await scene(level)
    raw, _ = await env.connected("bad-wild")
    async with env.counted("malformed"):
        await raw.send_bytes(publish(topic, level))
        await closed_after(raw, level, MALFORMED)
    await env.still_serves(clients=("bad-wild",))


async def test_qos1_publish_with_packet_id_0_is_refused(scene: SceneFactory, level: int) -> None:
    env = await scene(level)
    raw, _ = await env.connected("bad-pid")
    async with env.counted("malformed"):
        await raw.send_bytes(publish(b"bad/pid0", level, packet_id=0))
        await closed_after(raw, level, MALFORMED)
    await env.still_serves(clients=("bad-pid",))


async def test_subscribe_with_packet_id_0_is_refused(scene: SceneFactory, level: int) -> None:
    env = await scene(level)
    raw, _ = await env.connected("bad-sub")
    props = b"\x00" if level == MQTT_5 else b""
    async with env.counted("malformed"):
        await raw.send_bytes(frame(0x82, u16(0) + props + s(b"bad/filter") + b"\x01"))
        await closed_after(raw, level, MALFORMED)  # no SUBACK
    await env.still_serves(clients=("bad-sub",))  # no session.subscribed for bad/filter


async def test_a_second_connect_is_refused_and_its_will_never_sent(scene: SceneFactory, level: int) -> None:
    env = await scene(level)
    raw, _ = await env.connected("bad-twice")
    async with env.counted("malformed"):
        await raw.send_bytes(frame(0x10, connect_body(b"bad-second", level, will=(b"will/second", 1))))
        await closed_after(raw, level, MALFORMED)
    await env.still_serves(clients=("bad-twice",))  # not "bad-second"; the first had no will


@pytest.mark.parametrize("first", [0x00, 0x0F], ids=["type0", "type0-flags"])
async def test_reserved_packet_type_0_is_refused(scene: SceneFactory, level: int, first: int) -> None:
    env = await scene(level)
    raw, _ = await env.connected("bad-type0")
    async with env.counted("malformed"):
        await raw.send_bytes(bytes((first, 0)))
        await closed_after(raw, level, MALFORMED)
    await env.still_serves(clients=("bad-type0",))


async def test_reserved_packet_type_15_is_refused_in_311(scene: SceneFactory) -> None:
    """15 is AUTH in 5.0; in 3.1.1 it is reserved."""
    env = await scene(MQTT_3_1_1)
    raw, _ = await env.connected("bad-type15")
    async with env.counted("malformed"):
        await raw.send_bytes(b"\xf0\x00")
        await closed_after(raw, MQTT_3_1_1, MALFORMED)
    await env.still_serves(clients=("bad-type15",))


# -- limits: packet size, keepalive, connect timeout -----------------------------------------------


async def test_a_packet_over_max_packet_size_is_refused_from_its_fixed_header(scene: SceneFactory, level: int) -> None:
    env = await scene(level)
    raw, connack = await env.connected("big")
    if level == MQTT_5:
        assert connack.properties.maximum_packet_size == MAX_PACKET_SIZE  # told, not only enforced
    await raw.send(Publish("big/ok", b"x" * (MAX_PACKET_SIZE - 100), 1, packet_id=1))  # under the limit
    assert await raw.recv() == Puback(1)
    assert (await env.watcher.message()).topic == "big/ok"

    announced = 200 << 20
    rss_before = env.bridge.rss_bytes()
    async with env.counted("packet_too_large"):
        # Only the fixed header and a few bytes: a broker that waits for the body never closes.
        await raw.send_bytes(b"\x30" + varint(announced) + s(b"big/no") + b"\x00\x02" + b"x" * 16)
        await closed_after(raw, level, PACKET_TOO_LARGE)
    grown = env.bridge.rss_bytes() - rss_before
    print(f"RSS of the bridge grew by {grown / 1024:.0f} KB for a packet announcing {announced >> 20} MB")
    assert grown < announced // 8
    await env.still_serves(published=(("big/ok", b"x" * (MAX_PACKET_SIZE - 100)),), clients=("big",))


async def test_a_half_sent_packet_does_not_hold_the_keepalive_open(scene: SceneFactory, level: int) -> None:
    """The keepalive clock counts from the last complete packet: keepalive 2 s, then the first
    bytes of a PUBLISH and silence; closed after 1.5x the keepalive, will sent."""
    env = await scene(level)
    raw, _ = await env.connected("ka-half", keepalive=2, will=Will("will/ka-half", b"gone", 1))
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with env.counted("keepalive_timeout"):
        await raw.send_bytes(publish(b"ka/never", level)[:5])
        packets = await raw.until_closed(timeout=10)
    print(f"closed {loop.time() - started:.1f} s after the half packet (keepalive 2 s)")
    if level == MQTT_5:  # a DISCONNECT 0x8D (keep alive timeout) first is allowed, not required
        sent = [brief(packet) for packet in packets]
        assert all(isinstance(packet, Disconnect) and packet.reason_code == 0x8D for packet in packets), sent
        assert len(packets) <= 1, sent
    else:
        assert packets == []
    message = await env.watcher.message()
    assert (message.topic, message.payload) == ("will/ka-half", b"gone")
    await env.still_serves(published=(("will/ka-half", b"gone"),), clients=("ka-half",))


@pytest.mark.parametrize("sent", [b"", b"\x10\x20\x00"], ids=["nothing", "half-connect"])
async def test_a_connection_without_connect_is_closed_after_connect_timeout(scene: SceneFactory, sent: bytes) -> None:
    env = await scene(MQTT_3_1_1)
    async with env.counted("connect_timeout"):
        raw = await env.open()
        await raw.send_bytes(sent)
        assert await raw.until_closed(timeout=5) == []  # connect_timeout is 1 s
    await env.still_serves()
