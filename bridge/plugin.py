"""The interface published to backend plug-ins: what a backend package may import from the bridge.

A backend (actions/<db>/ here, or another installed package) imports the modules in PUBLISHED and
nothing else of the core, so the core can change behind them: this module for its declaration
(`BackendPlugin`, settings and their parsers), the rule actions it runs, statement rendering,
TLS, and the records of the embedded broker's users and ACL it may store (auth.py; bridge.accounts);
`bridge.backend` for the contract it implements; and the value modules (events, topics, message
ids and the id forms EMQX wrote, SQL statements, deliveries), and for a backend's
`migrate-emqx44` the survey that refuses unconvertible ids before anything changes.
tests/unit/test_plugins.py holds every backend to this.
"""

from __future__ import annotations

from bridge.accounts import ALL_USERS as ACL_ALL_USERS
from bridge.accounts import READ as ACL_READ
from bridge.accounts import READWRITE as ACL_READWRITE
from bridge.accounts import WRITE as ACL_WRITE
from bridge.accounts import BackendDown as UserStoreDown
from bridge.accounts import Entry as AclEntry
from bridge.accounts import UserRecord, acl_row, user_record
from bridge.backend import Backend, FunctionContext, Job, Pager, PermanentError
from bridge.conf import addresses, parsers
from bridge.conf.config import PoolConfig
from bridge.conf.registry import BackendPlugin
from bridge.conf.setting import Setting
from bridge.conf.tls import client_context, settings_context
from bridge.events import ordering_key
from bridge.render import MARK_RE, StatementTemplate, Values, to_bytes
from bridge.rules import CommandsAction, FunctionAction, SqlAction, TemplateAction
from bridge.sql import cql_marker, render_sql

PUBLISHED = frozenset(
    {
        "bridge.plugin",
        "bridge.accounts",
        "bridge.backend",
        "bridge.fetch",
        "bridge.batches",
        "bridge.events",
        "bridge.topics",
        "bridge.msgid",
        "bridge.emqx_msgid",
        "bridge.emqx44.survey",
        "bridge.sql",
        "bridge.brokers.base",
    }
)

__all__ = [
    "ACL_ALL_USERS",
    "ACL_READ",
    "ACL_READWRITE",
    "ACL_WRITE",
    "MARK_RE",
    "PUBLISHED",
    "AclEntry",
    "Backend",
    "BackendPlugin",
    "CommandsAction",
    "FunctionAction",
    "FunctionContext",
    "Job",
    "Pager",
    "PermanentError",
    "PoolConfig",
    "Setting",
    "SqlAction",
    "StatementTemplate",
    "TemplateAction",
    "UserRecord",
    "UserStoreDown",
    "Values",
    "acl_row",
    "addresses",
    "client_context",
    "cql_marker",
    "ordering_key",
    "parsers",
    "render_sql",
    "settings_context",
    "to_bytes",
    "user_record",
]
