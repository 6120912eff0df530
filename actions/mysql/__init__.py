"""MySQL / MariaDB backend (docs/backends/mysql.md): backend.py runs batches; functions.py writes; reads.py holds
the store queries of the read-then-act functions (the protocol: bridge/fetch.py).

PLUGIN is its declaration (the `hookbridge.backends` entry point in pyproject.toml); importing this
package does not import the driver.
"""

from __future__ import annotations

from bridge.plugin import BackendPlugin, Setting
from bridge.plugin import parsers as p

PLUGIN = BackendPlugin(
    name="mysql",
    title="MySQL / MariaDB",
    settings={
        "database": Setting(p.string(required=True, max_bytes=64), "mqtt", "database name"),
        "user": Setting(p.parse_str, "", "user name (EMQX 4's name for `username`; either works)"),
    },
    default_port=3306,
    backend="actions.mysql.backend:MysqlBackend",
    statements="sql",
)
