"""ACLs and session takeover of the embedded broker, with real paho clients (3.1.1 and 5.0)
against a real bridge running the shipped rules/redis.conf on the test Redis (docs/security.md#4-who-may-publish-and-subscribe-acl-file-database-acls).

Negative checks publish a marker afterwards: deliveries to one client keep publish order, so a
message that should not arrive would come before the marker (no sleeps). Publishes are QoS 1:
the PUBACK means the rules have committed (docs/architecture.md#acknowledged-means-kept), so what Redis holds is final by then.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis as redis_sync
from paho.mqtt.enums import MQTTProtocolVersion
from pymongo import AsyncMongoClient

from actions.redis import keys
from bridge.app import Bridge
from bridge.brokers.embedded.codec import MQTT_3_1_1, MQTT_5, Connack, Connect, Pubcomp, Publish, Pubrec, Pubrel, Will
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import V5, V311, Client
from support.raw import RawClient
from support.services import ROOT, postgres_dsn, start_ferretdb, start_postgres

ACL = """\
# anonymous clients: only their own device topics (a pattern below)
user writer
topic write #
topic write $SYS/forged

user reader
topic read #
topic deny secret/#
topic deny queue/secret/#

user limited
topic readwrite dev/#
topic read nosub/#
topic deny nosub/hidden

user sysreader
topic read $SYS/#

user alice
topic readwrite #
user mallory
topic readwrite #

pattern readwrite devices/%c/#
"""

VERSIONS = [pytest.param(V311, id="3.1.1"), pytest.param(V5, id="5.0")]
NOT_AUTHORIZED = {V311: 0x80, V5: 0x87}  # SUBACK per denied filter


@pytest.fixture
async def bridge(make_bridge: BridgeFactory, redis_db: redis_sync.Redis, tmp_path: Path) -> Bridge:
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    # no passwords here: user names are labels (allowed on loopback), so takeover is asked for
    return await make_bridge(extra_config=f"broker.acl.file = {acl}\nbroker.takeover = same_user\n")


class Clients:
    """`await clients(clientid, user, version, clean=...)`: a client that sent CONNECT (its CONNACK: .connack)."""

    def __init__(self, bridge: Bridge) -> None:
        self.port = mqtt_port(bridge)
        self.made: list[Client] = []

    async def __call__(
        self,
        clientid: str,
        username: str | None,
        version: MQTTProtocolVersion = V311,
        password: str | None = None,
        **kwargs: Any,
    ) -> Client:
        client = Client(self.port, clientid, version=version, username=username, password=password, **kwargs)
        self.made.append(client)
        await client.connect()
        return client

    async def refusal(
        self,
        clientid: str,
        username: str | None,
        version: MQTTProtocolVersion,
        clean: bool,
        password: bytes | None = None,
    ) -> int:
        """The CONNACK code a CONNECT gets, as sent (paho turns a 3.1.1 return code into a 5.0 reason)."""
        level = MQTT_5 if version == V5 else MQTT_3_1_1
        raw = await RawClient.open(self.port, level)
        try:
            await raw.send(Connect(clientid, level, clean, username=username, password=password))
            connack = await raw.recv()
            assert isinstance(connack, Connack)
            return connack.reason_code
        finally:
            raw.abort()

    async def close(self) -> None:
        for client in self.made:
            await client.close()


@pytest.fixture
async def connect(bridge: Bridge) -> AsyncIterator[Clients]:
    clients = Clients(bridge)
    yield clients
    await clients.close()


async def marker(sender: Client, topic: str) -> None:
    assert await sender.publish(topic, b"marker", 1) == 0


@pytest.mark.parametrize("version", VERSIONS)
async def test_subscribe_denied_per_filter(connect: Clients, version: Any) -> None:
    limited = await connect("lim1", "limited", version)
    assert await limited.subscribe("dev/#", 1) == [1]
    assert await limited.subscribe("#", 1) == [NOT_AUTHORIZED[version]]  # may not read everything
    assert await limited.subscribe("nosub/hidden", 1) == [NOT_AUTHORIZED[version]]
    assert await limited.subscribe("other/x", 0) == [NOT_AUTHORIZED[version]]
    assert await limited.subscribe("$SYS/#", 0) == [NOT_AUTHORIZED[version]]
    assert await limited.subscribe("devices/lim1/+", 1) == [1]  # %c
    assert await limited.subscribe("devices/other/+", 1) == [NOT_AUTHORIZED[version]]
    # a shared subscription is judged by its filter after $share/<group>/
    assert await limited.subscribe("$share/g/nosub/hidden", 1) == [NOT_AUTHORIZED[version]]
    assert await limited.subscribe("$share/g/dev/+/x", 1) == [1]
    # the granted subscriptions work; the refused ones deliver nothing
    writer = await connect("w1", "writer")
    await writer.publish("other/x", b"no", 1)
    await writer.publish("dev/1", b"yes", 1)
    await marker(writer, "devices/lim1/end")
    got = await limited.until("devices/lim1/end", b"marker")
    assert [(m.topic, m.payload) for m in got] == [("dev/1", b"yes")]


@pytest.mark.parametrize("version", VERSIONS)
async def test_publish_denied_is_dropped_never_stored_nor_routed(
    connect: Clients, redis_db: redis_sync.Redis, bridge: Bridge, version: Any
) -> None:
    reader = await connect("r1", "reader")
    assert await reader.subscribe("#", 1) == [1]
    limited = await connect("lim2", "limited", version)
    denied = 0x87 if version == V5 else 0  # 3.1.1 has no way to say it: acknowledged and dropped
    assert await limited.publish("cmd/dev1/reboot", b"reboot", 1) == denied
    assert await limited.publish("nosub/retained", b"kept?", 1, retain=True) == denied
    assert await limited.publish("devices/other/state", b"forged", 1) == denied
    assert await limited.publish("dev/ok", b"fine", 1) == 0
    assert await limited.publish("devices/lim2/state", b"own", 1) == 0
    got = await reader.until("devices/lim2/state", b"own")
    assert [(m.topic, m.payload) for m in got] == [("dev/ok", b"fine")]
    for topic in ("cmd/dev1/reboot", "nosub/retained", "devices/other/state"):
        assert not redis_db.exists(keys.topic_list(topic)), topic
    assert not redis_db.exists(keys.retain("nosub/retained"))
    assert redis_db.exists(keys.topic_list("dev/ok")) and redis_db.exists(keys.topic_list("devices/lim2/state"))
    assert bridge.broker.refused["acl_publish_denied"] == 3


async def test_qos2_denied_ends_the_exchange_and_frees_its_packet_id(connect: Clients, bridge: Bridge) -> None:
    """5.0 section 4.3.3: a PUBREC with a reason code >= 0x80 ends a QoS 2 exchange (no PUBREL
    follows), so its packet id is free again: a new PUBLISH reusing it is a new message, passed
    on; and denials hold no place in the receive maximum, however many (1,024 of them once
    disconnected the client with 0x93)."""
    reader = await connect("r-q2", "reader")
    assert await reader.subscribe("dev/#", 2) == [2]
    raw = await RawClient.open(mqtt_port(bridge), MQTT_5)
    try:
        await raw.send(Connect("lim-q2", MQTT_5, True, username="limited"))
        assert (await raw.recv()).reason_code == 0
        await raw.send(Publish("cmd/denied", b"denied", 2, packet_id=7))
        assert (await raw.recv()) == Pubrec(7, 0x87)
        await raw.send(Publish("dev/q2", b"first", 2, packet_id=7))  # the same id, a new message
        assert (await raw.recv()) == Pubrec(7, 0)
        await raw.send(Pubrel(7))
        assert (await raw.recv()) == Pubcomp(7, 0)
        denials = 1_100  # past the broker's receive maximum (1,024)
        for packet_id in range(1, denials + 1):
            await raw.send(Publish("cmd/denied", b"denied", 2, packet_id=packet_id))
        answers = [await raw.recv() for _ in range(denials)]
        assert answers == [Pubrec(packet_id, 0x87) for packet_id in range(1, denials + 1)]
        await raw.send(Publish("dev/q2", b"last", 2, packet_id=9))
        assert (await raw.recv()) == Pubrec(9, 0)  # still connected, still accepting
        await raw.send(Pubrel(9))
        assert (await raw.recv()) == Pubcomp(9, 0)
    finally:
        raw.abort()
    got = await reader.until("dev/q2", b"last")
    assert [(m.topic, m.payload) for m in got] == [("dev/q2", b"first")]
    assert bridge.broker.refused["acl_publish_denied"] == 1 + denials


async def test_sys_only_where_an_entry_opens_it(connect: Clients) -> None:
    """`topic read #` does not read $SYS, `topic write #` does not write it; explicit entries do."""
    writer = await connect("w2", "writer")
    reader = await connect("r2", "reader")
    assert await reader.subscribe("$SYS/#", 0) == [0x80]
    sys_reader = await connect("sys1", "sysreader")
    assert await sys_reader.subscribe("$SYS/#", 1) == [1]
    assert await writer.publish("$SYS/anything", b"dropped", 1) == 0
    assert await writer.publish("$SYS/forged", b"allowed", 1) == 0
    got = await sys_reader.message()
    while got.topic.startswith("$SYS/broker/"):  # the broker's own status (broker.sys_interval), retained
        got = await sys_reader.message()
    assert (got.topic, got.payload) == ("$SYS/forged", b"allowed")


async def test_delivery_filtered_live_retained_and_fetched(connect: Clients, redis_db: redis_sync.Redis) -> None:
    """`reader` may subscribe to `#` but not read secret/#: none of those arrive, however sent."""
    writer = await connect("w3", "writer")
    for topic in ("secret/r", "open/r"):
        await writer.publish(topic, topic.encode(), 1, retain=True)
    for topic in ("queue/secret/1", "queue/open/1"):
        await writer.publish(topic, topic.encode(), 1)
    assert redis_db.exists(keys.topic_list("queue/secret/1"))  # stored: the writer may write it

    reader = await connect("r3", "reader", clean=False)
    assert await reader.subscribe("#", 1) == [1]  # retained
    assert await reader.subscribe("queue/+/1", 1) == [1]  # fetched from Redis (persistent session)
    await writer.publish("secret/live", b"live", 1)
    await writer.publish("open/live", b"live", 1)
    await marker(writer, "open/end")
    got = {(m.topic, m.payload) for m in await reader.until("open/end", b"marker")}
    assert not any(topic.startswith(("secret/", "queue/secret/")) for topic, _ in got), got
    assert {("open/r", b"open/r"), ("queue/open/1", b"queue/open/1"), ("open/live", b"live")} <= got


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "persistent"])
async def test_takeover_by_another_user_refused(connect: Clients, version: Any, clean: bool) -> None:
    owner = await connect("dev1", "alice", V311, clean=False)
    assert await owner.subscribe("inbox/dev1", 1) == [1]
    refused = 0x87 if version == V5 else 5
    assert await connect.refusal("dev1", "mallory", version, clean) == refused
    assert await connect.refusal("dev1", None, version, clean) == refused
    # the owner is still connected and still gets its messages
    sender = await connect("s1", "alice")
    await sender.publish("inbox/dev1", b"still yours", 1)
    assert (await owner.message()).payload == b"still yours"

    # offline: its queued messages wait for it, not for the thief
    await owner.disconnect()
    await sender.publish("inbox/dev1", b"queued", 1)
    assert await connect.refusal("dev1", "mallory", version, clean) == refused
    back = await connect("dev1", "alice", V311, clean=False)
    assert (await back.message()).payload == b"queued"


async def test_same_user_takes_over(connect: Clients) -> None:
    first = await connect("dev2", "alice", V311, clean=False)
    assert await first.subscribe("inbox/dev2", 1) == [1]
    second = await connect("dev2", "alice", V311, clean=False)
    assert second.connack and second.connack.reason == 0
    await first.wait_disconnected()
    sender = await connect("s2", "alice")
    await sender.publish("inbox/dev2", b"to the new connection", 1)
    assert (await second.message()).payload == b"to the new connection"


# -- the ACL in a database (EMQX 4 layouts) ----------------------------------------------

PG_PORT = 5439
MONGO_PORT = 27018


async def _check_database_acl(bridge: Bridge, connect: Clients) -> None:
    """The same rows in each database: `dbuser` may read t/#, write up/%c, not read t/secret."""
    client = await connect("c9", "dbuser", V5)
    assert await client.subscribe("t/#", 1) == [1]
    assert await client.subscribe("#", 1) == [0x87]
    assert await client.subscribe("t/secret", 1) == [0x87]
    assert await client.publish("t/x", b"no", 1) == 0x87
    assert await client.publish("up/c9", b"yes", 1) == 0
    assert await client.publish("up/c8", b"not mine", 1) == 0x87
    assert await client.publish("everyone/x", b"$all", 1) == 0
    writer = await connect("w9", "writer")
    await writer.publish("t/secret", b"hidden", 1)
    await writer.publish("t/open", b"shown", 1)
    await writer.publish("t/end", b"marker", 1)
    got = await client.until("t/end", b"marker")
    assert [(m.topic, m.payload) for m in got] == [("t/open", b"shown")]


async def test_redis_acl(make_bridge: BridgeFactory, redis_db: redis_sync.Redis, tmp_path: Path) -> None:
    redis_db.hset("mqtt_acl:dbuser", mapping={"t/#": "1", "up/%c": "2", "everyone/#": "3"})
    redis_db.hset("mqtt_acl:writer", mapping={"#": "2"})
    # Redis holds grants only: t/secret is kept from dbuser by the file's deny, used together
    acl = tmp_path / "acl"
    acl.write_text("user dbuser\ntopic deny t/secret\n")
    bridge = await make_bridge(extra_config=f"broker.acl.backend = redis.pool1\nbroker.acl.file = {acl}\n")
    await _with_clients(bridge, _check_database_acl)


async def _with_clients(bridge: Bridge, check: Callable[[Bridge, Clients], Awaitable[None]]) -> None:
    clients = Clients(bridge)
    try:
        await check(bridge, clients)
    finally:
        await clients.close()


ROWS = [  # (username, clientid, topic, access, allow)
    ("dbuser", None, "t/secret", 1, 0),
    ("dbuser", None, "t/#", 1, 1),
    ("dbuser", None, "up/%c", 2, 1),
    ("$all", None, "everyone/#", 3, 1),
    ("writer", None, "#", 2, 1),
    ("other", None, "t/x", 2, 1),  # another user's row: not dbuser's
]


@pytest.fixture
async def pg_acl() -> AsyncIterator[asyncpg.Connection]:
    start_postgres(PG_PORT)
    conn = await asyncpg.connect(postgres_dsn(PG_PORT))
    await conn.execute("DROP TABLE IF EXISTS mqtt_acl")
    await conn.execute(
        "CREATE TABLE mqtt_acl (id SERIAL PRIMARY KEY, allow INTEGER, ipaddr VARCHAR(60), username VARCHAR(100),"
        " clientid VARCHAR(100), access INTEGER, topic VARCHAR(100))"
    )
    await conn.executemany(
        "INSERT INTO mqtt_acl (username, clientid, topic, access, allow) VALUES ($1, $2, $3, $4, $5)", ROWS
    )
    yield conn
    await conn.execute("DROP TABLE IF EXISTS mqtt_acl")
    await conn.close()


async def test_pgsql_acl(make_bridge: BridgeFactory, redis_db: redis_sync.Redis, pg_acl: asyncpg.Connection) -> None:
    pool = (
        f"backend.pgsql.acl.server = 127.0.0.1:{PG_PORT}\nbackend.pgsql.acl.username = hookbridge\n"
        "backend.pgsql.acl.password = hookbridge\nbackend.pgsql.acl.database = mqtt\n"
    )
    bridge = await make_bridge(extra_config=pool + "broker.acl.backend = pgsql.acl\n")
    await _with_clients(bridge, _check_database_acl)


async def test_mongo_acl(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    start_ferretdb(MONGO_PORT)
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{MONGO_PORT}/?directConnection=true"
    )
    collection = client["mqtt_acl_test"]["mqtt_acl"]
    await collection.drop()
    await collection.insert_many(
        [{"username": u, "clientid": c, "topic": t, "access": a, "allow": al} for u, c, t, a, al in ROWS]
    )
    pool = f"backend.mongo.acl.server = 127.0.0.1:{MONGO_PORT}\nbackend.mongo.acl.database = mqtt_acl_test\n"
    try:
        bridge = await make_bridge(extra_config=pool + "broker.acl.backend = mongo.acl\n")
        await _with_clients(bridge, _check_database_acl)
    finally:
        await client.drop_database("mqtt_acl_test")
        await client.close()


async def test_database_down_refuses_logins(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    """An ACL that cannot be read never lets a client in: CONNACK 3 / 0x88, counted."""
    pool = "backend.redis.down.server = 127.0.0.1:1\nbackend.redis.down.request_timeout = 1s\n"
    bridge = await make_bridge(extra_config=pool + "broker.acl.backend = redis.down\nbroker.acl.nomatch = allow\n")

    async def check(bridge: Bridge, connect: Clients) -> None:
        for version, code in ((V311, 3), (V5, 0x88)):
            assert await connect.refusal(f"x{code}", "anyone", version, True) == code
        assert bridge.broker.refused["login_backend_down"] == 2

    await _with_clients(bridge, check)


async def test_authenticated_users_superuser_and_takeover_by_default(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, tmp_path: Path
) -> None:
    """With users checked (EMQX 4 users in Redis), takeover is same_user without asking; a
    superuser may do everything, `$SYS` included, whatever the ACL says."""
    for user, superuser in (("root", 1), ("alice", 0), ("mallory", 0)):
        redis_db.hset(f"mqtt_user:{user}", mapping={"password": f"pw-{user}", "is_superuser": superuser})
    acl = tmp_path / "acl"
    acl.write_text("user alice\ntopic readwrite #\nuser mallory\ntopic readwrite #\n")
    config = f"broker.auth.backend = redis.pool1\nbroker.auth.password_hash = plain\nbroker.acl.file = {acl}\n"
    bridge = await make_bridge(extra_config=config)

    async def check(bridge: Bridge, connect: Clients) -> None:
        root = await connect("root1", "root", V5, password="pw-root")
        assert await root.subscribe("$SYS/#", 1) == [1]
        alice = await connect("dev7", "alice", V311, password="pw-alice", clean=False)
        assert alice.connack and alice.connack.reason == 0
        assert await alice.subscribe("$SYS/#", 1) == [0x80]  # `#` does not reach $SYS
        assert await alice.subscribe("inbox/dev7", 1) == [1]
        for version, code in ((V311, 5), (V5, 0x87)):
            for clean in (True, False):
                assert await connect.refusal("dev7", "mallory", version, clean, b"pw-mallory") == code
        assert await connect.refusal("dev7", "mallory", V311, False, b"wrong") == 4
        assert await root.publish("inbox/dev7", b"from root", 1) == 0
        assert (await alice.message()).payload == b"from root"

    await _with_clients(bridge, check)


async def test_sighup_reload_reaches_connected_clients(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite a/#\n")
    bridge = await make_bridge(extra_config=f"broker.acl.file = {acl}\n")

    async def check(bridge: Bridge, connect: Clients) -> None:
        client = await connect("c1", None, V5)
        assert await client.publish("a/1", b"x", 1) == 0
        assert await client.publish("b/1", b"x", 1) == 0x87
        acl.write_text("topic readwrite b/#\n")
        assert await bridge.reload()
        assert await client.publish("a/1", b"x", 1) == 0x87  # the same connection, the new file
        assert await client.publish("b/1", b"x", 1) == 0
        acl.write_text("topic readwrite c/#\ntopic sideways d\n")
        await bridge.reload()
        assert f"{acl}:2:7: 'sideways' is not an access" in caplog.text
        assert await client.publish("b/1", b"x", 1) == 0  # a broken file changes nothing
        assert await client.publish("c/1", b"x", 1) == 0x87

    await _with_clients(bridge, check)


async def test_redis_acl_read_once_per_user_for_many_logins(redis_port: int, redis_db: redis_sync.Redis) -> None:
    """1,000 logins of one user (each its own client id) read `mqtt_acl:<user>` once (cache 30 s)."""
    from bridge.brokers.embedded.auth.aclsource import acl_from_config
    from support.conf import make_config

    redis_db.hset("mqtt_acl:fleet", mapping={"fleet/%c/#": "3"})
    acl = acl_from_config(make_config(redis_port, "broker.acl.backend = redis.pool1\n"))
    assert acl is not None and acl.store is not None
    before = redis_db.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
    try:
        for n in range(1000):
            permissions = await acl.permissions_for("fleet", f"dev{n}")
            assert permissions.may_publish(f"fleet/dev{n}/x") and not permissions.may_publish("fleet/other/x")
    finally:
        await acl.close()
    assert redis_db.info("commandstats")["cmdstat_hgetall"]["calls"] - before == 1
    assert acl.store.lookups == 1


def test_check_and_run_report_every_acl_file_problem(tmp_path: Path, redis_port: int) -> None:
    """`hookbridge check` and `run` refuse an ACL file with the same `path:line:col` lines."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "acl").write_text(
        "# devices\ntopic read dev/#\nuser ann\ntopic raed dev/+/x\npattern write up/x%c\ntopik read a\n"
    )
    (tmp_path / "config" / "bridge.conf").write_text(
        "broker.listener.tcp = 127.0.0.1:0\nmetrics.listener = off\nbroker.acl.file = config/acl\n"
        "broker.acl.nomatch = maybe\n"
    )
    expected = [
        "config/bridge.conf:4:22: broker.acl.nomatch: expected one of allow, deny, got 'maybe'",
        "1 problem found",
    ]
    at = "config/bridge.conf:3:19: broker.acl.file: "
    acl_lines = [
        at + "config/acl:4:7: 'raed' is not an access (read, write, readwrite or deny); a filter with a space needs "
        "the access word first (topic readwrite <filter>)",
        at + "config/acl:5:15: 'x%c': %c and %u must each be a whole level of the pattern (like a/%c/b)",
        at + "config/acl:6:1: unknown keyword 'topik' (use topic, pattern or user)",
        "3 problems found",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for lines in (expected, acl_lines):
        for command in ("check", "run"):
            result = subprocess.run(
                [sys.executable, "-m", "bridge", command], cwd=tmp_path, capture_output=True, text=True, env=env
            )
            assert (result.returncode, result.stderr.splitlines()) == (2, lines), command
        config = (tmp_path / "config" / "bridge.conf").read_text()
        (tmp_path / "config" / "bridge.conf").write_text(config.replace("maybe", "deny"))


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_shared_group_gives_a_message_to_a_member_that_may_read_it(connect: Clients, version: Any) -> None:
    """`$share/g/#` with one member the ACL denies `secret/#`: every message reaches the member
    that may read it (the group used to pick in turn first and lose half of them)."""
    reader = await connect("shared-r", "reader", version)  # may not read secret/#
    alice = await connect("shared-a", "alice", version)  # may read everything
    assert await reader.subscribe("$share/g/#", 1) == [1]
    assert await alice.subscribe("$share/g/#", 1) == [1]
    writer = await connect("shared-w", "writer")
    for n in range(10):
        assert await writer.publish(f"secret/{n}", str(n).encode(), 1) == 0
    await marker(writer, "secret/end")  # only alice may read it: it comes after the ten
    got = await alice.until("secret/end", b"marker")
    assert [(m.topic, m.payload) for m in got] == [(f"secret/{n}", str(n).encode()) for n in range(10)]
    # the group still takes turns among members that may read a topic
    for n in range(10):
        assert await writer.publish(f"open/{n}", b"x", 1) == 0
    await marker(writer, "secret/end2")
    shared_with_alice = await alice.until("secret/end2", b"marker")
    assert 0 < len(shared_with_alice) < 10


@pytest.mark.parametrize("version", VERSIONS)
async def test_will_on_a_denied_topic_refuses_the_connect(
    connect: Clients, redis_db: redis_sync.Redis, bridge: Bridge, version: Any
) -> None:
    """docs/security.md#4-who-may-publish-and-subscribe-acl-file-database-acls: a will is checked with the publish permission at CONNECT (as Mosquitto 2):
    CONNACK 5 (3.1.1) / 0x87 (5.0), then closed; never delivered, retained nor stored. A will on
    a topic the client may publish to is accepted and sent when the connection drops."""
    reader = await connect("r-will", "reader")
    assert await reader.subscribe("#", 1) == [1]
    level = MQTT_5 if version == V5 else MQTT_3_1_1
    port = mqtt_port(bridge)
    for topic in ("cmd/dev1/reboot", "nosub/will"):  # `limited` may publish to neither
        raw = await RawClient.open(port, level)
        will = Will(topic, b"forged will", 1, retain=True)
        await raw.send(Connect(f"lim-will-{level}", level, True, 60, will=will, username="limited"))
        connack = await raw.recv()
        assert isinstance(connack, Connack)
        assert connack.reason_code == (0x87 if version == V5 else 5)
        assert await raw.recv() is None  # closed after the refusal
        raw.abort()  # had the CONNECT been taken, this would send the will
    assert bridge.broker.refused["acl_publish_denied"] == 2
    # a will the client may publish: accepted, and published when the connection drops
    raw = await RawClient.open(port, level)
    will = Will("dev/will", b"gone", 1, retain=True)
    await raw.send(Connect(f"lim-ok-{level}", level, True, 60, will=will, username="limited"))
    connack = await raw.recv()
    assert isinstance(connack, Connack) and connack.reason_code == 0
    raw.abort()
    writer = await connect("w-will", "writer")
    await marker(writer, "end/will")
    got = await reader.until("end/will", b"marker")
    assert [(m.topic, m.payload) for m in got] == [("dev/will", b"gone")]
    for topic in ("cmd/dev1/reboot", "nosub/will"):
        assert not redis_db.exists(keys.topic_list(topic)), topic
        assert not redis_db.exists(keys.retain(topic)), topic
    assert redis_db.exists(keys.retain("dev/will"))
