"""MongoDB backend (docs/backends/mongo.md): backend.py runs batches; functions.py writes; reads.py reads then acts.

PLUGIN is its declaration (the `hookbridge.backends` entry point in pyproject.toml); importing this
package does not import the driver.
"""

from __future__ import annotations

from bridge.plugin import BackendPlugin, Setting
from bridge.plugin import addresses as a
from bridge.plugin import parsers as p

# MongoDB database names: no path or shell characters, under 64 bytes.
MONGO_NAME = p.described(
    'text, not empty, at most 63 bytes, without space or any of `/\\."$*<>:?` and `\\|`',
    p.string(required=True, max_bytes=63, forbidden='/\\. "$*<>:|?'),
)

PLUGIN = BackendPlugin(
    name="mongo",
    title="MongoDB",
    settings={
        "server": Setting(
            a.parse_hostports, None, "server address, or several, comma-separated", example="127.0.0.1:27017"
        ),
        "type": Setting(
            p.enum_of("single", "rs", "sharded", "unknown"),
            "single",
            "single server, replica set (rs), mongos routers (sharded) or let the driver discover (unknown)",
        ),
        "database": Setting(MONGO_NAME, "mqtt", "database name"),
        "login": Setting(p.parse_str, "", "login name (EMQX's name for `username`; either works)"),
        "auth_source": Setting(MONGO_NAME, "admin", "authentication database"),
        "replica_set": Setting(p.parse_str, "", "replica set name"),
    },
    default_port=27017,
    backend="actions.mongo.backend:MongoBackend",
    users="actions.mongo.auth:MongoUsers",
    acl="actions.mongo.auth:MongoAcl",
)
