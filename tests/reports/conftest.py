"""One SparkSession for the whole pytest session (JVM startup once): local[2], few shuffle partitions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession  # the `test` extra installs PySpark

from spark_analytics.spark import build_session, jar_paths


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
