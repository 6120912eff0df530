"""Render docs/configuration.md from the declared settings (`python -m bridge.conf.docs`)."""

from __future__ import annotations

import json
from typing import Any

from bridge.conf import parsers as p
from bridge.conf import registry
from bridge.conf.schema import POOL_COMMON, global_settings
from bridge.conf.setting import Setting

HEADER = """\
# Configuration reference: `config/bridge.conf`

Generated from `bridge/conf/schema.py`, the settings each broker mode declares (`bridge/brokers/<mode>/settings.py`)
and the pool settings each backend declares (`actions/<db>/__init__.py`) by
`python -m bridge.conf.docs > docs/configuration.md`;
a test fails when this page and the code disagree.

The file holds `key = value` lines. `#` starts a comment (at the start of a line, or after a
space outside a quoted string). Values are strings, integers, `on`/`off`, durations (`100ms`,
`5s`, `2m`, `2h`, `1d`; a bare number is seconds), sizes (`512B`, `64KB`, `64MB`, `1GB`) or JSON.
`${VAR}` is replaced by the environment variable `VAR`, `${VAR:-default}` by `default` when it
is unset; an unset `${VAR}` without default is an error. Every key is validated: an unknown key,
a bad value (out of the range the "takes" column gives, a string with a control character, a
directory setting such as `spool.dir` that cannot be created or written, two listeners on one
address) or a duplicate is reported as `path:line:col: message`, all of them at once, together
with every error of the rules files (checked against the settings that could be read), and
`hookbridge run` does not start. Values of
secret keys (passwords, API secrets) never appear in logs, error messages, `/metrics` or `/healthz`.

Addresses (`server`, `nodes`, `broker.server`, the listeners) are `host:port` only. A URL or a
`user:password@host` there is refused by `check` and `run` with its `path:line:col`, and the
message never repeats the value. Why refuse rather than accept URL syntax: a password then has
one place, the pool's (or broker's) secret `password` setting, which is masked wherever the
bridge prints; and a URL's other parts (scheme, database path, options) would compete with the
keys that already set them. Where the bridge does print a URL (a driver's error text), the
password in its user info shows as `***`. A secret is masked where it stands as a value
(`password=...`, after `=` or `:`, in quotes), not wherever its text occurs: with the password
`hookbridge`, the node name `hookbridge@127.0.0.1` stays readable in the log.

The "default" column is what the bridge uses when a key is not in the file, as you would write it
there; "example" shows a typical value where a key is empty or off by default (an example is
never a default: `broker.acl.file` is empty until you set it). "(see meaning)": the default
depends on other settings, as the meaning says.

Hook lines (`backend.<db>.hook....`) do not go here: they live in `rules/*.conf` (docs/rules.md).
"""


def default_text(setting: Setting) -> str:
    """The default as it is written in a file ("" when there is none to write)."""
    value: Any = setting.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return f"{value[0]}:{value[1]}"
    if isinstance(value, dict):
        return json.dumps(value)
    return "" if value is None else str(value)


def _shown(value: Any, setting: Setting | None = None) -> str:
    takes = (setting.parse.__doc__ or "") if setting is not None else ""
    if value is None and setting is not None and _parses_to(setting, "off", None):
        return "off"  # an optional listener: `off` is how a file writes its default
    if isinstance(value, int | float) and not isinstance(value, bool):
        if takes.startswith("size"):
            return p.show_size(int(value))
        if takes.startswith("duration"):
            return p.show_duration(float(value))
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return f"{value[0]}:{value[1]}"
    if value is None:
        return "(see meaning)"
    if value == "" or value == {}:
        return "(empty)"
    return f"{value}"


def _parses_to(setting: Setting, text: str, value: Any) -> bool:
    try:
        return bool(setting.parse(text) == value)
    except Exception:  # a text the setting refuses (or a file that is not here): another value
        return False


def _spells_default(setting: Setting) -> bool:
    """The example is the default as a file writes it (`10s` for 10.0 seconds), not another value."""
    return setting.example is not None and _parses_to(setting, setting.example, setting.default)


def _default_and_example(setting: Setting) -> tuple[str, str]:
    """What the default column shows (always the real default) and the example column (apart)."""
    if _spells_default(setting):
        return _shown(setting.example if setting.example != "" else setting.default, setting), ""
    example = "" if setting.example is None or setting.example == "" else f"`{setting.example}`"
    return _shown(setting.default, setting), example


def _table(settings: dict[str, Setting], prefix: str = "") -> list[str]:
    rows = ["| key | default | example | takes | meaning |", "|---|---|---|---|---|"]
    for key, setting in settings.items():
        secret = " (secret)" if setting.secret else ""
        takes = setting.parse.__doc__ or ""
        default, example = _default_and_example(setting)
        rows.append(f"| `{prefix}{key}` | `{default}` | {example} | {takes} | {setting.doc}{secret} |")
    return rows


def render() -> str:
    plugins = registry.backends()  # the installed backends: each declares its pool settings
    lines = [HEADER, "## Bridge, broker, metrics, spool, logs", "", *_table(global_settings()), ""]
    lines += [
        "## Pools: `backend.<db>.<pool>.<key>`",
        "",
        'A pool is a named connection to one database; rules pick it with `"pool": "<pool>"`',
        f"(optional when the database has one pool). `<db>` is {_names(list(plugins))}.",
        "An unset `server` is `127.0.0.1` on the database's default port.",
        "",
        "### Every pool",
        "",
        *_table(POOL_COMMON, "backend.<db>.<pool>."),
        "",
    ]
    for db, plugin in plugins.items():
        lines += [f"### `{db}` pools", "", *_table(dict(plugin.settings), f"backend.{db}.<pool>."), ""]
    return "\n".join(lines)


def _names(names: list[str]) -> str:
    quoted = [f"`{name}`" for name in names]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else "".join(quoted)


if __name__ == "__main__":
    print(render(), end="")
