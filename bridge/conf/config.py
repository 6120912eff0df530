"""`config/bridge.conf`: validated against the declared settings in `schema.py`."""

from __future__ import annotations

import difflib
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.conf import addresses as a
from bridge.conf import registry
from bridge.conf.errors import ConfError, ConfErrors, Position
from bridge.conf.lexer import Entry, read_entries
from bridge.conf.parsers import substitute_env
from bridge.conf.schema import global_settings, pool_settings
from bridge.conf.setting import Setting
from bridge.conf.tls import load_problem, server_files_context, tls_problems

_POOL_KEY = re.compile(r"^backend\.([a-z]+)\.([A-Za-z0-9_\-]+)\.(.+)$")


@dataclass
class PoolConfig:
    db: str
    name: str
    settings: dict[str, Any]
    defined_at: Position

    @property
    def id(self) -> str:
        return f"{self.db}.{self.name}"

    def __repr__(self) -> str:  # settings hold passwords: never print them
        return f"PoolConfig({self.id!r}, defined at {self.defined_at})"

    def __getitem__(self, key: str) -> Any:
        return self.settings[key]


@dataclass
class Config:
    path: str
    settings: dict[str, Any]
    pools: dict[str, PoolConfig] = field(default_factory=dict)  # keyed "<db>.<pool>"
    secrets: list[str] = field(default_factory=list)  # secret values, to scrub from any output
    # Where each key set in the file is (its key, its value): checks made after parsing (the
    # command line's `--workers`) point at the setting they are about.
    keys_at: dict[str, Position] = field(default_factory=dict)
    values_at: dict[str, Position] = field(default_factory=dict)
    # Which process of `hookbridge run --workers N` this config runs (bridge/workers/): 0 for the
    # only one. Worker 0 alone takes the broker's client and session events, so they stay in order.
    worker: int = 0

    def __getitem__(self, key: str) -> Any:
        return self.settings[key]

    def __repr__(self) -> str:  # settings hold passwords: never print them
        return f"Config({self.path!r}, pools={sorted(self.pools)})"

    def pools_of(self, db: str) -> list[PoolConfig]:
        return [pool for pool in self.pools.values() if pool.db == db]


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _parse_value(entry: Entry, setting: Setting, errors: list[ConfError], secrets: list[str]) -> Any:
    text, missing = substitute_env(entry.value)
    for name in missing:
        errors.append(ConfError(entry.value_at, f"environment variable {name} is not set (use ${{{name}:-default}})"))
    if missing:  # the value is not known: judging what is left would report a second, wrong problem
        return None
    if setting.secret and text:
        secrets.append(text)
    try:
        return setting.parse(text)
    except ValueError as exc:
        message = f"{entry.key}: {exc}"
        if setting.secret and text:
            message = message.replace(text, "***")
        errors.append(ConfError(entry.value_at, message))
        return None


def parse_config(path: str, text: str) -> Config:
    """Parse and validate a config file; raises ConfErrors listing every problem."""
    entries, errors = read_entries(path, text)
    known_keys = global_settings()  # the core's and every broker mode's
    settings: dict[str, Any] = {key: setting.default for key, setting in known_keys.items()}
    pools: dict[str, PoolConfig] = {}
    secrets: list[str] = []
    seen: dict[str, Position] = {}
    values_at: dict[str, Position] = {}
    for entry in entries:
        if entry.key in seen:
            errors.append(
                ConfError(entry.key_at, f"duplicate key {entry.key} (first set at line {seen[entry.key].line})")
            )
            continue
        seen[entry.key] = entry.key_at
        values_at[entry.key] = entry.value_at
        if entry.key in known_keys:
            settings[entry.key] = _parse_value(entry, known_keys[entry.key], errors, secrets)
            continue
        match = _POOL_KEY.match(entry.key)
        if match and match.group(2) == "hook":
            errors.append(ConfError(entry.key_at, "hook lines belong in rules/*.conf, not in the config file"))
            continue
        if not match:
            errors.append(ConfError(entry.key_at, f"unknown key {entry.key}{_suggest(entry.key, list(known_keys))}"))
            continue
        db, pool_name, key = match.groups()
        if db not in registry.backends():
            known_dbs = list(registry.backends())
            note = registry.unavailable_note(registry.BACKENDS_GROUP, db) or _suggest(db, known_dbs)
            errors.append(ConfError(entry.key_at, f"unknown backend {db!r}{note} in {entry.key}"))
            continue
        known = pool_settings(db)
        if key not in known:
            errors.append(ConfError(entry.key_at, f"unknown {db} pool setting {key!r}{_suggest(key, list(known))}"))
            continue
        pool = pools.get(f"{db}.{pool_name}")
        if pool is None:
            defaults = {name: setting.default for name, setting in known.items()}
            pool = pools[f"{db}.{pool_name}"] = PoolConfig(db, pool_name, defaults, entry.key_at)
        pool.settings[key] = _parse_value(entry, known[key], errors, secrets)
    for pool in pools.values():
        _default_address(pool)
        for key, message in registry.backends()[pool.db].pool_problems(pool.settings):
            full = f"backend.{pool.db}.{pool.name}.{key}"
            errors.append(ConfError(values_at.get(full, pool.defined_at), f"{full}: {message}"))
    errors.extend(_pool_reference_errors(settings, pools, values_at))
    errors.extend(_listener_collisions(path, settings, values_at))
    errors.extend(_api_errors(path, settings, values_at))
    if not errors:  # TLS files are loaded only once every value parsed
        errors.extend(_tls_errors(path, settings, pools, values_at))
    for mode in registry.modes().values():  # files a mode reads (the embedded broker's ACL, listeners)
        if not errors:  # like the TLS files: `check` rejects what `run` would
            errors.extend(mode.config_problems(path, settings, values_at))
    if errors:
        raise ConfErrors(errors, partial=_partial(path, settings, pools))
    return Config(path=path, settings=settings, pools=pools, secrets=secrets, keys_at=seen, values_at=values_at)


def _partial(path: str, settings: dict[str, Any], pools: dict[str, PoolConfig]) -> Config:
    """The config as far as it parsed, defaults in place of the values in error: what the rules
    are checked against when the config has errors (a rule's pool is known if its pool is)."""
    good = {key: global_settings()[key].default if value is None else value for key, value in settings.items()}
    for pool in pools.values():
        known = pool_settings(pool.db)
        for key, value in pool.settings.items():
            if value is None and key in known:
                pool.settings[key] = known[key].default
    return Config(path=path, settings=good, pools=pools)


def _default_address(pool: PoolConfig) -> None:
    """An unset address is 127.0.0.1 on the backend's default port, in the shape its setting
    parses to (one address or a list)."""
    plugin = registry.backends()[pool.db]
    if pool.settings[plugin.address_key] is None:
        setting = pool_settings(pool.db)[plugin.address_key]
        pool.settings[plugin.address_key] = setting.parse(f"127.0.0.1:{plugin.default_port}")


def _pool_reference_errors(
    settings: dict[str, Any], pools: dict[str, PoolConfig], values_at: dict[str, Position]
) -> list[ConfError]:
    """Settings that name a pool (`broker.auth.backend = redis.pool1`) name one that is configured."""
    errors: list[ConfError] = []
    for key, setting in global_settings().items():
        value = settings.get(key)
        if setting.pool_ref and value and value not in pools:
            known = sorted(pools)
            hint = f"; configured pools: {', '.join(known)}" if known else "; no pool is configured"
            errors.append(ConfError(values_at[key], f"{key}: no pool {value}{_suggest(value, known) or hint}"))
    return errors


_ANY_HOST = frozenset({"", "0.0.0.0", "::", "*"})


def _api_errors(path: str, settings: dict[str, Any], values_at: dict[str, Position]) -> list[ConfError]:
    """The management API (api.*) as `run` would serve it: refused when it would be reachable from
    the network with no key (as the broker refuses an anonymous listener off loopback)."""
    from bridge.conf.hosts import is_loopback

    if not settings.get("api.enabled"):
        return []
    at = values_at.get("api.enabled") or Position(path, 1, 1)
    listener = settings.get("metrics.listener")
    if listener is None:
        return [ConfError(at, "api.enabled = on needs metrics.listener: the API is served on that listener")]
    if settings.get("api.keys"):
        return []
    if is_loopback(listener[0]):
        if settings.get("api.allow_anonymous_loopback"):
            return []
        why = "and api.allow_anonymous_loopback is off"
    else:
        why = f"and metrics.listener = {listener[0]}:{listener[1]} can be reached from the network"
    return [
        ConfError(
            at,
            f"api.enabled = on with no api.keys {why}: every API request would be refused or open to "
            "anyone; set api.keys = <name>:sha256:<hex> (docs/operations.md)"
            + (", or api.allow_anonymous_loopback = on" if is_loopback(listener[0]) else ""),
        )
    ]


def _listener_collisions(path: str, settings: dict[str, Any], values_at: dict[str, Position]) -> list[ConfError]:
    """Two listeners on one address (`run` could open only the first): the same port, and the same
    host or one of them on every address. Port 0 (any free port) never collides."""
    errors: list[ConfError] = []
    taken: dict[int, list[tuple[str, str]]] = {}
    for key, setting in global_settings().items():
        value = settings.get(key)
        if setting.parse not in (a.parse_listener, a.optional_listener) or not value or not value[1]:
            continue
        if key.startswith("broker.listener.") and settings["broker.mode"] != "embedded":
            continue
        host, port = value
        for other_key, other_host in taken.get(port, []):
            if host == other_host or host in _ANY_HOST or other_host in _ANY_HOST:
                where = values_at.get(key) or values_at.get(other_key) or Position(path, 1, 1)
                errors.append(ConfError(where, f"{key} = {host}:{port} is the address of {other_key}"))
                break
        taken.setdefault(port, []).append((key, host))
    return errors


def _tls_errors(
    path: str, settings: dict[str, Any], pools: dict[str, PoolConfig], values_at: dict[str, Position]
) -> list[ConfError]:
    """TLS files that cannot be loaded, where TLS is on (run would stop on them)."""
    scopes = [(pool.settings, f"backend.{pool.db}.{pool.name}.", "") for pool in pools.values()]
    if settings["broker.mode"] != "embedded":
        scopes.append((settings, "", "broker."))
    errors: list[ConfError] = []
    certfile, keyfile = settings["metrics.listener.certfile"], settings["metrics.listener.keyfile"]
    if certfile or keyfile:
        where = values_at.get("metrics.listener.certfile") or values_at.get("metrics.listener.keyfile")
        if not certfile:
            errors.append(
                ConfError(where or Position(path, 1, 1), "metrics.listener.keyfile needs metrics.listener.certfile")
            )
        else:
            try:
                server_files_context(certfile, keyfile)
            except (OSError, ssl.SSLError, ValueError) as exc:
                key, message = load_problem(exc, "metrics.listener.", certfile, keyfile)
                errors.append(ConfError(values_at.get(key) or where or Position(path, 1, 1), message))
    for scope, key_prefix, prefix in scopes:
        if not scope[f"{prefix}ssl"]:
            continue
        for key, message in tls_problems(scope, prefix):
            where = values_at.get(key_prefix + key) or values_at.get(f"{key_prefix}{prefix}ssl") or Position(path, 1, 1)
            errors.append(ConfError(where, f"{key_prefix}{key}: {message}"))
    return errors


def load_config(path: str | Path) -> Config:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfErrors([ConfError(Position(str(path), 1, 1), f"cannot read config: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfErrors([ConfError(Position(str(path), 1, 1), f"config is not UTF-8: {exc.reason}")]) from None
    return parse_config(str(path), text)
