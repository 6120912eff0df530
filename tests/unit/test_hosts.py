"""bridge/conf/hosts.py: the one loopback check the broker's listeners, its anonymous default,
the API's anonymous access and the config check share."""

import pytest

from bridge.conf.hosts import is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST", "localhost."])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "192.168.1.5", "[2001:db8::1]", "example.com", "localhost.example", ""]
)
def test_hosts_others_can_reach(host: str) -> None:
    assert not is_loopback(host)
