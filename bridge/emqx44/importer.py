"""EMQX 4.4 Enterprise backend config files -> hookbridge config and rules.

EMQX 4.4 Enterprise keeps each backend in `etc/plugins/emqx_backend_<db>.conf`: pool lines
(`backend.<db>.<pool>.<key>`; Cassandra's pools are `backend.ecql.<pool>.<key>`), a few backend-wide
keys (`backend.pgsql.max_returned_count`, `backend.redis.msg.expired_after`, ...) and hook lines
(`backend.<db>.hook.<hookpoint>.<n> = {JSON}`), which are hookbridge's own rule syntax (docs/rules.md).

Every key is accounted for: mapped onto a hookbridge setting (EMQX's name when it differs, its
value as written), honoured by what hookbridge always does (a comment in the output says so), a
warning (EMQX would have done something hookbridge does not: the output still runs), or an error
(nothing is written). Problems are `path:line:col: message` in the EMQX file, all of them at once:
the generated config and rules are validated in memory by hookbridge's own parsers, and their
errors are mapped back to the EMQX line they came from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bridge.conf import registry
from bridge.conf.config import Config, parse_config
from bridge.conf.errors import ConfError, ConfErrors, Position, printable
from bridge.conf.lexer import Entry, read_entries
from bridge.conf.parsers import JsonProblem, load_json
from bridge.rules import RuleContext, parse_rules

# hookbridge <db> -> the file EMQX 4.4 keeps it in
FILES = {
    "redis": "emqx_backend_redis.conf",
    "pgsql": "emqx_backend_pgsql.conf",
    "mysql": "emqx_backend_mysql.conf",
    "mongo": "emqx_backend_mongo.conf",
    "cassa": "emqx_backend_cassa.conf",
}
# the prefix of pool keys in each file (Cassandra's pools are `ecql`, its hooks `cassa`)
POOL_PREFIX = {"redis": "redis", "pgsql": "pgsql", "mysql": "mysql", "mongo": "mongo", "cassa": "ecql"}

FETCH = frozenset({"on_message_fetch", "on_message_fetch_for_queue", "on_message_fetch_for_pubsub"})
STORE = frozenset({"on_message_publish", "on_message_store"})
# JSON strings of a hook line that EMQX spells differently: EMQX's string -> (hookbridge's, why).
# Each is a warning and a comment above the line; the rest of the line is copied as written.
VALUE_ALIASES = {
    # the Cassandra page (and emqx-operator's shipped emqx_backend_cassa.conf)
    "on_subscription_lookup": (
        "on_subscribe_lookup",
        "EMQX's on_subscription_lookup is hookbridge's on_subscribe_lookup",
    ),
    # the MongoDB pages: "payload_format options mongo_json | plain_text"; hookbridge's `json` stores
    # a JSON payload as a document, as mongo_json did (docs/import-emqx.md says what is unverified)
    "mongo_json": (
        "json",
        "EMQX's payload_format mongo_json is hookbridge's json (a JSON payload stored as a document)",
    ),
}
# EMQX let a retained message expire (the Chinese Redis page binds on_message_retain with
# "expired_time": 3600); hookbridge keeps it while it is retained (docs/backends/redis.md).
RETAIN_EXPIRY = (
    "expired_time on on_message_retain: hookbridge keeps a retained message until it is replaced or"
    " deleted (or its own MQTT 5 expiry), not for expired_time"
)
# EMQX functions hookbridge has no counterpart for: the name -> why it is refused. The Chinese
# Redis page shows the keep-latest trio (commented out) as an alternative to the fetch functions.
REFUSED_FUNCTIONS = {
    name: f"EMQX's {name} (keep only each topic's latest message) has no hookbridge counterpart:"
    " on_message_publish with on_message_fetch_for_pubsub keeps and delivers every message, and"
    " on_message_retain with on_retain_lookup keeps one message per topic"
    for name in ("on_message_fetch_for_keep_latest", "on_message_store_keep_latest", "on_message_acked_for_keep_latest")
}
# EMQX hookpoints hookbridge has not: session.created ran when a session was opened, which for
# the functions bound there (on_subscribe_lookup) is client.connected
HOOK_ALIASES = {"session.created": "client.connected"}


@dataclass(frozen=True)
class Problem:
    where: Position
    message: str
    warning: bool = False

    def __str__(self) -> str:
        return f"{self.where}: {'warning: ' if self.warning else ''}{printable(self.message)}"


@dataclass
class _Line:
    """One generated line and the EMQX entry it came from (to map errors back)."""

    text: str
    entry: Entry | None = None
    value_col: int = 0  # 1-based column of the value in `text` (0: not a copy of the entry's value)
    # (column, shift): the value's columns from `column` on (1-based, in `text`) moved by `shift`
    # characters by a renamed string before them (VALUE_ALIASES)
    shifts: list[tuple[int, int]] = field(default_factory=list)
    emqx_key: str = ""  # the EMQX pool key this line stands for (to find a key set twice)

    def source(self, col: int) -> Position | None:
        if self.entry is None:
            return None
        if self.value_col and col >= self.value_col:
            col -= sum(shift for at, shift in self.shifts if col >= at)
            offset = col - self.value_col
            if offset <= len(self.entry.value):
                return self.entry.at(offset)
            return self.entry.value_at
        return self.entry.key_at


@dataclass
class Result:
    files: dict[str, str] = field(default_factory=dict)  # relative output path -> text
    problems: list[Problem] = field(default_factory=list)
    sources: list[Path] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.warning]


# --- pool keys -------------------------------------------------------------------------------------

# A special key: (value) -> (hookbridge value or None, the output comment or problem message, warning?)
Special = Callable[[str], tuple[str | None, str, bool | None]]


def _same(key: str) -> Callable[[str], tuple[str | None, str, bool | None]]:
    return lambda value: (value, key, None)


def _auto_reconnect(value: str) -> tuple[str | None, str, bool | None]:
    if value.strip().lower() in ("0", "false", "off"):
        return None, "hookbridge always reconnects: auto_reconnect = 0 is not honoured", True
    return None, "honoured: hookbridge always reconnects (backoff up to retry_backoff_max)", None


def _verify(value: str) -> tuple[str | None, str, bool | None]:
    mapped = {"verify_peer": "on", "verify_none": "off"}.get(value.strip().lower(), value)
    return mapped, "ssl.verify", None


def _redis_channel(value: str) -> tuple[str | None, str, bool | None]:
    return None, "hookbridge does not subscribe to a Redis channel (EMQX's `channel` is not honoured)", True


def _cassa_logger(value: str) -> tuple[str | None, str, bool | None]:
    return None, "the driver's log level is hookbridge's log.level (EMQX's per-pool `logger` is not honoured)", True


def _pg_encoding(value: str) -> tuple[str | None, str, bool | None]:
    if value.strip().lower().replace("-", "") in ("utf8", "unicode"):
        return None, "honoured: hookbridge talks UTF-8 to PostgreSQL", None
    return None, f"hookbridge talks UTF-8 to PostgreSQL only, not {value!r}", False


def _w_mode(value: str) -> tuple[str | None, str, bool | None]:
    if value.strip() == "safe":
        return None, "honoured: hookbridge always waits for the server's acknowledgement (safe)", None
    return None, "hookbridge always writes safe (acknowledged = kept): w_mode = unsafe is not honoured", True


def _r_mode(value: str) -> tuple[str | None, str, bool | None]:
    if value.strip() == "master":
        return None, "honoured: hookbridge reads from the primary (master)", None
    return None, "hookbridge reads from the primary: r_mode = slave_ok is not honoured", True


def _srv_record(value: str) -> tuple[str | None, str, bool | None]:
    if value.strip().lower() in ("false", "off", "0"):
        return None, "honoured: no SRV lookup", None
    return None, "SRV records are not supported: list the servers in `server` and set rs_set_name / auth_source", False


_SSL: dict[str, Special] = {
    "ssl": _same("ssl"),
    "ssl.enable": _same("ssl"),
    "keyfile": _same("ssl.keyfile"),
    "certfile": _same("ssl.certfile"),
    "cacertfile": _same("ssl.cafile"),
    "ssl.keyfile": _same("ssl.keyfile"),
    "ssl.certfile": _same("ssl.certfile"),
    "ssl.cacertfile": _same("ssl.cafile"),
    "ssl_opts.keyfile": _same("ssl.keyfile"),
    "ssl_opts.certfile": _same("ssl.certfile"),
    "ssl_opts.cacertfile": _same("ssl.cafile"),
    "verify": _verify,
    "ssl.verify": _verify,
    "ssl_opts.verify": _verify,
}
_COMMON: dict[str, Special] = {
    "server": _same("server"),
    "pool_size": _same("pool_size"),
    "password": _same("password"),
    "auto_reconnect": _auto_reconnect,
    **_SSL,
}
POOL_KEYS: dict[str, dict[str, Special]] = {
    "redis": {
        **_COMMON,
        "type": _same("type"),
        "sentinel": _same("sentinel"),
        "database": _same("database"),
        "channel": _redis_channel,
    },
    "pgsql": {**_COMMON, "username": _same("username"), "database": _same("database"), "encoding": _pg_encoding},
    "mysql": {**_COMMON, "user": _same("user"), "username": _same("user"), "database": _same("database")},
    "mongo": {
        **_COMMON,
        "type": _same("type"),
        "rs_set_name": _same("replica_set"),
        "c_pool_size": _same("pool_size"),
        "database": _same("database"),
        "login": _same("login"),
        "auth_source": _same("auth_source"),
        "w_mode": _w_mode,
        "r_mode": _r_mode,
        "srv_record": _srv_record,
    },
    "cassa": {
        **{k: s for k, s in _COMMON.items() if k not in ("server", "pool_size")},
        "nodes": _same("nodes"),
        "size": _same("pool_size"),
        "username": _same("username"),
        "keyspace": _same("keyspace"),
        "logger": _cassa_logger,
    },
}

_HOOK = re.compile(r"^backend\.([a-z]+)\.hook\.([a-z_.]+)\.(\d+)$")
_POOL = re.compile(r"^backend\.([a-z]+)\.([A-Za-z0-9_\-]+)\.(.+)$")


# --- the conversion --------------------------------------------------------------------------------


@dataclass
class _Hook:
    entry: Entry
    db: str
    hookpoint: str
    order: int
    value: str
    renamed: list[str] = field(default_factory=list)  # what VALUE_ALIASES renamed in `value`
    # (offset in `value` just after a renamed string, its change in length), in value order
    shifts: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _File:
    db: str
    path: Path
    pools: dict[str, list[_Line]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hooks: list[_Hook] = field(default_factory=list)
    max_returned_count: int | None = None
    time_range: str | None = None
    expired_after: int | None = None  # backend.redis.msg.expired_after when > 0
    expired_after_set: bool = False  # the key was there (<= 0: EMQX's default applies)


def find_files(directory: Path) -> dict[str, Path]:
    """The EMQX backend files in `directory`, or in its plugins/ or etc/plugins/."""
    found: dict[str, Path] = {}
    for base in (directory, directory / "plugins", directory / "etc" / "plugins"):
        for db, name in FILES.items():
            if db not in found and (base / name).is_file():
                found[db] = base / name
    return found


# EMQX 4.4's broker file: only the session lifetime of its external zone (the zone its device
# listeners use) is read; the rest of it is the broker's, which the embedded broker configures its way.
BROKER_FILE = "emqx.conf"
SESSION_EXPIRY_KEY = "zone.external.session_expiry_interval"
# etc/emqx.conf's default for that key in EMQX 4.4 (its configuration reference, "duration, 2h")
EMQX_SESSION_EXPIRY = "2h"


def find_broker_file(directory: Path) -> Path | None:
    """EMQX's etc/emqx.conf beside the backend files: in `directory`, its etc/, or above plugins/."""
    for base in (directory, directory / "etc", directory.parent):
        if (base / BROKER_FILE).is_file():
            return base / BROKER_FILE
    return None


def convert(directory: Path, out_config: str = "config/bridge.conf", out_rules: str = "rules") -> Result:
    result = Result()
    files = find_files(directory)
    if not files:
        names = ", ".join(FILES.values())
        result.problems.append(Problem(Position(str(directory), 1, 1), f"no EMQX backend file here ({names})"))
        return result
    parsed: list[_File] = []
    for db, path in files.items():
        result.sources.append(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            result.problems.append(Problem(Position(str(path), 1, 1), f"cannot read: {exc}"))
            continue
        parsed.append(_read(db, path, text, result.problems))

    lines = _config_lines(parsed, _session_expiry_lines(directory, result))
    config_path = out_config
    config = _check_config(config_path, lines, result.problems)
    rule_files = {db: _rule_lines(file) for db, file in ((f.db, f) for f in parsed) if file.hooks}
    if config is not None:
        ctx = RuleContext(
            config,
            Path(out_rules).parent / "templates",
            frozenset(registry.backends()),
            registry.modes()[config["broker.mode"]].capabilities,
        )
        seen: dict[str, Position] = {}
        for db, rule_lines in sorted(rule_files.items()):
            _rules, errors = parse_rules(
                f"{out_rules}/{db}.conf", "\n".join(line.text for line in rule_lines) + "\n", ctx, seen
            )
            _map_back(errors, rule_lines, result.problems)
    result.problems.sort(key=lambda p: (p.where.path, p.where.line, p.where.col))
    if result.errors:
        return result
    result.files[out_config] = "\n".join(line.text for line in lines) + "\n"
    for db, rule_lines in sorted(rule_files.items()):
        result.files[f"{out_rules}/{db}.conf"] = "\n".join(line.text for line in rule_lines) + "\n"
    return result


def _read(db: str, path: Path, text: str, problems: list[Problem]) -> _File:
    file = _File(db, path)
    entries, lexer_errors = read_entries(str(path), text)
    problems.extend(Problem(e.where, e.message) for e in lexer_errors)
    prefix = POOL_PREFIX[db]
    keys = POOL_KEYS[db]
    poolless: list[tuple[Entry, str]] = []  # pool keys without a pool name, placed once the pools are known
    for entry in entries:
        key = entry.key
        hook = _HOOK.match(key)
        if hook:
            if hook.group(1) != db:
                problems.append(
                    Problem(entry.key_at, f"a {hook.group(1)} hook line in {path.name}: expected backend.{db}.hook.*")
                )
                continue
            _hook(file, entry, hook.group(2), int(hook.group(3)), problems)
            continue
        if _global(file, entry, problems):
            continue
        pool = _POOL.match(key)
        if pool and pool.group(1) == prefix:
            _pool_key(file, entry, pool.group(2), pool.group(3), keys, problems)
            continue
        rest = key.removeprefix(f"backend.{prefix}.").removeprefix(f"backend.{db}.")
        if rest != key and rest in keys:
            poolless.append((entry, rest))
            continue
        problems.append(Problem(entry.key_at, f"unknown EMQX 4.4 {db} backend key {key}"))
    for entry, rest in poolless:
        _poolless_key(file, entry, rest, keys, problems)
    _redis_type(file, problems)
    return file


def _poolless_key(file: _File, entry: Entry, key: str, keys: dict[str, Special], problems: list[Problem]) -> None:
    """A pool key written without a pool name, as the English Redis page's Sentinel example writes
    `backend.redis.server` and `backend.redis.sentinel`: it belongs to the file's one pool."""
    pools = sorted(file.pools) or ["pool1"]
    if len(pools) > 1:
        problems.append(
            Problem(
                entry.key_at, f"{entry.key} names no pool and the file has {len(pools)}: write backend.<pool>.{key}"
            )
        )
        return
    pool = pools[0]
    taken = next((line for line in file.pools.get(pool, []) if line.emqx_key == key), None)
    if taken is not None and taken.entry is not None:
        problems.append(
            Problem(
                entry.key_at,
                f"{entry.key} names no pool, and {taken.entry.key} (line {taken.entry.key_at.line}) already sets"
                f" {pool}'s {key}: keep one of them",
            )
        )
        return
    problems.append(Problem(entry.key_at, f"{entry.key} names no pool: taken as {pool}'s {key}", warning=True))
    _pool_key(file, entry, pool, key, keys, problems)


def _redis_type(file: _File, problems: list[Problem]) -> None:
    """A Redis pool's `sentinel` and `type` as EMQX's pages pair them: the English page has no `type`
    (a master name there means Sentinel mode); the Chinese page shows `sentinel` beside `type = single`
    ("the sentinel name in sentinel mode"), where it has no use: a warning, and it is left out."""
    if file.db != "redis":
        return
    for pool, lines in file.pools.items():
        sentinel = next((line for line in lines if line.emqx_key == "sentinel" and line.entry), None)
        kind = next((line for line in lines if line.emqx_key == "type" and line.entry), None)
        if sentinel is None or sentinel.entry is None:
            continue
        where = f"## {file.path.name}:{sentinel.entry.key_at.line}:"
        if kind is None:
            lines.append(_Line(f"{where} a sentinel name without a type: Sentinel mode"))
            lines.append(_Line(f"backend.{file.db}.{pool}.type = sentinel", emqx_key="type"))
        elif kind.entry is not None and kind.entry.value.strip() != "sentinel":
            why = f"sentinel applies to type = sentinel only: left out (type is {kind.entry.value.strip()})"
            problems.append(Problem(sentinel.entry.key_at, why, warning=True))
            lines[lines.index(sentinel)] = _Line(f"{where} sentinel = {sentinel.entry.value}: {why}")


def _pool_key(
    file: _File, entry: Entry, pool: str, key: str, keys: dict[str, Special], problems: list[Problem]
) -> None:
    special = keys.get(key)
    lines = file.pools.setdefault(pool, [])
    if special is None:
        known = ", ".join(sorted(keys))
        problems.append(Problem(entry.key_at, f"unknown EMQX 4.4 {file.db} pool key {key!r} (known: {known})"))
        return
    if not entry.value.strip():  # the pages show `keyfile =` and `password =` empty: nothing set
        lines.append(_Line(f"## {file.path.name}:{entry.key_at.line}: {key} is empty: left unset", emqx_key=key))
        return
    value, what, warning = special(entry.value)
    if value is not None:
        text = f"backend.{file.db}.{pool}.{what} = "
        value_col = len(text) + 1 if value == entry.value else 0
        lines.append(_Line(text + value, entry, value_col=value_col, emqx_key=key))
        return
    if warning is False:
        problems.append(Problem(entry.value_at, what))
        return
    if warning:
        problems.append(Problem(entry.key_at, what, warning=True))
    lines.append(_Line(f"## {file.path.name}:{entry.key_at.line}: {key} = {entry.value}: {what}", emqx_key=key))


def _global(file: _File, entry: Entry, problems: list[Problem]) -> bool:
    """Backend-wide keys (not of a pool): True when `entry` was one."""
    rest = entry.key.removeprefix(f"backend.{file.db}.")
    if rest == entry.key:
        return False
    value = entry.value.strip()
    if rest == "max_returned_count" and file.db != "redis":
        if value == "infinity":
            problems.append(
                Problem(
                    entry.value_at,
                    "infinity is not honoured: hookbridge's default offline_opts.max_returned_count (500) applies",
                    warning=True,
                )
            )
        elif re.fullmatch(r"[0-9]{1,9}", value) and int(value) > 0:  # not isdigit(): int("²") raises
            file.max_returned_count = int(value)
        else:
            problems.append(Problem(entry.value_at, f"expected a positive number or infinity, got {value!r}"))
        return True
    if rest == "time_range" and file.db != "redis":
        if value != "infinity":
            if not re.fullmatch(r"[0-9]{1,9}[dhms]", value):
                problems.append(
                    Problem(entry.value_at, f"expected a duration such as 2h (d, h, m, s) or infinity, got {value!r}")
                )
            else:
                file.time_range = value
        return True
    if rest == "msg.expired_after" and file.db == "redis":
        if not re.fullmatch(r"-?[0-9]{1,10}", value):  # bounded: int() of 5,000 digits raises
            problems.append(Problem(entry.value_at, f"expected seconds, got {value!r}"))
        else:
            file.expired_after_set = True
            file.expired_after = int(value) if int(value) > 0 else None
        return True
    if file.db == "mongo" and rest.startswith("topology."):
        problems.append(
            Problem(
                entry.key_at,
                "pymongo sizes and times its own topology: EMQX's topology options are not honoured",
                warning=True,
            )
        )
        file.notes.append(
            f"## {file.path.name}:{entry.key_at.line}: {entry.key} = {entry.value}: not honoured (pymongo's own)"
        )
        return True
    return False


def _hook(file: _File, entry: Entry, hookpoint: str, order: int, problems: list[Problem]) -> None:
    hook = _Hook(entry, file.db, hookpoint, order, entry.value)
    if hookpoint in HOOK_ALIASES:
        problems.append(
            Problem(entry.key_at, f"EMQX's {hookpoint} is hookbridge's {HOOK_ALIASES[hookpoint]} here", warning=True)
        )
        hook.hookpoint = HOOK_ALIASES[hookpoint]
        hook.order = -order  # numbered after the rules of that hookpoint (below)
    refused = [(entry.value.find(f'"{name}"'), why) for name, why in REFUSED_FUNCTIONS.items()]
    refused = [(at, why) for at, why in refused if at >= 0]
    if refused:  # reported once, with its reason (not again as the rules parser's unknown function)
        problems.extend(Problem(entry.at(at + 1), why) for at, why in refused)
        return
    # Renames, in the order they occur in the value, so each shift is measured in the new text.
    found = sorted((entry.value.find(f'"{old}"'), old) for old in VALUE_ALIASES if f'"{old}"' in entry.value)
    value, moved = entry.value, 0
    for at, old in found:
        new, why = VALUE_ALIASES[old]
        problems.append(Problem(entry.at(at), why, warning=True))
        start = at + moved
        value = value[:start] + f'"{new}"' + value[start + len(old) + 2 :]
        moved += len(new) - len(old)
        hook.shifts.append((start + len(new) + 2, len(new) - len(old)))
        hook.renamed.append(old)
    hook.value = value
    at = entry.value.find('"expired_time"')
    if at >= 0 and '"on_message_retain"' in entry.value:  # the Chinese Redis page's publish.2
        problems.append(Problem(entry.at(at), RETAIN_EXPIRY, warning=True))
    file.hooks.append(hook)


def _extra_options(file: _File, value: str) -> dict[str, object]:
    """What the backend-wide keys add to a rule that does not set them itself."""
    try:
        body = load_json(value)
    except JsonProblem:
        return {}  # its error comes from the rules parser
    if not isinstance(body, dict) or not isinstance(body.get("action"), dict):
        return {}
    function = body["action"].get("function")
    extra: dict[str, object] = {}
    if function in FETCH and "offline_opts" not in body:
        opts: dict[str, object] = {}
        if file.max_returned_count is not None:
            opts["max_returned_count"] = file.max_returned_count
        if file.time_range is not None:
            opts["time_range"] = file.time_range
        if opts:
            extra["offline_opts"] = opts
    if function in STORE and "expired_time" not in body and file.expired_after is not None:
        extra["expired_time"] = file.expired_after
    return extra


def _rule_lines(file: _File) -> list[_Line]:
    lines = [
        _Line(f"## Rules of {file.path.name} (EMQX 4.4 Enterprise), by `hookbridge import-emqx`: docs/rules.md."),
        _Line("## Each line is the EMQX hook line as written, unless a comment above it says otherwise."),
    ]
    used: dict[str, set[int]] = {}
    for hook in file.hooks:
        if hook.order > 0:
            used.setdefault(hook.hookpoint, set()).add(hook.order)
    for hook in file.hooks:
        order = hook.order
        if order < 0:  # an alias: the next free number of its new hookpoint
            taken = used.setdefault(hook.hookpoint, set())
            order = max(taken, default=0) + 1
            taken.add(order)
        value = hook.value
        extra = _extra_options(file, value)
        notes = []
        where = f"## {file.path.name}:{hook.entry.key_at.line}:"
        if hook.hookpoint != hook.entry.key.split(".hook.")[1].rsplit(".", 1)[0]:
            notes.append(f"{where} renamed from EMQX's {hook.entry.key}")
        notes.extend(f"{where} {VALUE_ALIASES[old][1]}" for old in hook.renamed)
        if extra and value.rstrip().endswith("}"):
            keys = ", ".join(extra)
            notes.append(f"## {file.path.name}:{hook.entry.key_at.line}: {keys} from the backend-wide keys")
            addition = "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in extra.items())
            end = value.rstrip().rfind("}")
            value = value[:end] + addition + value[end:]
        lines.extend(_Line(note) for note in notes)
        key = f"backend.{file.db}.hook.{hook.hookpoint}.{order}"
        text = f"{key} = "
        shifts = [(len(text) + 1 + at, shift) for at, shift in hook.shifts]
        lines.append(_Line(text + value, hook.entry, value_col=len(text) + 1, shifts=shifts))
    return lines


def _config_lines(files: list[_File], broker_lines: list[_Line]) -> list[_Line]:
    sources = ", ".join(f.path.name for f in files)
    lines = [
        _Line(f"## Generated by `hookbridge import-emqx` from {sources} (EMQX 4.4 Enterprise)."),
        _Line("## Every key is documented in docs/configuration.md; edit freely. The broker: the embedded one"),
        _Line("## (broker.mode = embedded); the emqx and mqtt modes keep an existing broker (docs/brokers.md)."),
        _Line("node.name = ${HOOKBRIDGE_NODE:-hookbridge@127.0.0.1}"),
        _Line("broker.mode = embedded"),
        _Line("broker.listener.tcp = ${HOOKBRIDGE_MQTT_LISTEN:-127.0.0.1:1883}"),
        *broker_lines,
        _Line("metrics.listener = ${HOOKBRIDGE_METRICS_LISTEN:-127.0.0.1:9100}"),
        _Line("spool.dir = ${HOOKBRIDGE_SPOOL_DIR:-data/spool}"),
        _Line("deadletter.dir = ${HOOKBRIDGE_DEADLETTER_DIR:-data/deadletter}"),
    ]
    for file in files:
        lines.append(_Line(""))
        lines.append(_Line(f"## from {file.path.name}"))
        lines.extend(_Line(note) for note in file.notes)
        for pool, pool_lines in file.pools.items():
            lines.extend(pool_lines)
            lines.extend(_Line(text) for text in _emqx_semantics(file, pool))
    return lines


def _session_expiry_lines(directory: Path, result: Result) -> list[_Line]:
    """`broker.persistent_session_expiry` as EMQX's zone had it: a 3.1.1 session with clean
    session 0 ended `session_expiry_interval` after its client went (2h unless emqx.conf says
    otherwise), where hookbridge's own default keeps it for ever, as 3.1.1 says."""
    key = "broker.persistent_session_expiry = "
    path = find_broker_file(directory)
    found: Entry | None = None
    if path is not None:
        result.sources.append(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            result.problems.append(Problem(Position(str(path), 1, 1), f"cannot read: {exc}"))
            text = ""
        entries, _errors = read_entries(str(path), text)  # the broker's own file: only one key is ours
        found = next((e for e in reversed(entries) if e.key == SESSION_EXPIRY_KEY), None)
    if found is None:
        where = f"{path.name} has no {SESSION_EXPIRY_KEY}" if path else f"no {BROKER_FILE} read"
        return [
            _Line(f"## {where}: EMQX 4.4's default session lifetime ({SESSION_EXPIRY_KEY} = {EMQX_SESSION_EXPIRY})"),
            _Line(key + EMQX_SESSION_EXPIRY),
        ]
    return [
        _Line(f"## {BROKER_FILE}:{found.key_at.line}: {SESSION_EXPIRY_KEY} = {found.value}"),
        _Line(key + found.value, found, value_col=len(key) + 1),
    ]


# The Redis backend's lifetime of a stored message when `msg.expired_after` (or a rule's
# `expired_time`) is <= 0 or absent: 7200 s in a third-party decompile of emqx_backend_redis 4.2.1
# (the plug-in is closed source: unverified for 4.4, as
# docs/import-emqx.md#evidence-configuration-keys-and-semantics says).
EMQX_REDIS_DEFAULT_EXPIRY = 7200


def _emqx_semantics(file: _File, pool: str) -> list[str]:
    """The settings that make a pool behave as EMQX 4.4's backend did where a user would notice
    (docs/migrate-from-emqx44.md); an ordinary hookbridge config leaves them at their defaults."""
    prefix = f"backend.{file.db}.{pool}"
    lines = [
        "## EMQX 4.4's semantics (docs/import-emqx.md#emqx-44s-semantics): fetch for clean sessions too",
        f"{prefix}.fetch_clean_sessions = on",
    ]
    if file.db == "redis":
        lines.append("## EMQX's Redis backend wrote online_at, offline_at and ts in milliseconds")
        lines.append(f"{prefix}.timestamps = milliseconds")
        if file.expired_after is None:
            why = "msg.expired_after <= 0" if file.expired_after_set else "no msg.expired_after"
            lines.append(f"## {why}: EMQX's default lifetime of a stored message (7200 s)")
            lines.append(f"{prefix}.default_expired_time = {EMQX_REDIS_DEFAULT_EXPIRY}")
    return lines


def _check_config(path: str, lines: list[_Line], problems: list[Problem]) -> Config | None:
    text = "\n".join(line.text for line in lines) + "\n"
    try:
        return parse_config(path, text)
    except ConfErrors as exc:
        _map_back(exc.errors, lines, problems)
        return exc.partial if isinstance(exc.partial, Config) else None


def _map_back(errors: list[ConfError], lines: list[_Line], problems: list[Problem]) -> None:
    for error in errors:
        line = lines[error.where.line - 1] if 0 < error.where.line <= len(lines) else None
        where = line.source(error.where.col) if line is not None else None
        problems.append(Problem(where or error.where, error.message))
