"""The compiled build: which modules a wheel compiles with mypyc, and how to run without them.

A wheel or an image (`pip install .`, the Dockerfile) compiles the modules of `COMPILED` into C
extensions (setup.py reads this list), as black and mypy ship theirs: the per-message path of the
embedded broker (the MQTT codec, the router and its topic trees, a client's connection, channel,
sessions and publish path), the rules' dispatcher and runner, and message ids. The `.py`
files are installed beside them, and are the same code: the tests pass on both
(docs/development.md#the-compiled-build).

`HOOKBRIDGE_NO_EXTENSIONS=1` (as aiohttp's `AIOHTTP_NO_EXTENSIONS`) does both halves of the
fallback: setup.py then builds a pure-Python wheel, and an installed compiled package imports
the `.py` files instead of the extensions (`prefer_sources`, called by `bridge/__init__.py`
before any of them can be imported). A checkout installed for development (`pip install -e`,
scripts/test.sh) is never compiled, so an edit to a `.py` file is never shadowed by a stale
extension beside it.

This module is not compiled itself: it has to run before any compiled module is imported.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

NO_EXTENSIONS = "HOOKBRIDGE_NO_EXTENSIONS"

COMPILED = (
    # The MQTT codec, but not packets.py: mypyc turns a dataclass's ClassVar (the packets'
    # TYPE) into a field (github.com/mypyc/mypyc/issues/1122), so its classes stay interpreted;
    # nor errors.py: a compiled subclass of the interpreted HookbridgeError loses the `reason`
    # its own class body sets (every refusal said "unspecified error"), and errors are rare.
    "bridge.brokers.embedded.codec.bodies",
    "bridge.brokers.embedded.codec.bounds",
    "bridge.brokers.embedded.codec.decoder",
    "bridge.brokers.embedded.codec.encoder",
    "bridge.brokers.embedded.codec.filters",
    "bridge.brokers.embedded.codec.handlers",
    "bridge.brokers.embedded.codec.kinds",
    "bridge.brokers.embedded.codec.properties",
    "bridge.brokers.embedded.codec.reasons",
    "bridge.brokers.embedded.codec.wire",
    "bridge.brokers.embedded.router",
    "bridge.brokers.embedded.topictree",
    # A client's path: its socket side and protocol, what it publishes (client.Inbound), its
    # sessions' queues, the publish path and
    # the event stream with the acknowledgements waiting on it, a session's in-flight window. Not
    # broker.py (its client lock is an async generator, which mypyc does not compile) and
    # listeners.py, whose classes derive from compiled ones (allowed by
    # `mypyc_attr(allow_interpreted_subclasses=True)`).
    "bridge.brokers.embedded.acks",
    "bridge.brokers.embedded.client",
    "bridge.brokers.embedded.channel",
    "bridge.brokers.embedded.connection",
    "bridge.brokers.embedded.flows",
    "bridge.brokers.embedded.inflight",
    "bridge.brokers.embedded.sessions",
    "bridge.brokers.embedded.stream",
    "bridge.brokers.embedded.tcp",
    # A restart's pass over the durable log (every restored queue at once): per log entry. The
    # journal: a durable session's rows on every delivery and acknowledgement, and the trim's
    # walk over every session once a second.
    "bridge.brokers.embedded.durable.preload",
    "bridge.brokers.embedded.durable.journal",
    # The rules' per-event work: matching, dispatching, a rule's job for an event, the runner's
    # lanes and batches.
    "bridge.job",
    "bridge.pipeline.dispatcher",
    "bridge.pipeline.engine",
    "bridge.pipeline.lanes",
    "bridge.pipeline.runner",
    "bridge.msgid",
    # The Redis functions' commands for a job (on_message_publish: every message rules/redis.conf
    # keeps), its keys, a pipeline's commands packed (four a stored message), and the loops
    # from a run's jobs to its commands and from the replies back to the jobs (runs.py). Not
    # actions/redis/packing.py: its connection classes derive from redis-py's, and a compiled
    # class cannot have an interpreted base (its import failed).
    "actions.redis.functions",
    "actions.redis.keys",
    "actions.redis.resp",
    "actions.redis.runs",
)
"""Module names; setup.py compiles `<name with / for .>.py` for each."""


def disabled() -> bool:
    """True when the environment asks for pure Python (any value but empty and 0)."""
    return os.environ.get(NO_EXTENSIONS, "") not in ("", "0")


def is_compiled(module: ModuleType) -> bool:
    """Whether this module was loaded from a C extension rather than its `.py` file."""
    return isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)


class _SourcesFirst:
    """A meta path finder ahead of Python's own: for a module of COMPILED, its `.py` file in the
    package's folder, even where an extension of the same name sits beside it (which Python's
    own finder would take first)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in COMPILED or path is None:
            return None
        for folder in path:
            source = Path(folder) / f"{fullname.rpartition('.')[2]}.py"
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None  # no source beside it: let the normal finders say what they find


def prefer_sources() -> None:
    """With HOOKBRIDGE_NO_EXTENSIONS set, import the `.py` file of every compiled module (once)."""
    if disabled() and not any(isinstance(finder, _SourcesFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourcesFirst())
