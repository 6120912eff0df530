"""`GET /api/v1/clients?user=NAME` and `sessions?user=` from the session table's index of each
user's sessions (bridge/brokers/embedded/sessiontable.py), against a real bridge with real paho
clients: the answer follows connect, takeover by another user (resumed and clean), disconnect,
expiry and a restart with durable sessions; and a request reads the user's sessions, not the
others'.

The finding: `?user=` read every session of the broker to find one user's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bridge.api import paging, routes
from bridge.app import Bridge
from support.bridges import BridgeFactory, connected, core, eventually
from support.mqtt import V311, Client

KEY = "k3y-for-the-user-index-0123456789"
KEY_LINE = f"api.keys = ops:sha256:{hashlib.sha256(KEY.encode()).hexdigest()}\n"


async def listed(bridge: Bridge, path: str, user: str, limit: int = 2) -> list[tuple[str, bool]]:
    """Every page of `path?user=`, cursor to cursor: (client id, connected) in the pages' order."""
    assert bridge.status is not None
    base = f"http://127.0.0.1:{bridge.status.port}/api/v1"
    found: list[tuple[str, bool]] = []
    cursor = ""
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as session:
        while True:
            params = {"user": user, "limit": str(limit), **({"cursor": cursor} if cursor else {})}
            async with session.get(base + path, params=params) as answer:
                body = await answer.json()
                assert answer.status == 200, body
            found.extend((each["clientid"], each["connected"]) for each in body["data"])
            assert all(each["username"] == user for each in body["data"])
            if body["next"] is None:
                return found
            cursor = body["next"]


async def settled() -> None:
    """What `eventually` reads: nothing; its check looks at the broker itself."""


async def users(bridge: Bridge, *names: str) -> dict[str, list[tuple[str, bool]]]:
    """Each user's sessions as both lists answer them (they must agree)."""
    answers = {}
    for name in names:
        clients = await listed(bridge, "/clients", name)
        assert await listed(bridge, "/sessions", name, limit=1) == clients
        answers[name] = clients
    return answers


async def test_a_users_sessions_through_connect_takeover_disconnect_expiry_and_restart(
    make_bridge: BridgeFactory, tmp_path: Path
) -> None:
    extra = (
        f"api.enabled = on\n{KEY_LINE}broker.takeover = any\n"
        f"broker.durable_sessions = on\nbroker.durable_dir = {tmp_path / 'store'}\n"
    )
    first = await make_bridge("", extra, http=True)
    made: list[Client] = []
    try:
        a1 = await connected(first, made, "a1", user="alice", version=V311, clean=False)
        await connected(first, made, "a2", user="alice", version=V311, clean=False)
        await connected(first, made, "a3", user="alice", version=V311, clean=False)
        b1 = await connected(first, made, "b1", user="bob", version=V311)  # clean: ends with its connection
        await connected(first, made, "d1", user="dave", version=V311, clean=False)
        await connected(first, made, "anon", version=V311)  # no user name: in no user's list
        assert await users(first, "alice", "bob", "carol", "dave") == {
            "alice": [("a1", True), ("a2", True), ("a3", True)],
            "bob": [("b1", True)],
            "carol": [],
            "dave": [("d1", True)],
        }

        # bob resumes a2's session (clean session 0, takeover = any): the same session, bob's now
        before = core(first).states["a2"]
        await connected(first, made, "a2", user="bob", version=V311, clean=False)
        assert core(first).states["a2"] is before and before.username == "bob"
        # carol takes a3 over with a clean session: a new session in its place, carol's
        before = core(first).states["a3"]
        await connected(first, made, "a3", user="carol", version=V311, clean=True)
        assert core(first).states["a3"] is not before
        assert await users(first, "alice", "bob", "carol") == {
            "alice": [("a1", True)],
            "bob": [("a2", True), ("b1", True)],
            "carol": [("a3", True)],
        }

        await a1.disconnect()  # persistent: still alice's, offline
        await b1.disconnect()  # clean: gone
        # (the broker's teardown of each connection runs after the DISCONNECT is read)
        broker = core(first)
        await eventually(settled, lambda _: not broker.states["a1"].connected and "b1" not in broker.states)
        assert await users(first, "alice", "bob") == {"alice": [("a1", False)], "bob": [("a2", True)]}
    finally:
        for client in made:
            await client.close()

    # every connection closed: a2 and d1 offline, carol's clean a3 gone; d1 expires (what the
    # broker's timer calls when its interval is over)
    broker = core(first)
    await eventually(settled, lambda _: not any(s.connected for s in broker.states.values()))
    broker.expire(broker.states["d1"])
    assert set(broker.states) == {"a1", "a2"}
    assert await users(first, "alice", "bob", "carol", "dave") == {
        "alice": [("a1", False)],
        "bob": [("a2", False)],
        "carol": [],
        "dave": [],
    }
    await first.stop(drain_timeout=5)

    second = await make_bridge("", extra, http=True)  # the sessions restored from the durable store
    assert await users(second, "alice", "bob", "carol", "dave") == {
        "alice": [("a1", False)],
        "bob": [("a2", False)],
        "carol": [],
        "dave": [],
    }
    again: list[Client] = []
    try:  # alice logs in again as a2 and resumes it after the restart
        await connected(second, again, "a2", user="alice", version=V311, clean=False)
        assert await users(second, "alice", "bob") == {"alice": [("a1", False), ("a2", True)], "bob": []}
    finally:
        for client in again:
            await client.close()


class Counted:
    """A page source that counts the sessions it looks at (the work of a request)."""

    def __init__(self, source: paging.Source[str]) -> None:
        self.source = source
        self.looked = 0

    def __call__(self, position: str | None) -> Iterator[tuple[str, Any]]:
        for pair in self.source(position):
            self.looked += 1
            yield pair


async def test_a_users_page_reads_that_users_sessions_not_everyone_elses(
    make_bridge: BridgeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 sessions of other users (restored as the durable store restores them) and three of
    `ops`: a page of `?user=ops` looks at ops's sessions, not the 20,003 (main read every one)."""
    bridge = await make_bridge("", f"api.enabled = on\n{KEY_LINE}", http=True)
    broker = core(bridge)
    for n in range(20_000):
        broker.restored_session(f"dev-{n:06d}", 3600, f"user-{n % 5000}", None, 4)
    for clientid in ("dev-000100", "ops-b", "zz-ops"):
        if clientid in broker.states:
            del broker.states[clientid]
        broker.restored_session(clientid, 3600, "ops", None, 4)

    counted: list[Counted] = []
    made = routes.Api._sessions_source

    def counting(self: routes.Api, *args: Any) -> paging.Source[str]:
        counted.append(Counted(made(self, *args)))
        return counted[-1]

    monkeypatch.setattr(routes.Api, "_sessions_source", counting)
    assert await listed(bridge, "/clients", "ops", limit=10) == [
        ("dev-000100", False),
        ("ops-b", False),
        ("zz-ops", False),
    ]
    assert await listed(bridge, "/clients", "nobody", limit=10) == []
    assert await listed(bridge, "/clients", "user-7", limit=10) == [
        (f"dev-{n:06d}", False) for n in (7, 5007, 10007, 15007)
    ]
    assert [each.looked for each in counted] == [3, 0, 4]
