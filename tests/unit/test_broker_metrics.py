"""/metrics for the embedded broker's limits: what a whole bridge serves, read from its broker
source (a stand-in here: this tests the exposition, not the broker)."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bridge.app import Bridge, Paths
from bridge.brokers.base import BrokerSource, EventSink
from bridge.brokers.embedded.access import ACL_REFUSALS, LOGIN_REFUSALS
from bridge.brokers.embedded.limits import REFUSALS
from bridge.conf.config import parse_config

EVERY_REASON = (*REFUSALS, *LOGIN_REFUSALS, *ACL_REFUSALS)


class LimitedSource(BrokerSource):
    """A broker source that counts refusals and drops the way the embedded broker does."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.counts: Counter[str] = Counter()
        self.dropped = 0

    @property
    def refused(self) -> Counter[str]:
        return self.counts

    @property
    def refusal_reasons(self) -> tuple[str, ...]:  # what the embedded broker declares
        return EVERY_REASON if self.mode == "embedded" else ()

    async def start(self, sink: EventSink) -> None:
        pass

    async def stop(self) -> None:
        pass

    @property
    def dropped_messages(self) -> int:
        return self.dropped


async def scrape(bridge: Bridge) -> str:
    assert bridge.status is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", bridge.status.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    writer.write_eof()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = answer.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200"), head
    return body


def family(text: str, name: str) -> tuple[str, dict[str, str]]:
    """The declared TYPE of one metric family and its samples, {label value: number as written}."""
    declared = re.search(rf"^# TYPE {name} (\w+)$", text, re.M)
    samples = {m[1]: m[2] for m in re.finditer(rf'^{name}\{{\w+="([^"]*)"\}} (\S+)$', text, re.M)}
    return (declared[1] if declared else ""), samples


@pytest.fixture
async def start_bridge(tmp_path: Path) -> AsyncIterator[Callable[[LimitedSource], Awaitable[Bridge]]]:
    started: list[Bridge] = []
    config = parse_config("config/bridge.conf", f"metrics.listener = 127.0.0.1:0\nspool.dir = {tmp_path}/spool\n")
    paths = Paths(tmp_path / "bridge.conf", tmp_path / "rules")

    async def start(source: LimitedSource) -> Bridge:
        bridge = Bridge(config, [], paths, broker=source)
        await bridge.start()
        started.append(bridge)
        return bridge

    yield start
    for bridge in started:
        await bridge.stop()


async def test_every_refusal_reason_is_a_counter_from_the_start(
    start_bridge: Callable[[LimitedSource], Awaitable[Bridge]],
) -> None:
    source = LimitedSource("embedded")
    bridge = await start_bridge(source)
    assert family(await scrape(bridge), "hookbridge_broker_refused_total") == (
        "counter",
        dict.fromkeys(EVERY_REASON, "0.0"),
    )

    source.counts["packet_too_large"] += 2
    source.counts["offline_bytes"] += 1
    source.counts["login_bad_credentials"] += 1
    source.counts["a_reason_not_declared"] += 1  # shown rather than hidden
    source.dropped = 1
    text = await scrape(bridge)
    _, refused = family(text, "hookbridge_broker_refused_total")
    assert refused == {
        **dict.fromkeys(EVERY_REASON, "0.0"),
        "packet_too_large": "2.0",
        "offline_bytes": "1.0",
        "login_bad_credentials": "1.0",
        "a_reason_not_declared": "1.0",
    }
    assert family(text, "hookbridge_broker_dropped_messages") == ("gauge", {"embedded": "1.0"})


async def test_external_modes_show_no_refusals(start_bridge: Callable[[LimitedSource], Awaitable[Bridge]]) -> None:
    """An external broker enforces its own limits: the embedded broker's reasons would only mislead."""
    bridge = await start_bridge(LimitedSource("mqtt"))
    text = await scrape(bridge)
    assert family(text, "hookbridge_broker_refused_total") == ("", {})
    assert family(text, "hookbridge_broker_dropped_messages") == ("gauge", {"mqtt": "0.0"})
