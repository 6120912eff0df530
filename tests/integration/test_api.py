"""The management API (/api/v1/, bridge/api/) against a real bridge: the embedded broker with real
paho clients, the shipped rules on the test Redis. Each endpoint is checked against what the broker
holds and what the clients see; then refusals (no key, a wrong key), hostile input, and the
OpenAPI description against the routes."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
import redis as redis_sync
import yarl

from actions.redis import keys
from bridge.app import Bridge, Paths
from bridge.cli import main
from support.bridges import BridgeFactory, connected, core, mqtt_port
from support.mqtt import V5, V311, Client
from support.services import start_mosquitto
from tests.integration.mqtt_support import MOSQUITTO_PORT, external_config
from tests.integration.test_broker_auth_db import PG_POOL, pg_users

KEY = "k3y-for-the-tests-0123456789"
WRONG = "not-the-key-0123456789"
KEY_LINE = f"api.keys = ops:sha256:{hashlib.sha256(KEY.encode()).hexdigest()}\n"
__all__ = ["pg_users"]  # a fixture, used by name

ACL = "topic readwrite #\n\nuser limited\ntopic readwrite dev/#\n\npattern readwrite devices/%c/#\n"


class Api:
    def __init__(self, bridge: Bridge, session: aiohttp.ClientSession, key: str | None = KEY) -> None:
        assert bridge.status is not None
        self.base = f"http://127.0.0.1:{bridge.status.port}/api/v1"
        self.session = session
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def call(self, method: str, path: str | yarl.URL, **kwargs: Any) -> tuple[int, Any]:
        """A path after /api/v1, or a whole URL sent exactly as it is (its percent-escapes kept)."""
        headers = {**self.headers, **kwargs.pop("headers", {})}
        url = path if isinstance(path, yarl.URL) else self.base + path
        async with self.session.request(method, url, headers=headers, **kwargs) as answer:
            body = await answer.read()
            return answer.status, (await answer.json() if answer.content_type == "application/json" else body)

    async def get(self, path: str, **kwargs: Any) -> Any:
        status, body = await self.call("GET", path, **kwargs)
        assert status == 200, (status, body)
        return body


@pytest.fixture
def make_api_bridge(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> Any:
    """conftest's make_bridge (the shipped rules/redis.conf on the flushed test Redis) with the
    HTTP listener on a free port: `await make_api_bridge(extra_config, rules=None)`."""

    async def factory(extra: str, rules: str | None = None) -> Bridge:
        return await make_bridge(rules, extra, http=True)

    return factory


@pytest.fixture
async def bridge(make_api_bridge: Any, tmp_path: Path) -> Bridge:
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    return await make_api_bridge(f"api.enabled = on\n{KEY_LINE}broker.acl.file = {acl}\n")  # type: ignore[no-any-return]


@pytest.fixture
async def api(bridge: Bridge) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(bridge, session)


async def test_clients_sessions_and_kick(bridge: Bridge, api: Api, clients: list[Client]) -> None:
    a = await connected(bridge, clients, "dev-a", version=V5)
    await connected(bridge, clients, "dev-b", version=V311, user="limited")
    gone = await connected(bridge, clients, "other/../x", version=V311, clean=False)
    assert await gone.subscribe("dev/#", 1) == [1]
    await gone.disconnect()  # its session stays
    page = await api.get("/clients")
    listed = {c["clientid"]: c for c in page["data"]}
    assert {"dev-a", "dev-b"} <= set(listed)
    assert listed["dev-a"]["connected"] is True and listed["dev-a"]["proto_ver"] == 5
    assert listed["dev-b"]["username"] == "limited"
    assert [c["clientid"] for c in (await api.get("/clients", params={"user": "limited"}))["data"]] == ["dev-b"]
    assert [c["clientid"] for c in (await api.get("/clients", params={"prefix": "dev-"}))["data"]] == ["dev-a", "dev-b"]
    # paging: one per page, the cursor walks the sorted ids
    first = await api.get("/clients", params={"prefix": "dev-", "limit": "1"})
    assert [c["clientid"] for c in first["data"]] == ["dev-a"] and first["next"] == "dev-a"
    second = await api.get("/clients", params={"prefix": "dev-", "limit": "1", "cursor": first["next"]})
    assert [c["clientid"] for c in second["data"]] == ["dev-b"] and second["next"] is None

    # connected ones (from the broker's connections), a page at a time
    now = await api.get("/clients", params={"connected": "true", "limit": "1"})
    assert [c["clientid"] for c in now["data"]] == ["dev-a"] and now["next"] == "dev-a"
    now = await api.get("/clients", params={"connected": "true", "limit": "1", "cursor": "dev-a"})
    assert [c["clientid"] for c in now["data"]] == ["dev-b"] and now["next"] is None
    assert [c["clientid"] for c in (await api.get("/clients", params={"connected": "false"}))["data"]] == ["other/../x"]
    assert (await api.get("/clients", params={"connected": "true", "prefix": "dev-b"}))["data"][0][
        "clientid"
    ] == "dev-b"

    assert (await api.get("/clients/dev-a"))["connected"] is True
    assert (await api.call("GET", "/clients/nobody"))[0] == 404

    # kick: the client sees the broker's DISCONNECT (5.0: 0x98 administrative action), the broker drops it
    status, body = await api.call("DELETE", "/clients/dev-a")
    assert status == 200 and body == {"kicked": "dev-a"}
    code, _props = await a.wait_disconnected()
    assert code == 0x98
    assert "dev-a" not in core(bridge).states  # a clean session ends with its connection
    assert (await api.call("DELETE", "/clients/dev-a"))[0] == 404
    offline = await api.get("/clients", params={"connected": "false"})
    assert [c["clientid"] for c in offline["data"]] == ["other/../x"]
    # an id with `/` and `..`, percent-encoded, names that client exactly
    assert (await api.get("/sessions/" + quote("other/../x", safe="")))["subscriptions"][0]["filter"] == "dev/#"


# Client ids with what MQTT allows in them and a URL or a terminal treats specially
ODD_IDS = ["ctl\x01id", "new\nline", "del\x7f", "c1\x85", "a/b", "50%", "%41", "with space", "q?x#y", "{br}", "ünï+"]


async def test_client_ids_with_any_mqtt_character_are_listed_shown_and_kicked(
    bridge: Bridge, api: Api, clients: list[Client]
) -> None:
    """The finding: clients whose id has control characters were accepted at CONNECT but the API
    answered 400 to show or kick them. Ids are percent-encoded in paths (every byte but unreserved)."""
    made = {clientid: await connected(bridge, clients, clientid, version=V5) for clientid in ODD_IDS}
    listed = [c["clientid"] for c in (await api.get("/clients", params={"limit": "1000"}))["data"]]
    assert set(ODD_IDS) <= set(listed)
    for clientid in ODD_IDS:
        assert [c["clientid"] for c in (await api.get("/clients", params={"prefix": clientid}))["data"]] == [clientid]
        path = "/clients/" + quote(clientid, safe="")
        status, shown = await api.call("GET", yarl.URL(api.base + path, encoded=True))
        assert (status, shown.get("clientid")) == (200, clientid), (clientid, shown)
        status, session = await api.call(
            "GET", yarl.URL(api.base + "/sessions/" + quote(clientid, safe=""), encoded=True)
        )
        assert (status, session.get("clientid")) == (200, clientid), (clientid, session)
        status, kicked = await api.call("DELETE", yarl.URL(api.base + path, encoded=True))
        assert (status, kicked) == (200, {"kicked": clientid}), clientid
        await made[clientid].wait_disconnected()
        assert clientid not in core(bridge).active
    # U+0000 is the one character MQTT never allows in a string
    assert (await api.call("GET", yarl.URL(api.base + "/clients/a%00b", encoded=True)))[0] == 400


async def test_an_offline_session_with_its_queue(bridge: Bridge, api: Api, clients: list[Client]) -> None:
    sleeper = await connected(bridge, clients, "sleeper", version=V311, clean=False)
    assert await sleeper.subscribe("q/#", 1) == [1]
    await sleeper.disconnect()
    sender = await connected(bridge, clients, "sender", version=V5)
    for n in range(3):
        assert await sender.publish("q/x", b"m%d" % n, 1) == 0
    session = await api.get("/sessions/sleeper")
    state = core(bridge).states["sleeper"]
    assert session["connected"] is False and session["clean"] is False
    assert session["subscriptions"] == [{"filter": "q/#", "qos": 1, "no_local": False, "identifier": 0}]
    assert session["queue"] == {"messages": 3, "bytes": state.outbox_bytes} and state.outbox_bytes > 0
    assert session["inflight"] == 0
    assert "sleeper" in [s["clientid"] for s in (await api.get("/sessions", params={"connected": "false"}))["data"]]
    assert (await api.call("DELETE", "/clients/sleeper"))[0] == 409  # not connected: nothing to kick


@pytest.mark.parametrize("preload", ["0", "64MB"])
async def test_a_durable_session_is_listed_after_a_restart(make_api_bridge: Any, tmp_path: Path, preload: str) -> None:
    """broker.durable_sessions: a session restored from the store (no connection since the restart)
    is listed with its subscriptions and queued messages: its queue read at start (the default,
    broker.durable_preload) or when one session's view first needs it."""
    extra = f"api.enabled = on\n{KEY_LINE}broker.durable_sessions = on\nbroker.durable_dir = {tmp_path / 'store'}\n"
    extra += f"broker.durable_preload = {preload}\n"
    first = await make_api_bridge(extra)
    made: list[Client] = []
    try:
        keeper = await connected(first, made, "keeper", version=V311, clean=False)
        assert await keeper.subscribe("d/#", 1) == [1]
        await keeper.disconnect()
        sender = await connected(first, made, "d-sender", version=V5)
        for n in range(2):
            assert await sender.publish("d/x", b"kept %d" % n, 1) == 0
    finally:
        for client in made:
            await client.close()
    await first.stop(drain_timeout=5)
    second = await make_api_bridge(extra)
    async with aiohttp.ClientSession() as session:
        api = Api(second, session)
        listed = await api.get("/sessions", params={"connected": "false"})
        lazy = preload == "0"
        assert [(s["clientid"], s["loaded"]) for s in listed["data"]] == [
            ("keeper", not lazy)
        ]  # lazy: not read back yet
        kept = await api.get("/sessions/keeper")  # one session's view reads its queue back
        assert kept["durable"] is True and kept["connected"] is False and kept["loaded"] is True
        assert [s["filter"] for s in kept["subscriptions"]] == ["d/#"]
        assert kept["queue"]["messages"] == 2 and kept["queue"]["bytes"] > 0
        listed = await api.get("/sessions", params={"connected": "false"})
        assert [s["clientid"] for s in listed["data"]] == ["keeper"]


async def test_a_restored_sessions_acl_holds_for_the_api_as_before_the_restart(
    make_api_bridge: Any, tmp_path: Path
) -> None:
    """The finding: after a restart, publishing through the API as an offline durable client to a
    topic its ACL denies answered 200 (403 before the restart): the restored session's permissions
    were the anonymous broker's."""
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    extra = (
        f"api.enabled = on\n{KEY_LINE}broker.acl.file = {acl}\n"
        f"broker.durable_sessions = on\nbroker.durable_dir = {tmp_path / 'store'}\n"
    )

    async def answers(bridge: Bridge) -> list[int]:
        async with aiohttp.ClientSession() as session:
            api = Api(bridge, session)
            denied = await api.call("POST", "/publish", json={"topic": "other/x", "clientid": "ltd", "payload": "p"})
            allowed = await api.call("POST", "/publish", json={"topic": "dev/x", "clientid": "ltd", "payload": "p"})
            denied_sub = await api.call("POST", "/clients/ltd/subscriptions", json={"filter": "other/#"})
            return [denied[0], allowed[0], denied_sub[0]]

    first = await make_api_bridge(extra)
    made: list[Client] = []
    try:
        away = await connected(first, made, "ltd", version=V311, clean=False, user="limited")
        assert await away.subscribe("dev/#", 1) == [1]
        await away.disconnect()
    finally:
        for client in made:
            await client.close()
    assert await answers(first) == [403, 200, 403]
    await first.stop(drain_timeout=5)
    second = await make_api_bridge(extra)
    assert core(second).states["ltd"].connected is False
    assert await answers(second) == [403, 200, 403]
    assert core(second).states["ltd"].connected is False  # answered from the restored session, not a login


async def test_a_restored_superuser_is_one_from_the_user_database(
    make_api_bridge: Any, tmp_path: Path, pg_users: Any
) -> None:
    """A restored session's permissions are read as at CONNECT: whether its user is a superuser
    too (PostgreSQL's mqtt_user.is_superuser), not only the ACL's entries."""
    for user, superuser in (("root", True), ("boss", False)):
        await pg_users.execute(
            "INSERT INTO mqtt_user (username, password, salt, is_superuser) VALUES ($1, 'pw', NULL, $2)",
            user,
            superuser,
        )
    acl = tmp_path / "acl"
    acl.write_text(ACL)
    extra = (
        f"api.enabled = on\n{KEY_LINE}broker.acl.file = {acl}\n{PG_POOL}broker.auth.backend = pgsql.users\n"
        f"broker.auth.password_hash = plain\nbroker.durable_sessions = on\nbroker.durable_dir = {tmp_path / 'store'}\n"
    )

    async def answers(bridge: Bridge) -> list[int]:
        async with aiohttp.ClientSession() as session:
            api = Api(bridge, session)
            return [
                (await api.call("POST", "/publish", json={"topic": "other/x", "clientid": name}))[0]
                for name in ("root-1", "boss-1")
            ]

    first = await make_api_bridge(extra)
    made: list[Client] = []
    try:
        for user in ("root", "boss"):
            client = Client(mqtt_port(first), f"{user}-1", version=V311, clean=False)
            client.paho.username_pw_set(user, "pw")
            made.append(client)
            assert (await client.connect()).reason == 0
            await client.disconnect()
    finally:
        for client in made:
            await client.close()
    assert await answers(first) == [200, 403]
    await first.stop(drain_timeout=5)
    assert await answers(await make_api_bridge(extra)) == [200, 403]


async def test_subscriptions_added_and_removed_on_a_clients_behalf(
    bridge: Bridge, api: Api, clients: list[Client]
) -> None:
    limited = await connected(bridge, clients, "lim", version=V5, user="limited")
    sender = await connected(bridge, clients, "snd", version=V5)
    status, body = await api.call("POST", "/clients/lim/subscriptions", json={"filter": "dev/+/t", "qos": 1})
    assert status == 201, body
    assert core(bridge).states["lim"].subscriptions["dev/+/t"].qos == 1
    assert await sender.publish("dev/1/t", b"hello", 1) == 0
    message = await limited.message()
    assert (message.topic, message.payload, message.qos) == ("dev/1/t", b"hello", 1)
    listed = await api.get("/subscriptions", params={"clientid": "lim"})
    assert listed["data"] == [{"clientid": "lim", "filter": "dev/+/t", "qos": 1}]
    # the client's ACL: what its own SUBSCRIBE would be refused is refused here
    status, body = await api.call("POST", "/clients/lim/subscriptions", json={"filter": "secret/#", "qos": 0})
    assert status == 403 and "secret/#" not in core(bridge).states["lim"].subscriptions
    # removed: later messages no longer arrive (a marker on a still subscribed topic bounds the wait)
    status, _ = await api.call("DELETE", "/clients/lim/subscriptions", params={"filter": "dev/+/t"})
    assert status == 200 and "dev/+/t" not in core(bridge).states["lim"].subscriptions
    assert (await api.call("POST", "/clients/lim/subscriptions", json={"filter": "dev/m", "qos": 0}))[0] == 201
    assert await sender.publish("dev/1/t", b"not any more", 1) == 0
    assert await sender.publish("dev/m", b"marker", 1) == 0
    assert await limited.until("dev/m", b"marker") == []
    assert (await api.call("DELETE", "/clients/lim/subscriptions", params={"filter": "dev/+/t"}))[0] == 404
    for bad in (
        {"filter": "a/#/b"},
        {"filter": ""},
        {"filter": "a", "qos": 3},
        {"filter": "a", "qos": True},
        {"qos": 1},
    ):
        assert (await api.call("POST", "/clients/lim/subscriptions", json=bad))[0] == 400, bad


async def test_subscriptions_of_one_filter_page_by_client_id(bridge: Bridge, api: Api, clients: list[Client]) -> None:
    """`subscriptions?filter=`: the sessions of that filter (plain or shared), by client id, a page
    at a time; the other filters of those sessions are not listed."""
    for name in ("s3", "s1", "s2"):
        client = await connected(bridge, clients, name, version=V5)
        assert await client.subscribe("grp/#", 1) == [1]
        assert await client.subscribe("$share/g/grp/+", 0) == [0]
        assert await client.subscribe(f"own/{name}", 0) == [0]
    for wanted, qos in (("grp/#", 1), ("$share/g/grp/+", 0)):
        first = await api.get("/subscriptions", params={"filter": wanted, "limit": "2"})
        assert first["data"] == [{"clientid": c, "filter": wanted, "qos": qos} for c in ("s1", "s2")]
        rest = await api.get("/subscriptions", params={"filter": wanted, "limit": "2", "cursor": first["next"]})
        assert rest == {"data": [{"clientid": "s3", "filter": wanted, "qos": qos}], "next": None}
    assert (await api.get("/subscriptions", params={"filter": "own/s2"}))["data"] == [
        {"clientid": "s2", "filter": "own/s2", "qos": 0}
    ]
    assert (await api.get("/subscriptions", params={"filter": "nobody/#"})) == {"data": [], "next": None}
    every = await api.get("/subscriptions", params={"limit": "4"})
    assert [(s["clientid"], s["filter"]) for s in every["data"]] == [
        ("s1", "$share/g/grp/+"),
        ("s1", "grp/#"),
        ("s1", "own/s1"),
        ("s2", "$share/g/grp/+"),
    ]
    assert (await api.call("GET", "/subscriptions", params={"cursor": "not json"}))[0] == 400


async def test_retained_messages_listed_read_and_deleted(bridge: Bridge, api: Api, clients: list[Client]) -> None:
    sender = await connected(bridge, clients, "ret-sender", version=V5)
    for topic, payload in (("r/a", b"one"), ("r/b/c", b"two"), ("s/x", b"\xff\x00")):
        assert await sender.publish(topic, payload, 1, retain=True) == 0
    listed = await api.get("/retained", params={"filter": "r/#"})
    assert [(r["topic"], r["payload"]) for r in listed["data"]] == [("r/a", "one"), ("r/b/c", "two")]
    binary = await api.get("/retained/s/x")
    assert binary["payload"] is None and binary["payload_base64"] == "/wA="
    assert (await api.get("/retained/r/b/c"))["from_clientid"] == "ret-sender"
    status, _ = await api.call("DELETE", "/retained/r/b/c")
    assert status == 200 and core(bridge).router.retained.get("r/b/c") is None
    assert (await api.call("GET", "/retained/r/b/c"))[0] == 404
    late = await connected(bridge, clients, "ret-late", version=V5)
    assert await late.subscribe("r/#", 0) == [0]
    assert (await late.message()).topic == "r/a"
    assert await sender.publish("r/marker", b"m", 1) == 0
    assert await late.until("r/marker", b"m") == []  # r/b/c is not sent any more
    assert (await api.call("GET", "/retained", params={"filter": "r/#/x"}))[0] == 400
    assert (await api.call("GET", "/retained/r/+"))[0] == 400  # a wildcard is not a topic name


async def test_retained_delete_reaches_the_database_and_spares_sys(
    bridge: Bridge, api: Api, clients: list[Client], redis_db: redis_sync.Redis
) -> None:
    """A retained delete is an empty retained publish through the broker's publish path: the
    rules see it (on_retain_delete removes mqtt:retain:<topic>, so on_retain_lookup does not
    bring it back to the next subscriber) and live subscribers get it as from any publisher.
    Before, only the broker's copy went and the next subscriber got the message back from Redis."""
    sender = await connected(bridge, clients, "rd-sender", version=V5)
    assert await sender.publish("rd/a", b"kept", 1, retain=True) == 0
    assert redis_db.exists(keys.retain("rd/a"))
    watcher = await connected(bridge, clients, "rd-watch", version=V5)
    assert await watcher.subscribe("rd/#", 1) == [1]
    assert (await watcher.message()).payload == b"kept"
    status, body = await api.call("DELETE", "/retained/rd/a")
    assert (status, body) == (200, {"deleted": "rd/a"})
    assert not redis_db.exists(keys.retain("rd/a"))  # the answer waited for the rules
    got = await watcher.message()
    assert (got.topic, got.payload) == ("rd/a", b"")
    late = await connected(bridge, clients, "rd-late", version=V5)
    assert await late.subscribe("rd/#", 1) == [1]
    assert await sender.publish("rd/marker", b"m", 1) == 0
    assert await late.until("rd/marker", b"m") == []  # neither the broker nor Redis has it

    # $SYS values are the broker's own: refused, kept
    sys_topics = [r["topic"] for r in (await api.get("/retained", params={"filter": "$SYS/#"}))["data"]]
    assert sys_topics, "no $SYS retained value to try"
    status, body = await api.call("DELETE", "/retained/" + quote(sys_topics[0]))
    assert status == 403 and "$SYS" in body["error"], body
    assert core(bridge).router.retained.get(sys_topics[0]) is not None


async def test_publish_plain_and_as_a_client(bridge: Bridge, api: Api, clients: list[Client]) -> None:
    watcher = await connected(bridge, clients, "watch", version=V5)
    assert await watcher.subscribe("#", 1) == [1]
    limited = await connected(bridge, clients, "lim2", version=V5, user="limited")
    status, body = await api.call("POST", "/publish", json={"topic": "p/1", "payload": "hi", "qos": 1, "retain": True})
    assert status == 200 and body["routed"] == 1, body
    message = await watcher.message()
    assert (message.topic, message.payload, message.qos, message.retain) == ("p/1", b"hi", 1, False)
    assert core(bridge).router.retained.get("p/1") is not None
    status, body = await api.call(
        "POST", "/publish", json={"topic": "dev/9", "payload_base64": "AAE=", "clientid": "lim2"}
    )
    assert status == 200 and body["as"] == "lim2"
    assert (await watcher.message()).payload == b"\x00\x01"
    # the named client's ACL: it may not publish outside dev/#
    assert (await api.call("POST", "/publish", json={"topic": "other", "clientid": "lim2"}))[0] == 403
    assert (await api.call("POST", "/publish", json={"topic": "$SYS/x"}))[0] == 403
    assert (await api.call("POST", "/publish", json={"topic": "x", "clientid": "nobody"}))[0] == 404
    del limited


async def test_rules_pools_status_and_reload(bridge: Bridge, api: Api, clients: list[Client]) -> None:
    await connected(bridge, clients, "counted", version=V5)
    rules = {r["id"]: r for r in (await api.get("/rules"))["data"]}
    rule = rules["redis.client.connected.1"]
    assert rule["pool"] == "redis.pool1" and rule["matched"] >= 1
    assert rule["matched"] == bridge.metrics.rules["redis.client.connected.1"]["matched"]
    pools = (await api.get("/pools"))["data"]
    assert pools[0]["id"] == "redis.pool1" and pools[0]["up"] is True and "spool_bytes" in pools[0]
    status = await api.get("/status")
    assert status["broker"] == {"mode": "embedded", "up": True} and status["uptime"] >= 0
    answer, body = await api.call("POST", "/reload")
    assert answer == 200 and body["reloaded"] is True


async def test_every_route_is_described_and_every_description_is_a_route(bridge: Bridge, api: Api) -> None:
    from openapi_spec_validator import validate

    description = await api.get("/openapi.json")
    validate(description)
    assert bridge.status is not None
    routes = set()
    for route in bridge.status.app.router.routes():
        path = route.resource.canonical if route.resource else ""
        if path.startswith("/api/v1/"):
            routes.add((route.method.lower(), re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)))
    described = {(method, path) for path, ops in description["paths"].items() for method in ops}
    assert routes == described


@pytest.mark.parametrize("key", [None, WRONG, "", KEY + "x", KEY[:-1]])
async def test_refused_without_the_key(bridge: Bridge, key: str | None, caplog: pytest.LogCaptureFixture) -> None:
    async with aiohttp.ClientSession() as session:
        for method, path in (
            ("GET", "/clients"),
            ("POST", "/publish"),
            ("DELETE", "/clients/x"),
            ("GET", "/openapi.json"),
        ):
            status, body = await Api(bridge, session, key).call(method, path, json={"topic": "t"})
            assert status == 401 and body["error"].startswith("a valid API key"), (method, path, status)
        async with session.get(
            Api(bridge, session).base + "/clients", headers={"Authorization": f"Basic {KEY}"}
        ) as answer:
            assert answer.status == 401
    assert all(KEY not in r.getMessage() and WRONG not in r.getMessage() for r in caplog.records)


async def test_mutations_are_logged_with_the_key_name_and_never_the_key(
    bridge: Bridge, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    assert (await api.call("POST", "/publish", json={"topic": "logged/t", "payload": "x"}))[0] == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "bridge.api.routes"]
    assert any(line.startswith("api: key ops: published to 'logged/t'") for line in lines), lines
    assert all(KEY not in r.getMessage() for r in caplog.records)
    _, body = await api.call("GET", "/status")
    assert KEY not in str(body) and "sha256" not in str(body)


async def test_hostile_input(bridge: Bridge, api: Api, clients: list[Client], monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.api import routes

    await connected(bridge, clients, "a/b", version=V5)
    # ids with `/` and `..`: percent-encoded, they name the client exactly; never a path walk
    assert (await api.get("/clients/" + quote("a/b", safe="")))["clientid"] == "a/b"
    for path in (
        "/clients/..",
        "/clients/%2E%2E",
        "/clients/..%2F..%2Fmetrics",
        "/clients/" + quote("../a/b", safe=""),
    ):
        status, _ = await api.call("GET", path)
        assert status == 404, path
    # a huge body: 413, read no further than api.max_body
    status, body = await api.call(
        "POST",
        "/publish",
        data=io.BytesIO(b"{" + b" " * (2 * 1024 * 1024)),
        headers={"Content-Type": "application/json"},
    )
    assert status == 413, body

    # the same without a length (chunked): cut off at api.max_body too
    async def endless() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b" " * 65536

    status, body = await api.call("POST", "/publish", data=endless())
    assert status == 413, body
    # bad JSON, JSON that is not an object, deep nesting
    for raw in (b"{", b"[1]", b"null", b"\xff\xfe", b"[" * 30_000 + b"]" * 30_000, b"[" * 100_000):
        status, body = await api.call("POST", "/publish", data=io.BytesIO(raw))
        assert status in (400, 413) and "error" in body, (raw[:10], status)
    # control characters and wildcards where they do not belong
    # (a client id may hold control characters: a prefix of ESC is a search like any other)
    assert (await api.call("GET", "/clients", params={"prefix": "\x1b[31m"}))[0] == 200
    for params in (
        {"prefix": "a\x00b"},
        {"limit": "0"},
        {"limit": "10001"},
        {"limit": "-1"},
        {"limit": "1e3"},
        {"connected": "maybe"},
    ):
        assert (await api.call("GET", "/clients", params=params))[0] == 400, params
    for body_json in (
        {"topic": "a/+/b"},
        {"topic": "a/#"},
        {"topic": "a\x00b"},
        {"topic": "x\x07"},
        {"topic": 5},
        {"topic": "t", "qos": "1"},
        {"topic": "t", "payload": 5},
        {"topic": "t", "payload_base64": "!!"},
    ):
        assert (await api.call("POST", "/publish", json=body_json))[0] == 400, body_json
    assert (await api.call("GET", "/retained", params={"filter": "a\x00"}))[0] == 400
    assert (await api.call("GET", "/nothing"))[0] == 404
    # dot segments and encoded slashes never reach an API route without a key
    for target in (b"/x/../api/v1/clients", b"/api/v1/./clients", b"/api%2Fv1/clients", b"//api/v1/clients"):
        reader, writer = await asyncio.open_connection("127.0.0.1", bridge.status.port)  # type: ignore[union-attr]
        writer.write(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer[9:12] in (b"401", b"404"), (target, answer[:200])
    # a body that never comes: 408 after the body time (shortened here), the connection closed
    monkeypatch.setattr(routes, "BODY_TIMEOUT", 0.3)
    assert bridge.status is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", bridge.status.port)
    writer.write(
        b"POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + KEY.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    answer = await asyncio.wait_for(reader.read(), 10)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
    writer.close()
    assert (await api.call("PUT", "/clients"))[0] == 405
    assert bridge.broker.is_connected()  # and the broker serves on


async def test_mqtt_mode_answers_what_applies_and_says_why_not(make_api_bridge: Any, tmp_path: Path) -> None:
    """broker.mode = mqtt against the test Mosquitto: status, rules, pools and reload answer; the
    broker's own state (clients, sessions, subscriptions, retained, publish) is 409 with the reason."""
    start_mosquitto(MOSQUITTO_PORT)
    rules = 'backend.redis.hook.message.publish.1 = {"action": {"function": "on_message_publish"}}\n'
    bridge = await make_api_bridge(external_config(tmp_path, state=False) + f"api.enabled = on\n{KEY_LINE}", rules)
    async with aiohttp.ClientSession() as session:
        api = Api(bridge, session)
        assert (await api.get("/status"))["broker"]["mode"] == "mqtt"
        assert "redis.message.publish.1" in {r["id"] for r in (await api.get("/rules"))["data"]}
        assert [p["id"] for p in (await api.get("/pools"))["data"]] == ["redis.pool1"]
        assert (await api.call("POST", "/reload"))[0] == 200
        for method, path in (
            ("GET", "/clients"),
            ("GET", "/clients/x"),
            ("DELETE", "/clients/x"),
            ("GET", "/sessions"),
            ("GET", "/subscriptions"),
            ("GET", "/retained"),
            ("DELETE", "/retained/a/b"),
            ("GET", "/bans"),
            ("DELETE", "/bans/clientid/x"),
            ("DELETE", "/sessions/x"),
            ("GET", "/sessions/x/queue"),
            ("DELETE", "/sessions/x/inflight"),
        ):
            status, body = await api.call(method, path)
            assert status == 409 and "broker.mode = mqtt" in body["error"], (method, path, status, body)
        status, body = await api.call("POST", "/publish", json={"topic": "t"})
        assert status == 409 and "broker.mode = mqtt" in body["error"]
        status, body = await api.call("POST", "/bans", json={"as": "clientid", "who": "x"})
        assert status == 409 and "broker.mode = mqtt" in body["error"]
        assert [k["name"] for k in (await api.get("/keys"))["data"]] == ["ops"]  # keys are the bridge's own


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ("metrics.listener = 0.0.0.0:9100\napi.enabled = on\n", "can be reached from the network"),
        ("metrics.listener = 0.0.0.0:9100\napi.enabled = on\napi.allow_anonymous_loopback = on\n", "can be reached"),
        ("metrics.listener = 127.0.0.1:9100\napi.enabled = on\n", "api.allow_anonymous_loopback is off"),
        ("metrics.listener = off\napi.enabled = on\n" + KEY_LINE, "needs metrics.listener"),
        ("api.keys = ops:" + KEY + "\n", "<name>:sha256:<64 hex digits>"),
        ("api.keys = ops:sha256:abc\n", "<name>:sha256:<64 hex digits>"),
        ("api.max_page = 0\n", "expected an integer from 1 to 10000"),
        ("api.max_body = 1GB\n", "expected a size from"),
    ],
)
def test_check_refuses_bad_api_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: str, problem: str
) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.conf").write_text("")
    conf = tmp_path / "bridge.conf"
    conf.write_text("backend.redis.pool1.server = 127.0.0.1:6391\n" + lines)
    assert main(["check", "-c", str(conf), "-r", str(tmp_path / "rules")]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"^{re.escape(str(conf))}:\d+:\d+: .*{re.escape(problem)}", err, re.M), err
    assert KEY not in err  # a key pasted in place of its hash is not shown back


def test_check_accepts_a_key_or_anonymous_loopback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.conf").write_text("")
    conf = tmp_path / "bridge.conf"
    base = "backend.redis.pool1.server = 127.0.0.1:6391\napi.enabled = on\n"
    for lines in ("metrics.listener = 0.0.0.0:9100\n" + KEY_LINE, "api.allow_anonymous_loopback = on\n"):
        conf.write_text(base + lines)
        assert main(["check", "-c", str(conf), "-r", str(tmp_path / "rules")]) == 0, capsys.readouterr().err


async def test_anonymous_loopback_when_asked(make_api_bridge: Any) -> None:
    bridge = await make_api_bridge("api.enabled = on\napi.allow_anonymous_loopback = on\n")
    async with aiohttp.ClientSession() as session:
        assert (await Api(bridge, session, None).call("GET", "/clients"))[0] == 200
        assert (await Api(bridge, session, WRONG).call("GET", "/clients"))[0] == 401  # a wrong key is not anonymous


async def test_no_other_web_page_can_drive_the_anonymous_api(make_api_bridge: Any, clients: list[Client]) -> None:
    """The finding: with api.allow_anonymous_loopback a page of any local origin POSTed text/plain
    (published a retained message, subscribed a client to #, reloaded) and a foreign Host was served."""
    bridge = await make_api_bridge("api.enabled = on\napi.allow_anonymous_loopback = on\n")
    await connected(bridge, clients, "victim", version=V311, clean=False)
    broker = core(bridge)
    assert bridge.status is not None
    port = bridge.status.port
    page = {"Origin": "http://localhost:8080", "Content-Type": "text/plain"}  # what a form or fetch() sends unasked
    async with aiohttp.ClientSession() as session:
        api = Api(bridge, session, None)
        publish = '{"topic": "planted", "payload": "x", "retain": true}'
        assert (await api.call("POST", "/publish", data=publish, headers=page))[0] == 403
        no_origin = {"Content-Type": "text/plain"}  # a form post whose browser sends no Origin: still no mark
        assert (await api.call("POST", "/publish", data=publish, headers=no_origin))[0] == 403
        subscribe = '{"filter": "#", "qos": 0}'
        assert (await api.call("POST", "/clients/victim/subscriptions", data=subscribe, headers=page))[0] == 403
        assert (await api.call("POST", "/reload", headers=page))[0] == 403
        assert (await api.call("DELETE", "/clients/victim", headers={"Sec-Fetch-Site": "same-site"}))[0] == 403
        # JSON from another origin (the browser would have asked first; the answer has no CORS header)
        status, _ = await api.call(
            "POST", "/publish", data=publish, headers={**page, "Content-Type": "application/json"}
        )
        assert status == 403
        # DNS rebinding: a page's own name in Host, from loopback
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", "[::1"):
            assert (await api.call("GET", "/clients", headers={"Host": host}))[0] == 403, host
        # a preflight is never granted
        async with session.options(
            api.base + "/publish",
            headers={"Origin": "http://localhost:8080", "Access-Control-Request-Method": "POST"},
        ) as preflight:
            assert "Access-Control-Allow-Origin" not in preflight.headers
        assert "planted" not in {r.topic for r in broker.router.retained_for("#", 0.0)}
        assert broker.states["victim"].subscriptions == {}
        # what is allowed: loopback Host names, JSON or the X-Hookbridge mark, the same origin
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "127.0.0.2"):
            assert (await api.call("GET", "/clients", headers={"Host": host}))[0] == 200, host
        same_origin = {"Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json"}
        status, body = await api.call("POST", "/publish", data=publish, headers=same_origin)
        assert status == 200, body
        assert (await api.call("POST", "/clients/victim/subscriptions", json={"filter": "a/b"}))[0] == 201
        assert (await api.call("DELETE", "/retained/planted", headers={"X-Hookbridge": "x"}))[0] == 200
        assert (await api.call("DELETE", "/clients/victim"))[0] == 403  # a change without either
        # keys mode is unchanged: a key's request is served whatever its Host or content type
    keyed = await make_api_bridge(f"api.enabled = on\n{KEY_LINE}")
    async with aiohttp.ClientSession() as session:
        status, body = await Api(keyed, session).call(
            "POST", "/publish", data='{"topic": "t"}', headers={"Content-Type": "text/plain", "Host": "evil.example"}
        )
        assert status == 200, body


async def test_off_by_default(make_api_bridge: Any) -> None:
    bridge = await make_api_bridge(KEY_LINE)
    async with aiohttp.ClientSession() as session:
        status, _ = await Api(bridge, session).call("GET", "/clients")
        assert status == 404
    await asyncio.sleep(0)


def test_run_refuses_an_api_reachable_without_a_key(tmp_path: Path) -> None:
    """What check refuses, run refuses before it opens anything (the same config loading)."""
    from bridge.conf.errors import ConfErrors

    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.conf").write_text("")
    conf = tmp_path / "bridge.conf"
    conf.write_text("backend.redis.pool1.server = 127.0.0.1:6391\nmetrics.listener = 0.0.0.0:0\napi.enabled = on\n")
    with pytest.raises(ConfErrors, match=r"bridge.conf:3:15: api.enabled = on with no api.keys"):
        Bridge.load(Paths(conf, tmp_path / "rules"))


def test_keys_match_by_hash_only() -> None:
    from bridge.conf.apikeys import key_name, parse_api_keys

    digest = hashlib.sha256(KEY.encode()).hexdigest()
    keys = parse_api_keys(f"ops:sha256:{digest.upper()}, ci:sha256:{hashlib.sha256(b'other').hexdigest()}")
    assert key_name(keys, KEY) == "ops" and key_name(keys, "other") == "ci"
    assert key_name(keys, digest) is None  # the hash itself is not a key
    assert key_name(keys, "") is None and key_name(keys, "\udcff") is None
    with pytest.raises(ValueError, match="given twice"):
        parse_api_keys(f"a:sha256:{digest}, a:sha256:{digest}")
    with pytest.raises(ValueError, match="never the key") as pasted:
        parse_api_keys(f"ops:{KEY}")
    assert KEY not in str(pasted.value)


async def test_https_when_the_listener_has_a_certificate(make_api_bridge: Any, tmp_path: Path) -> None:
    import ssl

    from support.tls import make_certificates

    (tmp_path / "tls").mkdir()
    certs = make_certificates(tmp_path / "tls")
    tls = f"metrics.listener.certfile = {certs.cert}\nmetrics.listener.keyfile = {certs.key}\n"
    bridge = await make_api_bridge(f"api.enabled = on\n{KEY_LINE}{tls}")
    assert bridge.status is not None
    trusted = ssl.create_default_context(cafile=str(certs.ca))
    trusted.check_hostname = False
    async with aiohttp.ClientSession() as session:
        base = f"https://127.0.0.1:{bridge.status.port}"
        async with session.get(
            base + "/api/v1/rules", ssl=trusted, headers={"Authorization": f"Bearer {KEY}"}
        ) as answer:
            assert answer.status == 200
        async with session.get(base + "/healthz", ssl=trusted) as answer:
            assert answer.status == 200
        with pytest.raises(aiohttp.ClientError):  # plain HTTP to the TLS listener
            async with session.get(f"http://127.0.0.1:{bridge.status.port}/healthz") as answer:
                await answer.read()


def test_check_refuses_a_certificate_it_cannot_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.conf").write_text("")
    (tmp_path / "not.pem").write_text("not a certificate\n")
    conf = tmp_path / "bridge.conf"
    conf.write_text(
        f"backend.redis.pool1.server = 127.0.0.1:6391\nmetrics.listener.certfile = {tmp_path / 'not.pem'}\n"
    )
    assert main(["check", "-c", str(conf), "-r", str(tmp_path / "rules")]) == 2
    assert f"{conf}:2:29: cannot load {tmp_path / 'not.pem'}" in capsys.readouterr().err
