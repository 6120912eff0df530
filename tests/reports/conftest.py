"""One SparkSession for the whole pytest session (JVM startup once): local[2], few shuffle partitions;
and one standalone Spark cluster, for the reports run with --master spark://..."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession  # the `test` extra installs PySpark

from spark_analytics.spark import build_session, jar_paths
from support.services import ROOT


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        "local[2]",
        app="hookbridge-tests",
        conf={"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "false"},
        jars=jar_paths(),
    )
    yield session
    session.stop()


SPARK_CLUSTER_PORT = 7177  # not Spark's default 7077: a cluster of the user's own may run there


@pytest.fixture(scope="session")
def spark_cluster() -> str:
    """A standalone master with two workers (scripts/spark_cluster.sh), started once per session
    and reused if it runs already; scripts/test.sh stops it at the end if this run started it."""
    script = ROOT / "scripts" / "spark_cluster.sh"
    subprocess.run(["bash", str(script), str(SPARK_CLUSTER_PORT), "start", "2"], check=True)
    return f"spark://127.0.0.1:{SPARK_CLUSTER_PORT}"
