"""Plug-ins: the backends and broker modes installed, found through entry points.

A backend is a package that declares itself in the `hookbridge.backends` entry point group
(pyproject.toml: `[project.entry-points."hookbridge.backends"]`, `redis = "actions.redis:PLUGIN"`)
with a `BackendPlugin`: its name, its pool settings (validated and documented from that one
declaration), the statements its rules take, and where its `Backend` class is. That class, and
with it the database driver, is imported only when something needs it (a pool of that database
runs, or its rules are checked). A broker mode declares itself in `hookbridge.modes` with a
`ModePlugin`: its capabilities, once, and the factory of its source, imported only in that mode.

Another installed package adds a backend or a mode by declaring entry points in these groups; the
core holds this registry, never a list of names.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the registry sits below everything that asks it: it imports no more than these
    from bridge.conf.errors import ConfError, Position
    from bridge.conf.setting import Setting
    from bridge.functions import Capability

BACKENDS_GROUP = "hookbridge.backends"
MODES_GROUP = "hookbridge.modes"
COMMANDS_GROUP = "hookbridge.commands"


def load_object(reference: str) -> Any:
    """The object a `module:attribute` reference names, importing the module now."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class BackendPlugin:
    """What a backend declares about itself; everything else the core learns from its class."""

    name: str  # the <db> of `backend.<db>.<pool>.<key>` and of hook lines
    title: str  # the database's name in the docs ("PostgreSQL")
    settings: Mapping[str, Setting]  # pool settings beside the common ones (they may override one)
    default_port: int  # an unset address is 127.0.0.1 on this port
    backend: str  # "module:Class" of its Backend, imported on first use (the driver with it)
    address_key: str = "server"  # the setting holding the address(es)
    statements: str | None = None  # the statement action its rules take: "commands", "sql", "cql"
    # "module:function" checking one statement text beyond its placeholders: a problem or None
    check_statement: str | None = None
    # "module:Class" stores of the embedded broker's users and ACL in this database
    # (`broker.auth.backend`, `broker.acl.backend`), each made from a pool's settings
    users: str | None = None
    acl: str | None = None
    # "module:function" checking a pool's settings together (a value that is fine alone but not
    # with another): (settings) -> [(key, message)], each reported at that key's value
    check_pool: str | None = None
    _loaded: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def backend_class(self) -> type[Any]:
        """The Backend class: imports the backend's modules and its driver on the first call
        (bridge.backend.backend_class checks that it is one and types it)."""
        found: type[Any] = self._load("backend", self.backend)
        return found

    @property
    def functions(self) -> frozenset[str]:
        """The functions (docs/rules.md#function-the-built-in-function-set) this backend implements."""
        return frozenset(self.backend_class().functions)

    def statement_problem(self, text: str) -> str | None:
        if self.check_statement is None:
            return None
        check: Callable[[str], str | None] = self._load("check", self.check_statement)
        return check(text)

    def pool_problems(self, settings: Mapping[str, Any]) -> list[tuple[str, str]]:
        if self.check_pool is None:
            return []
        check: Callable[[Mapping[str, Any]], list[tuple[str, str]]] = self._load("check_pool", self.check_pool)
        return check(settings)

    def users_store(self) -> Any:
        assert self.users is not None
        return self._load("users", self.users)

    def acl_store(self) -> Any:
        assert self.acl is not None
        return self._load("acl", self.acl)

    def _load(self, slot: str, reference: str) -> Any:
        if slot not in self._loaded:
            self._loaded[slot] = load_object(reference)
        return self._loaded[slot]


@dataclass(frozen=True)
class ModePlugin:
    """A broker mode (`broker.mode`): where events come from."""

    name: str
    summary: str  # for the docs: "embedded broker"
    capabilities: frozenset[Capability]  # what its source can do for the functions (docs/brokers.md)
    # "module:function" making its BrokerSource from (config, rules, msgids), imported only in this mode
    source: str
    # "module:function" checking the settings this mode reads, as `run` would use them: (path,
    # settings, where each value is) -> ConfErrors. Run in every mode, like the other global keys.
    config_check: str | None = None
    # True when several bridge processes can share its events through one shared subscription
    # (`$share/<group>/...`), so that `hookbridge run --workers N` may run N of them.
    shared_subscriptions: bool = False
    # The global settings this mode reads (`broker.*`), validated and documented from this one
    # declaration in every mode, like a backend's pool settings; modes may share one (the same Setting).
    settings: Mapping[str, Setting] = field(default_factory=dict)

    def source_factory(self) -> Callable[..., Any]:
        factory: Callable[..., Any] = load_object(self.source)
        return factory

    def config_problems(self, path: str, settings: dict[str, Any], values_at: dict[str, Position]) -> list[ConfError]:
        if self.config_check is None:
            return []
        check: Callable[[str, dict[str, Any], dict[str, Position]], list[ConfError]] = load_object(self.config_check)
        return check(path, settings, values_at)


@dataclass(frozen=True)
class CommandPlugin:
    """A sub-command of `hookbridge` that another package adds (the Spark reports add `report`), so
    the core CLI lists it without importing that package by name. Its module should import nothing
    heavy at module level: every `hookbridge` invocation loads it to build the parser."""

    name: str  # `hookbridge <name> ...`
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # the exit status
    # Rewrites the command's own arguments before argparse sees them (e.g. `--from -24h`, whose
    # value starts with "-"); None: they are parsed as given.
    prepare_argv: Callable[[list[str]], list[str]] | None = None


@dataclass(frozen=True)
class UnavailablePlugin:
    """An entry point whose import failed (a missing optional extra, a broken third-party
    package). Kept instead of raised, so one broken plug-in never takes the other commands down:
    what needs it says what is missing and how to install it."""

    group: str
    name: str
    reference: str  # the entry point's "module:attribute"
    distribution: str | None  # the package that declares it
    error: str  # the import's own message: "No module named 'spark_analytics'"
    hint: str  # what to install

    def explanation(self) -> str:
        source = f" (declared by {self.distribution})" if self.distribution else ""
        return f"{self.name} = {self.reference}{source} cannot be imported: {self.error}. {self.hint}"


def _install_hint(entry: EntryPoint, exc: BaseException) -> str:
    """How to get the module an import missed: the extra of the declaring package that requires
    it, or, when the missing module is the plug-in's own package, a reinstall of that package."""
    dist = entry.dist.name if entry.dist is not None else None
    missing = exc.name if isinstance(exc, ModuleNotFoundError) and exc.name else None
    if missing is None:
        return f"Reinstall {dist or 'the package that provides it'}, or remove it."
    top = missing.partition(".")[0]
    if dist is not None and top == entry.value.partition(":")[0].partition(".")[0]:
        return (
            f"This installation of {dist} lacks its own {top} package (an image or a build that left it out): "
            f"reinstall {dist} with it (pip install --force-reinstall {dist})."
        )
    requirements = entry.dist.requires if entry.dist is not None else None
    for requirement in requirements or []:
        needed = _EXTRA_REQUIREMENT.match(requirement)
        if needed and _normalized(needed["name"]) == _normalized(top):
            return f"Install the {needed['extra']!r} extra: pip install '{dist}[{needed['extra']}]'."
    return f"Install the Python package that provides {top} (pip install {top})."


# `pyspark<3.6,>=3.5; extra == "spark"` (a distribution's Requires-Dist): the name and the extra.
_EXTRA_REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*).*;.*\bextra\s*==\s*[\"'](?P<extra>[^\"']+)[\"']")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


# What each group's entry points must be.
_KINDS: dict[str, type[Any]] = {BACKENDS_GROUP: BackendPlugin, MODES_GROUP: ModePlugin, COMMANDS_GROUP: CommandPlugin}


@functools.cache
def _discover(group: str) -> tuple[dict[str, Any], dict[str, UnavailablePlugin]]:
    kind = _KINDS[group]
    found: dict[str, Any] = {}
    unavailable: dict[str, UnavailablePlugin] = {}
    for entry in sorted(entry_points(group=group), key=lambda entry: entry.name):  # stable: by name
        if entry.name in found or entry.name in unavailable:
            continue  # the first distribution wins, as on sys.path
        try:
            plugin = entry.load()
        except Exception as exc:  # ImportError, or whatever a broken module raises while importing
            dist = entry.dist.name if entry.dist is not None else None
            error, hint = f"{type(exc).__name__}: {exc}", _install_hint(entry, exc)
            unavailable[entry.name] = UnavailablePlugin(group, entry.name, entry.value, dist, error, hint)
            continue
        if not isinstance(plugin, kind) or plugin.name != entry.name:
            raise TypeError(f"entry point {entry.name} = {entry.value} in {group} is not a {kind.__name__} named so")
        found[entry.name] = plugin
    return found, unavailable


def backends() -> Mapping[str, BackendPlugin]:
    """Every installed backend that imports, by name, in the order the packages declare them."""
    return _discover(BACKENDS_GROUP)[0]


def modes() -> Mapping[str, ModePlugin]:
    """Every installed broker mode that imports, by name."""
    return _discover(MODES_GROUP)[0]


def commands() -> Mapping[str, CommandPlugin]:
    """Every installed extra sub-command of `hookbridge` that imports, by name."""
    return _discover(COMMANDS_GROUP)[0]


def unavailable(group: str) -> Mapping[str, UnavailablePlugin]:
    """The plug-ins of `group` (BACKENDS_GROUP, MODES_GROUP, COMMANDS_GROUP) declared but not importable."""
    return _discover(group)[1]


def unavailable_note(group: str, name: str) -> str:
    """ "; <why>" when `name` is declared in `group` but does not import, else "": for error messages."""
    broken = unavailable(group).get(name)
    return f"; it is installed but {broken.explanation()}" if broken is not None else ""


def rediscover() -> None:
    """Forget what was found, so the next call looks at the installed entry points again (a
    package installed or removed since: the plug-in tests)."""
    _discover.cache_clear()
