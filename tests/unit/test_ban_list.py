"""The banned list (bridge/brokers/embedded/bans.py) on its own, with a real file: what each kind
of ban covers, expiry, one spelling per network, the file across a reload, a damaged file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.brokers.embedded.bans import Ban, BanError, Bans, make_ban, peer_address

NOW = 1_800_000_000.0


def test_each_kind_covers_its_clients() -> None:
    bans = Bans()
    bans.add(make_ban("clientid", "dev-1", now=NOW))
    bans.add(make_ban("username", "mallory", now=NOW))
    bans.add(make_ban("address", "10.1.0.0/16", now=NOW))
    bans.add(make_ban("address", "2001:db8::/32", now=NOW))
    assert bans.match("dev-1", None, "192.168.0.1:4000", NOW) is not None
    assert bans.match("dev-2", "mallory", "192.168.0.1:4000", NOW) is not None
    assert bans.match("dev-2", "alice", "10.1.200.7:4000", NOW) is not None
    assert bans.match("dev-2", "alice", "[::ffff:10.1.2.3]:4000", NOW) is not None  # dual stack
    assert bans.match("dev-2", "alice", "[2001:db8:1::5]:4000", NOW) is not None
    assert bans.match("dev-2", "alice", "10.2.0.1:4000", NOW) is None
    assert bans.match("dev-2", None, "", NOW) is None  # no peer address (a test transport)
    assert bans.match("DEV-1", "Mallory", "192.168.0.1:1", NOW) is None  # ids and names are exact


def test_expiry_and_one_spelling_per_network(tmp_path: Path) -> None:
    bans = Bans(tmp_path / "bans.json")
    bans.add(make_ban("clientid", "brief", until=NOW + 10, now=NOW))
    bans.add(make_ban("address", "10.0.0.7", now=NOW))
    assert bans.match("brief", None, "1.2.3.4:1", NOW + 9) is not None
    assert bans.match("brief", None, "1.2.3.4:1", NOW + 10) is None
    assert [(b.kind, b.who) for b in bans.listed(NOW + 11)] == [("address", "10.0.0.7/32")]
    assert [entry["who"] for entry in json.loads((tmp_path / "bans.json").read_text())] == ["10.0.0.7/32"]
    assert bans.remove("address", "10.0.0.7") is not None  # lifted by either spelling
    assert bans.listed(NOW) == []


def test_the_file_is_read_back_and_a_damaged_one_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "data" / "bans.json"
    bans = Bans(path)
    bans.add(make_ban("username", "mallory", reason="spam", by="ops", now=NOW))
    again = Bans(path)
    again.load()
    assert again.listed(NOW) == [Ban("username", "mallory", "spam", "ops", NOW, None)]
    path.write_text('[{"as": "clientid"')
    with pytest.raises(BanError, match="cannot read the banned list"):
        Bans(path).load()


@pytest.mark.parametrize(
    ("kind", "who", "until", "problem"),
    [
        ("ip", "1.2.3.4", None, "as must be one of"),
        ("address", "1.2.3.400", None, "not an IP address"),
        ("clientid", "", None, "non-empty"),
        ("clientid", "a", NOW - 1, "in the past"),
        ("clientid", "a", "tomorrow", "Unix time"),
    ],
)
def test_refused_bans(kind: str, who: str, until: object, problem: str) -> None:
    with pytest.raises(BanError, match=problem):
        make_ban(kind, who, until=until, now=NOW)


def test_peer_addresses() -> None:
    assert str(peer_address("127.0.0.1:1883")) == "127.0.0.1"
    assert str(peer_address("[::1]:1883")) == "::1"
    assert peer_address("(unknown)") is None


def test_many_networks_each_lifted_on_its_own() -> None:
    bans = Bans()
    for i in range(2000):
        bans.add(make_ban("address", f"10.{i // 256}.{i % 256}.0/24", now=NOW))
    bans.add(make_ban("address", "172.16.0.0/12", now=NOW))
    bans.add(make_ban("address", "192.168.7.7", now=NOW))
    assert bans.match("c", None, "10.7.207.1:1", NOW).who == "10.7.207.0/24"  # type: ignore[union-attr]
    assert bans.match("c", None, "10.7.208.1:1", NOW) is None  # 2000 networks: up to 10.7.207.0/24
    assert bans.match("c", None, "172.31.255.1:1", NOW).who == "172.16.0.0/12"  # type: ignore[union-attr]
    assert bans.match("c", None, "192.168.7.7:1", NOW) is not None
    assert bans.match("c", None, "192.168.7.8:1", NOW) is None
    assert bans.remove("address", "10.7.207.0/24") is not None
    assert bans.match("c", None, "10.7.207.1:1", NOW) is None
    assert bans.match("c", None, "10.7.206.1:1", NOW) is not None
