"""Both reports on a standalone Spark cluster of two workers (scripts/spark_cluster.sh), run as a
user runs them (`hookbridge report ... --master spark://127.0.0.1:PORT`, its own process), over
the same traffic as tests/reports/test_end_to_end.py, and checked for the same numbers."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from reports.conftest import SPARK_CLUSTER_PORT
from reports.sources import SOURCES, empty, event_log_rows
from reports.test_end_to_end import EXPECTED_EVENTS, check_sessions, check_traffic, traffic
from spark_analytics.fleet import rules_text
from support.bridges import BridgeFactory, eventually, mqtt_port
from support.conf import BASE_CONFIG
from support.services import ROOT


def master_state() -> dict[str, Any]:
    """The master's own account (its web UI's JSON): workers, and applications with their cores."""
    with urllib.request.urlopen(f"http://127.0.0.1:{SPARK_CLUSTER_PORT + 1003}/json/", timeout=10) as answer:
        state: dict[str, Any] = json.load(answer)
    return state


async def test_both_reports_on_a_two_worker_cluster(
    make_bridge: BridgeFactory, spark: SparkSession, spark_cluster: str, tmp_path: Path
) -> None:
    source = SOURCES["pgsql"]
    await empty(source)
    began = dt.datetime.now(dt.UTC)
    bridge = await make_bridge(rules_text(source.pool_id), pools=source.pools)
    await traffic(mqtt_port(bridge))
    await eventually(lambda: event_log_rows(source), lambda n: n >= EXPECTED_EVENTS, timeout=30)
    await bridge.idle()
    assert await event_log_rows(source) == EXPECTED_EVENTS
    config = tmp_path / "bridge.conf"
    config.write_text(BASE_CONFIG + source.pools)
    out = tmp_path / "out"
    before = {app["id"] for app in master_state()["completedapps"]}
    assert master_state()["aliveworkers"] >= 2
    window = [
        "--from",
        (began - dt.timedelta(minutes=1)).isoformat(),
        "--to",
        (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)).isoformat(),
    ]
    for report in ("sessions", "traffic"):
        argv = [sys.executable, "-m", "bridge", "report", report, "-c", str(config), "--source", source.pool_id]
        argv += [*window, "--out", str(out), "--master", spark_cluster, "--storm-threshold", "2", "--prefix-depth", "2"]
        # one executor per worker, sized to the workers' 1 GB; few shuffle partitions for a few rows
        argv += ["--partitions", "2", "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1"]
        argv += ["--conf", "spark.sql.shuffle.partitions=4"]
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}
        done = await asyncio.to_thread(subprocess.run, argv, cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"{report} report: {out}/{report}.html" in done.stderr + done.stdout
    check_sessions(spark, out)
    check_traffic(spark, out)
    # The work ran on the cluster: two applications, each given an executor on both workers.
    ran = [app for app in master_state()["completedapps"] if app["id"] not in before]
    assert [app["name"] for app in ran] == ["hookbridge-report", "hookbridge-report"]
    assert all(app["cores"] == 2 and app["state"] == "FINISHED" for app in ran), ran


def cluster_script(*args: str) -> subprocess.CompletedProcess[str]:
    script = ROOT / "scripts" / "spark_cluster.sh"
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=300)


def test_the_cluster_script_reuses_what_runs_and_leaves_other_ports_alone(spark_cluster: str) -> None:
    port = str(SPARK_CLUSTER_PORT)
    again = cluster_script(port, "start", "2")  # as the docs show it, run directly
    assert again.returncode == 0, again.stderr
    assert f"Spark master already answering on 127.0.0.1:{port}" in again.stderr
    assert "starting" not in again.stderr  # both workers are there: nothing new started
    status = cluster_script(port, "status")
    assert status.returncode == 0 and status.stdout.startswith(f"{spark_cluster}: ")
    assert int(status.stdout.split(": ")[1].split()[0]) >= 2
    unused = str(SPARK_CLUSTER_PORT + 1)
    assert cluster_script(unused, "status").returncode == 3
    stopped = cluster_script(unused, "stop")
    assert stopped.returncode == 0 and "no cluster of ours" in stopped.stderr
    assert master_state()["aliveworkers"] >= 2  # the session's cluster is untouched
