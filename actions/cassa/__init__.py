"""Cassandra backend (docs/backends/cassa.md): backend.py runs batches; functions.py writes; reads.py reads then acts.

PLUGIN is its declaration (the `hookbridge.backends` entry point in pyproject.toml); importing this
package does not import the driver.
"""

from __future__ import annotations

from bridge.plugin import BackendPlugin, Setting
from bridge.plugin import addresses as a
from bridge.plugin import parsers as p

PLUGIN = BackendPlugin(
    name="cassa",
    title="Cassandra",
    settings={
        "nodes": Setting(a.parse_hostports, None, "contact points", example="127.0.0.1:9042"),
        "keyspace": Setting(p.parse_identifier, "mqtt", "keyspace"),
        "local_datacenter": Setting(p.string(required=True), "datacenter1", "local data center for routing"),
        "consistency": Setting(
            p.enum_of("ONE", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"),
            "LOCAL_QUORUM",
            "consistency level of reads and writes",
        ),
        "replication": Setting(
            p.parse_replication,
            {"class": "SimpleStrategy", "replication_factor": 1},
            "keyspace replication (JSON), e.g. NetworkTopologyStrategy with a factor per data center",
        ),
        "concurrency": Setting(p.int_in(1, 32768), 256, "requests in flight at once (all lanes of the pool together)"),
    },
    default_port=9042,
    backend="actions.cassa.backend:CassaBackend",
    address_key="nodes",
    statements="cql",
)
