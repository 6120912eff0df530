"""`rules/*.conf`: EMQX-style hook lines compiled into rules.

    backend.<db>.hook.<hookpoint>.<n> = {"pool": ..., "action": ..., "topic": ...}

Every problem is collected with its `path:line:col`; loading raises ConfErrors
once with all of them.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bridge.conf import registry
from bridge.conf.config import Config
from bridge.conf.errors import ConfError, ConfErrors, Position
from bridge.conf.lexer import Entry, read_entries
from bridge.conf.parsers import JsonProblem, duration_in, load_json
from bridge.events import Hookpoint
from bridge.functions import FETCH_FUNCTIONS, FUNCTIONS, STORE_FUNCTIONS, Capability, FunctionSpec
from bridge.render import CommandTemplate, RenderError, StatementTemplate
from bridge.sql import SqlStatement, cql_marker, pg_marker
from bridge.topics import filter_error

_HOOK_KEY = re.compile(r"^backend\.([a-z]+)\.hook\.([a-z]+\.[a-z]+)\.(\d+)$")
_RULE_KEYS = ("pool", "action", "topic", "offline_opts", "expired_time", "payload_format")
_ACTION_KINDS = ("function", "commands", "sql", "cql", "template")
_ACTION_OPTIONS = {"commands": ("pipeline",)}  # keys an action object may hold beside its kind
_MAX_RETURNED = 100_000  # one fetch page; the rest follows as the subscriber acks
_MAX_EXPIRED_TIME = 630_720_000  # Cassandra's largest TTL; the same bound for every backend
_TIME_RANGE = duration_in(1, 100 * 365 * 86400)  # a timestamp this far back still exists in every database


@dataclass(frozen=True, slots=True)
class FunctionAction:
    spec: FunctionSpec


@dataclass(frozen=True, slots=True)
class CommandsAction:
    commands: tuple[CommandTemplate, ...]
    pipeline: bool = True  # False: one round trip per command, stop at the first error


@dataclass(frozen=True, slots=True)
class SqlAction:
    """PostgreSQL `sql` (one transaction) or Cassandra `cql` (in order): every ${x} a bind parameter."""

    statements: tuple[SqlStatement, ...]


@dataclass(frozen=True, slots=True)
class TemplateAction:
    template: StatementTemplate
    path: str


Action = FunctionAction | CommandsAction | SqlAction | TemplateAction


@dataclass(frozen=True, slots=True)
class OfflineOpts:
    max_returned_count: int = 500
    time_range: float | None = None  # seconds; None: no limit
    clean_sessions: bool = False  # also fetch for clean sessions (the pool's fetch_clean_sessions)


@dataclass(frozen=True, slots=True)
class Rule:
    id: str  # "redis.message.publish.1"
    db: str
    pool: str  # "<db>.<pool>"
    hookpoint: Hookpoint
    order: int
    topics: tuple[str, ...] | None
    action: Action
    where: Position
    offline_opts: OfflineOpts = field(default_factory=OfflineOpts)
    expired_time: int | None = None
    payload_format: str = "plain_text"
    # what a Unix time in seconds is multiplied by where the backend writes integer times (Redis's
    # `timestamps = milliseconds`: 1000)
    time_scale: int = 1

    @property
    def applies(self) -> Callable[[Any, Any], bool] | None:
        """The check of the rule's function, `applies(event, rule)`: False when it has nothing to
        do for this event (not queued). None: the rule takes every event. The engine calls it
        (pipeline/engine.py)."""
        return self.action.spec.applies if isinstance(self.action, FunctionAction) else None


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What rule validation needs to know about the rest of the bridge."""

    config: Config
    templates_dir: Path
    backends: frozenset[str]  # the installed backends (bridge/conf/registry.py)
    capabilities: frozenset[Capability]  # of the configured broker mode


def _locate(raw: str, *needles: str) -> int:
    """Offset of the last of `needles`, each searched after the previous one."""
    offset = 0
    for needle in needles:
        found = raw.find(needle, offset)
        if found < 0:
            return offset
        offset = found
    return offset


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class _RuleBuilder:
    def __init__(self, entry: Entry, ctx: RuleContext, errors: list[ConfError]) -> None:
        self.entry, self.ctx, self.errors = entry, ctx, errors
        self.failed = False

    def error(self, message: str, *needles: str) -> None:
        self.failed = True
        self.errors.append(ConfError(self.entry.at(_locate(self.entry.value, *needles)), message))

    def build(self) -> Rule | None:
        entry = self.entry
        match = _HOOK_KEY.match(entry.key)
        if not match:
            self.failed = True
            self.errors.append(
                ConfError(entry.key_at, f"bad hook line key {entry.key!r}: expected backend.<db>.hook.<hookpoint>.<n>")
            )
            return None
        db, hook_text, order = match.group(1), match.group(2), int(match.group(3))
        hook_col = entry.key.index(".hook.") + 6
        key_at = entry.key_at
        if db not in self.ctx.backends:
            self.errors.append(ConfError(key_at, f"unknown database {db!r}{_suggest(db, sorted(self.ctx.backends))}"))
            return None
        try:
            hookpoint = Hookpoint(hook_text)
        except ValueError:
            at = Position(key_at.path, key_at.line, key_at.col + hook_col)
            names = [h.value for h in Hookpoint]
            self.errors.append(ConfError(at, f"unknown hookpoint {hook_text!r}{_suggest(hook_text, names)}"))
            return None
        try:
            body = load_json(entry.value)
        except JsonProblem as exc:
            self.errors.append(ConfError(entry.at(exc.offset), str(exc)))
            return None
        if not isinstance(body, dict):
            self.error("a hook line's value must be a JSON object")
            return None
        for key in body:
            if key not in _RULE_KEYS:
                self.error(f"unknown key {key!r}{_suggest(key, list(_RULE_KEYS))}", f'"{key}"')
        pool = self._pool(db, body.get("pool"))
        topics = self._topics(hookpoint, body.get("topic"))
        action = self._action(db, hookpoint, body.get("action"))
        opts = self._offline_opts(action, body.get("offline_opts"))
        expired = self._expired_time(body.get("expired_time"))
        payload_format = body.get("payload_format", "plain_text")
        if payload_format not in ("plain_text", "json"):
            self.error(f'payload_format must be "plain_text" or "json", got {payload_format!r}', '"payload_format"')
        if self.failed or pool is None or action is None:
            return None
        settings = self.ctx.config.pools[pool].settings
        opts = replace(opts, clean_sessions=bool(settings.get("fetch_clean_sessions")))
        if expired is None and isinstance(action, FunctionAction) and action.spec.impl_name in STORE_FUNCTIONS:
            expired = settings.get("default_expired_time") or None
        return Rule(
            id=f"{db}.{hookpoint}.{order}",
            db=db,
            pool=pool,
            hookpoint=hookpoint,
            order=order,
            topics=topics,
            action=action,
            where=entry.key_at,
            offline_opts=opts,
            expired_time=expired,
            payload_format=payload_format,
            time_scale=1000 if settings.get("timestamps") == "milliseconds" else 1,
        )

    def _pool(self, db: str, name: Any) -> str | None:
        pools = [p.name for p in self.ctx.config.pools_of(db)]
        if name is None:
            if len(pools) == 1:
                return f"{db}.{pools[0]}"
            self.error(
                f'no "pool" given and the config has {len(pools)} {db} pools'
                + (f" ({', '.join(pools)})" if pools else f"; add backend.{db}.pool1.server to the config")
            )
            return None
        if not isinstance(name, str) or name not in pools:
            known = ", ".join(pools) or "none"
            self.error(f"unknown {db} pool {name!r} (configured: {known})", '"pool"', f'"{name}"')
            return None
        return f"{db}.{name}"

    def _topics(self, hookpoint: Hookpoint, value: Any) -> tuple[str, ...] | None:
        if value is None:
            return None
        if hookpoint in (Hookpoint.CLIENT_CONNECTED, Hookpoint.CLIENT_DISCONNECTED):
            self.error(f'"topic" does not apply to {hookpoint} (client events have no topic)', '"topic"')
            return None
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items or not all(isinstance(t, str) for t in items):
            self.error('"topic" must be a topic filter or a list of them', '"topic"')
            return None
        for topic in items:
            problem = filter_error(topic)
            if problem:
                self.error(
                    problem if problem.startswith("bad") else f"bad topic filter: {problem}", '"topic"', f'"{topic}"'
                )
        return tuple(items)

    def _action(self, db: str, hookpoint: Hookpoint, action: Any) -> Action | None:
        if not isinstance(action, dict) or len(action.keys() & set(_ACTION_KINDS)) != 1:
            self.error(
                '"action" must be an object with exactly one of function, commands, sql, cql, template',
                '"action"',
            )
            return None
        kind = next(k for k in action if k in _ACTION_KINDS)
        for key in action.keys() - {kind, *_ACTION_OPTIONS.get(kind, ())}:
            self.error(f"unknown key {key!r} in a {kind} action", '"action"', f'"{key}"')
        if kind == "function":
            return self._function(db, hookpoint, action["function"])
        if kind == "template":
            return self._template(hookpoint, action["template"])
        plugin = registry.backends()[db]
        if kind != plugin.statements:
            allowed = plugin.statements
            self.error(
                f"{kind} actions are not for {db}" + (f"; {db} takes {allowed}" if allowed else ""),
                '"action"',
                f'"{kind}"',
            )
            return None
        return self._statements(plugin, kind, hookpoint, action)

    def _function(self, db: str, hookpoint: Hookpoint, name: Any) -> Action | None:
        needle = ('"function"', f'"{name}"')
        spec = FUNCTIONS.get(name) if isinstance(name, str) else None
        if spec is None:
            self.error(f"unknown function {name!r} for {hookpoint}{_suggest(str(name), list(FUNCTIONS))}", *needle)
            return None
        if hookpoint not in spec.hookpoints:
            bound = ", ".join(sorted(spec.hookpoints))
            self.error(f"function {name} cannot run on {hookpoint} (it runs on {bound})", *needle)
            return None
        if spec.impl_name not in registry.backends()[db].functions:
            self.error(f"function {name} is not implemented by the {db} backend", *needle)
            return None
        missing = spec.needs - self.ctx.capabilities
        if missing:
            mode = self.ctx.config["broker.mode"]
            self.error(
                f"function {name} needs {', '.join(sorted(missing))}, which broker mode {mode} does not offer",
                *needle,
            )
            return None
        return FunctionAction(spec)

    def _template(self, hookpoint: Hookpoint, path: Any) -> Action | None:
        needle = ('"template"', f'"{path}"')
        if not isinstance(path, str) or not path:
            self.error('"template" must be a path under templates/', *needle)
            return None
        file = (self.ctx.templates_dir / path).resolve()
        if not file.is_relative_to(self.ctx.templates_dir.resolve()) or not file.is_file():
            self.error(f"template {path!r} not found under {self.ctx.templates_dir}", *needle)
            return None
        display = str(self.ctx.templates_dir / path)
        try:
            return TemplateAction(StatementTemplate(file, display, hookpoint), path)
        except RenderError as exc:
            self.failed = True
            self.errors.append(ConfError(Position(display, exc.line or 1, exc.col), str(exc)))
            return None

    def _statements(
        self, plugin: registry.BackendPlugin, kind: str, hookpoint: Hookpoint, action: dict[str, Any]
    ) -> Action | None:
        texts = action[kind]
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            self.error(f'"{kind}" must be a statement or a non-empty list of them', f'"{kind}"')
            return None
        pipeline = action.get("pipeline", True)
        if not isinstance(pipeline, bool):
            self.error('"pipeline" must be true or false', '"pipeline"')
        compiled: list[Any] = []
        for text in texts:
            start = _locate(self.entry.value, f'"{kind}"', json.dumps(text)[:-1]) + 1
            try:
                if kind == "commands":
                    compiled.append(self._command(plugin, text, hookpoint))
                else:
                    marker = cql_marker if kind == "cql" else pg_marker
                    compiled.append(SqlStatement.compile(text, hookpoint, marker))
            except RenderError as exc:
                self.failed = True
                self.errors.append(ConfError(self.entry.at(start + exc.offset), str(exc)))
        if kind == "commands":
            return CommandsAction(tuple(compiled), pipeline is not False)
        return SqlAction(tuple(compiled))

    def _command(self, plugin: registry.BackendPlugin, text: str, hookpoint: Hookpoint) -> CommandTemplate:
        template = CommandTemplate.compile(text, hookpoint)
        problem = plugin.statement_problem(text)
        if problem:
            raise RenderError(problem, len(text) - len(text.lstrip()))
        return template

    def _offline_opts(self, action: Action | None, value: Any) -> OfflineOpts:
        if value is None:
            return OfflineOpts()
        is_fetch = isinstance(action, FunctionAction) and action.spec.impl_name in FETCH_FUNCTIONS
        if action is not None and not is_fetch:
            self.error('"offline_opts" applies only to the fetch functions', '"offline_opts"')
        if not isinstance(value, dict) or value.keys() - {"max_returned_count", "time_range"}:
            self.error('"offline_opts" takes max_returned_count and time_range', '"offline_opts"')
            return OfflineOpts()
        count = value.get("max_returned_count", 500)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= _MAX_RETURNED:
            self.error(f"max_returned_count must be an integer from 1 to {_MAX_RETURNED}", '"max_returned_count"')
            count = 500
        time_range = value.get("time_range")
        seconds = None
        if time_range is not None:
            try:
                if isinstance(time_range, bool) or not isinstance(time_range, str | int | float):
                    raise ValueError(f"expected a duration such as 2h, got {time_range!r}")
                seconds = _TIME_RANGE(str(time_range))
            except ValueError as exc:
                self.error(f"time_range: {exc}", '"time_range"')
        return OfflineOpts(count, seconds)

    def _expired_time(self, value: Any) -> int | None:
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _MAX_EXPIRED_TIME:
            self.error(
                f"expired_time must be a whole number of seconds from 1 to {_MAX_EXPIRED_TIME} (20 years)",
                '"expired_time"',
            )
            return None
        return value


def parse_rules(
    path: str, text: str, ctx: RuleContext, seen: dict[str, Position] | None = None
) -> tuple[list[Rule], list[ConfError]]:
    entries, errors = read_entries(path, text)
    seen = {} if seen is None else seen
    rules: list[Rule] = []
    for entry in entries:
        if entry.key in seen:
            first = seen[entry.key]
            errors.append(ConfError(entry.key_at, f"duplicate key {entry.key} (first at {first})"))
            continue
        seen[entry.key] = entry.key_at
        rule = _RuleBuilder(entry, ctx, errors).build()
        if rule is not None:
            rules.append(rule)
    return rules, errors


def load_rules(rules_dir: str | Path, ctx: RuleContext) -> list[Rule]:
    """Every `*.conf` under `rules_dir`, in name order; raises ConfErrors with all problems."""
    directory = Path(rules_dir)
    if not directory.is_dir():
        raise ConfErrors([ConfError(Position(str(directory), 1, 1), "rules directory not found")])
    rules: list[Rule] = []
    errors: list[ConfError] = []
    seen: dict[str, Position] = {}
    for file in sorted(directory.glob("*.conf")):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(ConfError(Position(str(file), 1, 1), f"cannot read rules file: {exc}"))
            continue
        found, problems = parse_rules(str(file), text, ctx, seen)
        rules.extend(found)
        errors.extend(problems)
    if errors:
        raise ConfErrors(errors)
    return rules
