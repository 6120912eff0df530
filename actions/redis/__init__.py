"""Redis backend (SPEC 5.1): backend.py runs batches; functions.py writes; reads.py reads then acts.

PLUGIN is its declaration (the `hookbridge.backends` entry point in pyproject.toml); importing this
package does not import the driver.
"""

from __future__ import annotations

from bridge.plugin import BackendPlugin, Setting
from bridge.plugin import values as v

PLUGIN = BackendPlugin(
    name="redis",
    title="Redis",
    settings={
        "type": Setting(v.enum_of("single"), "single", "deployment type (single node)"),
        "database": Setting(v.int_in(0, 2**31 - 1), 0, "Redis logical database number"),
    },
    default_port=6379,
    backend="actions.redis.backend:RedisBackend",
    statements="commands",
    check_statement="actions.redis.commands:statement_problem",
    users="actions.redis.auth:RedisUsers",
    acl="actions.redis.auth:RedisAcl",
)
