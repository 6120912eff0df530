"""/api/v1/openapi.json (bridge/api/openapi.py, schemas.py) against the answers of a real running
bridge (the embedded broker with real paho clients, the shipped rules on the test Redis): every
route is called, its successes and its refusals; each answer's status must be one the description
documents for that route, and its body must match the schema documented for that status. Every
documented success is seen at least once."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
import redis as redis_sync
from openapi_schema_validator import OAS30Validator, validate

from bridge.app import Bridge, Paths
from support.bridges import mqtt_port
from support.conf import config_text
from support.mqtt import V5, V311, Client
from support.services import ROOT

ADMIN, READER = "openapi-admin-0123456789", "openapi-reader-0123456789"
ACL = "topic readwrite #\n\nuser limited\ntopic readwrite dev/#\n"


def _entry(name: str, key: str, scope: str = "") -> str:
    return f"{name}:sha256:{hashlib.sha256(key.encode()).hexdigest()}" + (f":{scope}" if scope else "")


@pytest.fixture
async def bridge(tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis) -> AsyncIterator[Bridge]:
    home = tmp_path / "bridge"
    (home / "rules").mkdir(parents=True)
    shutil.copytree(ROOT / "templates", home / "templates")
    shutil.copy(ROOT / "rules" / "redis.conf", home / "rules" / "redis.conf")
    (home / "acl").write_text(ACL)
    extra = f"spool.dir = {home / 'spool'}\ndeadletter.dir = {home / 'dl'}\napi.enabled = on\n"
    extra += f"api.keys = {_entry('ops', ADMIN)}, {_entry('viewer', READER, 'read')}\n"
    extra += f"broker.acl.file = {home / 'acl'}\nbroker.bans_file = {home / 'bans.json'}\napi.sample_interval = 200ms\n"
    text = config_text(redis_port, extra).replace("metrics.listener = off\n", "metrics.listener = 127.0.0.1:0\n")
    (home / "bridge.conf").write_text(text)
    started = Bridge.load(Paths(home / "bridge.conf", home / "rules"))
    await started.start()
    yield started
    await started.stop(drain_timeout=5)


class Checked:
    """Calls the API and checks each answer against the description."""

    def __init__(self, description: dict[str, Any], session: aiohttp.ClientSession, base: str) -> None:
        self.description = description
        self.session = session
        self.base = base
        self.seen: set[tuple[str, str, str]] = set()

    async def call(
        self, method: str, route: str, key: str | None = ADMIN, ids: dict[str, str] | None = None, **kwargs: Any
    ) -> tuple[int, Any]:
        path = route
        for name, value in (ids or {}).items():
            path = path.replace(f"{{{name}}}", quote(value, safe="/" if name in ("topic", "who") else ""))
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with self.session.request(method, self.base + path, headers=headers, **kwargs) as answer:
            status, body = answer.status, await answer.json()
        op = self.description["paths"][f"/api/v1{route}"][method.lower()]
        assert str(status) in op["responses"], f"{method} {route}: {status} is not documented ({body})"
        schema = op["responses"][str(status)]["content"]["application/json"]["schema"]
        validate(body, {**schema, "components": self.description["components"]}, cls=OAS30Validator)
        self.seen.add((method.lower(), route, str(status)))
        return status, body


async def test_every_answer_is_documented_and_matches_its_schema(bridge: Bridge) -> None:
    assert bridge.status is not None
    base = f"http://127.0.0.1:{bridge.status.port}/api/v1"
    made: list[Client] = []
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/openapi.json", headers={"Authorization": f"Bearer {ADMIN}"}) as answer:
            description = await answer.json()
        api = Checked(description, session, base)
        try:
            await exercise(api, bridge, made)
        finally:
            for client in made:
                await client.close()
    successes = {
        (method, path.removeprefix("/api/v1"), status)
        for path, ops in description["paths"].items()
        for method, op in ops.items()
        for status in op["responses"]
        if status.startswith("2")
    }
    assert successes - api.seen == set()
    refusals = {status for _method, _route, status in api.seen if not status.startswith("2")}
    assert refusals >= {"400", "401", "403", "404", "409"}


async def exercise(api: Checked, bridge: Bridge, made: list[Client]) -> None:
    port = mqtt_port(bridge)

    async def connected(clientid: str, **kwargs: Any) -> Client:
        user = kwargs.pop("user", None)
        client = Client(port, clientid, **kwargs)
        if user:
            client.paho.username_pw_set(user)
        made.append(client)
        assert (await client.connect()).reason == 0
        return client

    device = await connected("dev-a", version=V5, user="limited")
    keeper = await connected("keeper", version=V311, clean=False)
    assert await keeper.subscribe("dev/#", 1) == [1]
    await keeper.disconnect()
    assert await device.publish("dev/1", b"one", 1, retain=True) == 0
    assert await device.publish("dev/2", b"\xff\xfe", 1) == 0
    await bridge.idle()

    await api.call("GET", "/openapi.json")
    await api.call("GET", "/status")
    assert (await api.call("GET", "/status", key=None))[0] == 401
    for route in ("/clients", "/sessions", "/subscriptions", "/retained", "/rules", "/pools", "/bans", "/keys"):
        assert (await api.call("GET", route))[0] == 200, route
    assert (await api.call("GET", "/clients", params={"limit": "0"}))[0] == 400
    assert (await api.call("GET", "/stats"))[0] == 200
    status, client = await api.call("GET", "/clients/{clientid}", ids={"clientid": "dev-a"})
    assert status == 200 and client["connected"] and client["messages_in"] == 2
    assert (await api.call("GET", "/clients/{clientid}", ids={"clientid": "nobody"}))[0] == 404
    assert (await api.call("GET", "/sessions/{clientid}", ids={"clientid": "keeper"}))[0] == 200
    assert (await api.call("GET", "/sessions/{clientid}", ids={"clientid": "nobody"}))[0] == 404
    status, queued = await api.call("GET", "/sessions/{clientid}/queue", ids={"clientid": "keeper"})
    assert status == 200 and [m["payload"] for m in queued["data"]] == ["one", None]
    assert (await api.call("GET", "/sessions/{clientid}/inflight", ids={"clientid": "keeper"}))[0] == 200
    assert (await api.call("GET", "/sessions/{clientid}/queue", ids={"clientid": "nobody"}))[0] == 404

    # subscriptions on a client's behalf
    sub = {"filter": "dev/x", "qos": 1}
    assert (await api.call("POST", "/clients/{clientid}/subscriptions", ids={"clientid": "dev-a"}, json=sub))[0] == 201
    denied = {"filter": "other/#", "qos": 0}
    status, _ = await api.call("POST", "/clients/{clientid}/subscriptions", ids={"clientid": "dev-a"}, json=denied)
    assert status == 403  # its ACL
    assert (await api.call("POST", "/clients/{clientid}/subscriptions", ids={"clientid": "dev-a"}, json=[]))[0] == 400
    unsub = {"ids": {"clientid": "dev-a"}, "params": {"filter": "dev/x"}}
    assert (await api.call("DELETE", "/clients/{clientid}/subscriptions", **unsub))[0] == 200  # type: ignore[arg-type]
    assert (await api.call("DELETE", "/clients/{clientid}/subscriptions", **unsub))[0] == 404  # type: ignore[arg-type]

    # retained messages and publish
    assert (await api.call("GET", "/retained/{topic}", ids={"topic": "dev/1"}))[0] == 200
    assert (await api.call("GET", "/retained/{topic}", ids={"topic": "dev/none"}))[0] == 404
    assert (await api.call("GET", "/retained/{topic}", ids={"topic": "dev/+"}))[0] == 400
    assert (await api.call("POST", "/publish", json={"topic": "dev/3", "payload": "p", "retain": True}))[0] == 200
    assert (await api.call("POST", "/publish", json={"topic": "dev/4", "payload": "p", "clientid": "dev-a"}))[0] == 200
    assert (await api.call("POST", "/publish", json={"topic": "x/4", "clientid": "dev-a"}))[0] == 403
    assert (await api.call("POST", "/publish", json={"topic": "x/4", "clientid": "ghost"}))[0] == 404
    assert (await api.call("DELETE", "/retained/{topic}", ids={"topic": "dev/3"}))[0] == 200
    assert (await api.call("DELETE", "/retained/{topic}", ids={"topic": "dev/3"}))[0] == 404

    # scopes: a read key reads, and is refused changes
    assert (await api.call("GET", "/clients", key=READER))[0] == 200
    assert (await api.call("DELETE", "/clients/{clientid}", key=READER, ids={"clientid": "dev-a"}))[0] == 403
    assert (await api.call("GET", "/keys", key=READER))[0] == 403

    # bans
    ban = {"as": "clientid", "who": "dev-b", "duration": 60}
    assert (await api.call("POST", "/bans", json=ban))[0] == 201
    assert (await api.call("POST", "/bans", json={"as": "ip", "who": "x"}))[0] == 400
    assert (await api.call("DELETE", "/bans/{as}/{who}", ids={"as": "clientid", "who": "dev-b"}))[0] == 200
    assert (await api.call("DELETE", "/bans/{as}/{who}", ids={"as": "clientid", "who": "dev-b"}))[0] == 404

    # sessions: purge, remove; the connected client's session is not removed
    keeper_id = {"clientid": "keeper"}
    assert (await api.call("DELETE", "/sessions/{clientid}/queue", ids=keeper_id))[0] == 200
    assert (await api.call("DELETE", "/sessions/{clientid}/inflight", ids=keeper_id))[0] == 200
    assert (await api.call("DELETE", "/sessions/{clientid}/inflight", ids={"clientid": "dev-a"}))[0] == 409
    assert (await api.call("DELETE", "/sessions/{clientid}", ids={"clientid": "dev-a"}))[0] == 409
    assert (await api.call("DELETE", "/clients/{clientid}", ids=keeper_id))[0] == 409  # offline persistent session
    assert (await api.call("DELETE", "/sessions/{clientid}", ids=keeper_id))[0] == 200
    assert (await api.call("DELETE", "/sessions/{clientid}", ids=keeper_id))[0] == 404

    # kick, then the same kick again: the clean-session client is gone
    assert (await api.call("DELETE", "/clients/{clientid}", ids={"clientid": "dev-a"}))[0] == 200
    assert (await api.call("DELETE", "/clients/{clientid}", ids={"clientid": "dev-a"}))[0] == 404
    assert (await api.call("POST", "/reload"))[0] == 200
