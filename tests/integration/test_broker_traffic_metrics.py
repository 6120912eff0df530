"""The embedded broker's traffic at /metrics (docs/operations.md#broker-traffic-at-metrics), scraped
from a real bridge (shipped Redis rules, real Redis) after known paho traffic; and the Grafana
dashboard in deploy/grafana/ checked against what that bridge exports."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bridge.app import Bridge
from bridge.brokers.embedded.census import Census
from bridge.brokers.embedded.source import EmbeddedBroker
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import V311, Client

ROOT = Path(__file__).parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "hookbridge.json"
M = 5  # messages published to t/, QoS 1
PAYLOADS = [b"p" * (i + 3) for i in range(M)]


async def start(make_bridge: BridgeFactory, extra: str = "") -> Bridge:
    # the shipped rules on the test Redis; /metrics on a free port; $SYS only at start
    return await make_bridge(extra_config=f"broker.sys_interval = 1h\n{extra}", http=True)


async def scrape(bridge: Bridge) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    assert bridge.status is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{bridge.status.port}/metrics") as answer,
    ):
        assert answer.status == 200
        text = await answer.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def connect(made: list[Client], bridge: Bridge, clientid: str, clean: bool = True) -> Client:
    client = Client(mqtt_port(bridge), clientid, version=V311, clean=clean)
    made.append(client)
    assert (await client.connect()).reason == 0
    return client


async def test_broker_traffic_after_known_paho_traffic(make_bridge: BridgeFactory, clients: list[Client]) -> None:
    bridge = await start(make_bridge, "broker.max_offline_messages = 3\n")
    source = bridge.broker
    assert isinstance(source, EmbeddedBroker) and source.core is not None and source.sys_topics is not None
    core = source.core
    before = await scrape(bridge)
    assert before[("hookbridge_broker_connections", ())] == 0
    assert before[("hookbridge_broker_received_messages_total", ())] == 0

    offline = await connect(clients, bridge, "off1", clean=False)
    assert await offline.subscribe("t/#", 1) == [1]
    ended = core.active["off1"].done
    await offline.disconnect()
    await ended.wait()
    live = await connect(clients, bridge, "sub1")
    assert await live.subscribe("t/#", 0) == [0]
    assert await live.subscribe("$share/g/t/#", 0) == [0]
    writer = await connect(clients, bridge, "w1")
    for i, payload in enumerate(PAYLOADS):
        assert await writer.publish(f"t/{i}", payload, 1) == 0
    assert await writer.publish("keep", b"kept", 1, retain=True) == 0
    # sub1 gets each message twice: through t/# and through its shared group
    assert len(await live.expect(2 * M)) == 2 * M
    await bridge.idle()

    got = await scrape(bridge)

    def one(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    payload_bytes = sum(map(len, PAYLOADS))
    assert one("hookbridge_broker_connections") == 2
    assert one("hookbridge_broker_sessions", state="connected") == 2
    assert one("hookbridge_broker_sessions", state="disconnected") == 1
    assert one("hookbridge_broker_subscriptions", kind="plain") == 2
    assert one("hookbridge_broker_subscriptions", kind="shared") == 1
    assert one("hookbridge_broker_connects_total") == 3
    assert one("hookbridge_broker_sockets_opened_total") == 3
    assert one("hookbridge_broker_received_messages_total") == M + 1
    assert one("hookbridge_broker_sent_messages_total") == 2 * M
    assert one("hookbridge_broker_received_payload_bytes_total") == payload_bytes + len(b"kept")
    assert one("hookbridge_broker_sent_payload_bytes_total") == 2 * payload_bytes
    # off1's queue holds 3 of the M (max_offline_messages): the oldest M - 3 were dropped
    assert one("hookbridge_broker_dropped_messages_total", reason="offline_messages") == M - 3
    assert one("hookbridge_broker_dropped_messages_total", reason="queued_bytes") == 0
    # in: 3 CONNECTs, off1's SUBSCRIBE and DISCONNECT, sub1's 2 SUBSCRIBEs, the writer's M + 1
    # PUBLISHes; out: 3 CONNACKs, 3 SUBACKs, M + 1 PUBACKs, 2 * M PUBLISHes
    assert one("hookbridge_broker_received_packets_total") == 3 + 2 + 2 + M + 1
    assert one("hookbridge_broker_sent_packets_total") == 3 + 3 + (M + 1) + 2 * M
    assert one("hookbridge_broker_received_bytes_total") > one("hookbridge_broker_received_payload_bytes_total")
    assert one("hookbridge_broker_sent_bytes_total") > one("hookbridge_broker_sent_payload_bytes_total")

    # the same numbers as $SYS publishes (one meaning for a name wherever it is shown)
    sys = source.sys_topics.values()
    retained = int(sys["$SYS/broker/retained messages/count"])
    assert one("hookbridge_broker_retained_messages") == retained == len(core.router.retained)
    assert one("hookbridge_broker_stored_messages") == int(sys["$SYS/broker/store/messages/count"]) == retained + 3
    assert one("hookbridge_broker_stored_bytes") == int(sys["$SYS/broker/store/messages/bytes"])
    for name, topic in (
        ("hookbridge_broker_received_bytes_total", "bytes/received"),
        ("hookbridge_broker_sent_bytes_total", "bytes/sent"),
        ("hookbridge_broker_received_packets_total", "messages/received"),
    ):
        assert one(name) == int(sys["$SYS/broker/" + topic]), name


_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers once label matchers, range
    selectors, grouping clauses, strings and function names are taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        following = expr[match.end() :].lstrip()
        word = match.group()
        if following.startswith("(") or word in _PROMQL_WORDS:
            continue  # a function call or a keyword
        names.add(word)
    return names


def test_metric_names_are_read_from_promql() -> None:
    """The extraction the dashboard check relies on."""
    assert metric_names('sum by (pool) (rate(hookbridge_x_total{pool="a"}[$__rate_interval]))') == {
        "hookbridge_x_total"
    }
    expr = "histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / ignoring (x) b"
    assert metric_names(expr) == {"a_bucket", "b"}


async def test_every_dashboard_expression_names_an_exported_metric(
    make_bridge: BridgeFactory, clients: list[Client]
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] if panel["type"] != "row" for target in panel["targets"]]
    assert len(exprs) >= 20
    bridge = await start(make_bridge)
    # some traffic, so that the families that show only what happened (events, write latency) have samples
    client = await connect(clients, bridge, "dash1")
    assert await client.publish("dash/1", b"x", 1) == 0
    await bridge.idle()
    exported = {name for name, _ in await scrape(bridge)}
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= exported, (expr, names - exported)


async def test_a_big_broker_is_counted_in_slices_and_the_numbers_stay_right(
    make_bridge: BridgeFactory, clients: list[Client]
) -> None:
    """census.py: a broker too big to walk in one loop turn is walked a slice per turn, other work
    running between slices, and the walk's numbers are the one-shot walk's. A slice of 8 items
    makes this broker "big" (the real slice is 5,000: about 2 ms of walking)."""
    bridge = await start(make_bridge)
    source = bridge.broker
    assert isinstance(source, EmbeddedBroker) and source.core is not None
    core = source.core
    for n in range(4):  # offline persistent sessions, each with the same 3 messages queued
        offline = await connect(clients, bridge, f"off{n}", clean=False)
        assert await offline.subscribe("q/#", 1) == [1]
        ended = core.active[f"off{n}"].done
        await offline.disconnect()
        await ended.wait()
    for n in range(6):
        live = await connect(clients, bridge, f"live{n}")
        for topic in ("a/#", f"b/{n}", "$share/g/c/#"):
            assert await live.subscribe(topic, 0) == [0]
    writer = await connect(clients, bridge, "w")
    for i in range(3):
        assert await writer.publish(f"q/{i}", b"x" * (i + 1), 1) == 0
    assert await writer.publish("q/kept", b"kept", 1, retain=True) == 0  # retained and queued: stored once
    await bridge.idle()

    exact = source.numbers()  # this broker is small for the real census: walked at once
    assert exact is not None
    assert (exact.clients_connected, exact.clients_disconnected) == (7, 4)
    assert (exact.subscriptions, exact.shared_subscriptions) == (4 + 12, 6)
    retained = len(core.router.retained)
    assert exact.stored_messages == retained + 3  # the 4 queues share 3 messages; q/kept counts as retained
    census = Census(core.traffic, core.states, core.router.retained, core.refused, slice_items=8)
    assert census.numbers() == exact  # the first time: walked now, whatever the size

    late = await connect(clients, bridge, "late")
    assert await late.subscribe("late/#", 0) == [0]
    assert census.numbers().subscriptions == 16  # the last complete walk's, and a new one started
    turns = 0

    async def tick() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    fresh = await census.fresh()
    ticker.cancel()
    now = source.numbers()
    assert now is not None and fresh == now
    assert (fresh.clients_connected, fresh.subscriptions) == (8, 17)
    assert census.walks_sliced >= 1
    assert turns >= 4  # 12 sessions and their 40 items, 8 a turn: the ticker ran between slices
    census.close()
