"""Real MQTT traffic through the embedded broker and the bridge into each database, then both reports:
their numbers are what the test sent; their pages open in headless Chromium and show their charts."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from reports.browser import chromium, render
from reports.sources import SOURCES, empty, event_log_rows
from spark_analytics import load
from spark_analytics.fleet import rules_text
from spark_analytics.jobs import sessions as sessions_job
from spark_analytics.jobs import traffic as traffic_job
from spark_analytics.options import Options
from spark_analytics.progress import Progress
from spark_analytics.run import run
from spark_analytics.sources import load_source
from spark_analytics.window import Window
from support.bridges import BridgeFactory, eventually, mqtt_port
from support.conf import BASE_CONFIG
from support.mqtt import Client

FLAPS = 7
# connected: sub, lazy, pub, stay, dropper, 7 flaps; disconnected: all but stay; publish: 10;
# delivered: sub 10 + lazy 6 (fleet/a/#); acked: sub's 8 QoS 1 (lazy acks nothing).
EXPECTED_EVENTS = (5 + FLAPS) + (4 + FLAPS) + 10 + 16 + 8


async def traffic(port: int) -> None:
    sub = await Client(port, "sub", clean=False).connected()
    await sub.subscribe("fleet/#", 1)
    lazy = await Client(port, "lazy", clean=False, manual_ack=True).connected()
    await lazy.subscribe("fleet/a/#", 1)
    stay = await Client(port, "stay").connected()
    pub = await Client(port, "pub").connected()
    for _ in range(4):
        await pub.publish("fleet/a/temp", b"0123456789", qos=1)
    for _ in range(3):
        await pub.publish("fleet/b/hum", b"x" * 20, qos=1)
    for _ in range(2):
        await pub.publish("fleet/a/temp", b"abcde", qos=0)
    await pub.publish("fleet/b/status", b"on", qos=1, retain=True)
    await sub.expect(10)
    await lazy.expect(6)
    for _ in range(FLAPS):
        flap = await Client(port, "flap").connected()
        await flap.disconnect()
    dropper = await Client(port, "dropper").connected()
    await dropper.drop()
    for client in (pub, sub, lazy):
        await client.disconnect()
    del stay  # stays connected: an open session at the window's end


@pytest.mark.parametrize("db", ["pgsql", "cassa", "mongo", "mysql"])
async def test_reports_count_what_was_sent(
    db: str, make_bridge: BridgeFactory, spark: SparkSession, tmp_path: Path
) -> None:
    source = SOURCES[db]
    await empty(source)
    began = dt.datetime.now(dt.UTC)
    bridge = await make_bridge(rules_text(source.pool_id), pools=source.pools)
    await traffic(mqtt_port(bridge))
    await eventually(lambda: event_log_rows(source), lambda n: n >= EXPECTED_EVENTS, timeout=30)
    await bridge.idle()
    assert await event_log_rows(source) == EXPECTED_EVENTS
    window = Window(began - dt.timedelta(minutes=1), dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5))
    out = tmp_path / "out"
    config = tmp_path / "bridge.conf"
    config.write_text(BASE_CONFIG + source.pools)
    loaded = load_source(config, source.pool_id)
    options = Options(window=window, out=out, storm_threshold=2, prefix_depth=2, partitions=2)
    for job in (sessions_job, traffic_job):
        progress = Progress(total=4, stream=io.StringIO())
        # in a thread, as from the command line: the source check runs its own event loop
        await asyncio.to_thread(run, job, loaded, options, spark=spark, progress=progress)  # type: ignore[arg-type]
        assert f"{job.NAME} report: {out}/{job.NAME}.html" in progress.stream.getvalue()  # type: ignore[attr-defined]
    check_sessions(spark, out)
    check_traffic(spark, out)
    check_pages(out)


def table(spark: SparkSession, out: Path, name: str) -> list[tuple[object, ...]]:
    return [tuple(row) for row in load.read_table(spark, out, name).collect()]


def check_sessions(spark: SparkSession, out: Path) -> None:
    sessions = load.read_table(spark, out, "sessions")
    per_client = {r[0]: r[1] for r in sessions.groupBy("clientid").count().collect()}
    assert per_client == {"sub": 1, "lazy": 1, "pub": 1, "stay": 1, "dropper": 1, "flap": FLAPS}
    rows = {r["clientid"]: r for r in sessions.filter("clientid != 'flap'").collect()}
    assert rows["stay"]["open"] and rows["stay"]["end"] is None and rows["stay"]["reason"] is None
    assert rows["pub"]["reason"] == "normal" and not rows["pub"]["open"]
    assert rows["dropper"]["reason"] not in (None, "normal")  # no DISCONNECT packet: an abnormal end
    assert all(r["duration_s"] >= 0 for r in sessions.collect())
    storms = table(spark, out, "storms")
    assert sum(r[2] for r in storms if r[0] == "flap") >= 3 and {r[0] for r in storms} == {"flap"}
    assert table(spark, out, "nodes")[0][:4] == ("test@127.0.0.1", 5 + FLAPS, 6, 1)
    online = table(spark, out, "online")
    assert online[-1][1] == 1  # only `stay` is still online at the end
    assert sum(r[2] for r in online) == 5 + FLAPS and sum(r[3] for r in online) == 4 + FLAPS


def check_traffic(spark: SparkSession, out: Path) -> None:
    assert table(spark, out, "traffic_by_topic") == [
        ("fleet/a/temp", 6, 4 * 10 + 2 * 5),
        ("fleet/b/hum", 3, 60),
        ("fleet/b/status", 1, 2),
    ]
    assert table(spark, out, "traffic_by_prefix") == [("fleet/a", 1, 6, 50), ("fleet/b", 2, 4, 62)]
    assert table(spark, out, "traffic_by_publisher") == [("pub", 3, 10, 112)]
    assert sum(r[1] for r in table(spark, out, "traffic_by_time")) == 10
    assert table(spark, out, "qos_mix") == [(0, 2, 10, 0.2), (1, 8, 102, 0.8)]
    assert table(spark, out, "retain_mix") == [(False, 7, 0.875), (True, 1, 0.125)]
    latency = {r[0]: r for r in table(spark, out, "latency")}
    assert latency["delivered"][1] == 16 and latency["acked"][1] == 8
    assert 0 <= latency["delivered"][2] <= latency["delivered"][5] <= latency["delivered"][6] < 5000
    assert latency["acked"][2] >= 0
    backlog = {r[0]: r for r in table(spark, out, "backlog")}
    assert backlog["lazy"][1:4:2] == ("fleet/a/#", 4)  # its 4 stored QoS 1 messages, none acked
    assert backlog["sub"][1:4:2] == ("fleet/#", 0)


def check_pages(out: Path) -> None:
    if chromium() is None:
        pytest.fail("chromium is not installed (scripts/test.sh installs the Debian package)")
    for name, series in (("sessions", 1), ("traffic", 1)):
        dom, console = render(out / f"{name}.html")
        assert console == [], console
        assert dom.count('class="chart"') >= 3
        assert dom.count('class="series"') >= series and dom.count('class="bar"') >= 2
        assert "no data in this window" not in dom
