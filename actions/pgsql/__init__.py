"""PostgreSQL backend (docs/backends/pgsql.md): backend.py runs batches; functions.py writes; reads.py reads then acts.

PLUGIN is its declaration (the `hookbridge.backends` entry point in pyproject.toml); importing this
package does not import the driver.
"""

from __future__ import annotations

from bridge.plugin import BackendPlugin, Setting
from bridge.plugin import parsers as p

PLUGIN = BackendPlugin(
    name="pgsql",
    title="PostgreSQL",
    settings={"database": Setting(p.string(required=True, max_bytes=63), "mqtt", "database name")},
    default_port=5432,
    backend="actions.pgsql.backend:PgsqlBackend",
    statements="sql",
    users="actions.pgsql.auth:PgsqlUsers",
    acl="actions.pgsql.auth:PgsqlAcl",
)
