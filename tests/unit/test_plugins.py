"""Backends and broker modes are plug-ins (bridge/conf/registry.py): the core names none of them.

A backend from another installed package (a real distribution on sys.path with its entry
point, written here) is configured, documented, checked in the rules and run like the four of
this project; the core never imports `actions/`; backends import only the published interface;
a driver loads only where its backend is used; every error of the bridge has one root.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.app import Bridge, Paths, load_all
from bridge.conf import docs, registry
from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors
from bridge.errors import HookbridgeError
from bridge.events import Hookpoint, MessagePublish
from bridge.plugin import PUBLISHED

ROOT = Path(__file__).resolve().parents[2]

FAKE_PACKAGE = '''
"""A backend of another package: a list in memory (what a plug-in test needs, not a database)."""

from bridge.plugin import BackendPlugin, Setting
from bridge.plugin import parsers as p

PLUGIN = BackendPlugin(
    name="listdb",
    title="ListDB",
    settings={"bucket": Setting(p.string(required=True), "events", "where the events go")},
    default_port=7777,
    backend="listdb_plugin.backend:ListBackend",
)
'''

FAKE_BACKEND = """
from bridge.plugin import Backend, Job

WRITTEN: list[tuple[str, str, str]] = []


class ListBackend(Backend):
    db = "listdb"
    functions = frozenset({"on_event_log"})

    async def connect(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def execute(self, batch):
        for job in batch:
            WRITTEN.append((self.pool["bucket"], job.rule.id, job.event.topic))
        return [None] * len(batch)

    def is_recoverable(self, exc: BaseException) -> bool:
        return False

    async def schema(self, apply: bool) -> str:
        return "a list\\n"
"""


@pytest.fixture
def listdb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed distribution `listdb-plugin` declaring the `listdb` backend by entry point."""
    site = tmp_path / "site"
    package = site / "listdb_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_PACKAGE)
    (package / "backend.py").write_text(FAKE_BACKEND)
    info = site / "listdb_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: listdb-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hookbridge.backends]\nlistdb = listdb_plugin:PLUGIN\n")
    monkeypatch.syspath_prepend(str(site))
    registry.rediscover()
    yield tmp_path
    registry.rediscover()  # the other tests see the project's backends only
    for name in [name for name in sys.modules if name.startswith("listdb_plugin")]:
        del sys.modules[name]


def test_a_backend_of_another_package_is_configured_and_documented_from_its_declaration(listdb: Path) -> None:
    assert list(registry.backends()) == ["cassa", "listdb", "mongo", "mysql", "pgsql", "redis"]
    config = parse_config("bridge.conf", "backend.listdb.pool1.bucket = audit\n")
    pool = config.pools["listdb.pool1"]
    assert (pool["bucket"], pool["server"], pool["batch_size"]) == ("audit", ("127.0.0.1", 7777), 2000)
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", "backend.listdb.pool1.buckett = audit\nbackend.lisdb.pool1.bucket = x\n")
    assert str(caught.value).splitlines() == [
        "bridge.conf:1:1: unknown listdb pool setting 'buckett' (did you mean bucket?)",
        "bridge.conf:2:1: unknown backend 'lisdb' (did you mean listdb?) in backend.lisdb.pool1.bucket",
    ]
    page = docs.render()
    assert "`<db>` is `cassa`, `listdb`, `mongo`, `mysql`, `pgsql` or `redis`." in page
    assert "| `backend.listdb.<pool>.bucket` | `events` |  | text, not empty | where the events go |" in page


def _write(tmp_path: Path, config: str, rules: str) -> Paths:
    (tmp_path / "bridge.conf").write_text(config)
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / "listdb.conf").write_text(rules)
    return Paths(tmp_path / "bridge.conf", tmp_path / "rules")


def test_its_rules_take_only_the_functions_it_implements(listdb: Path) -> None:
    paths = _write(
        listdb,
        "backend.listdb.pool1.bucket = audit\n",
        'backend.listdb.hook.message.publish.1 = {"action": {"function": "on_message_publish"}}\n'
        'backend.listdb.hook.message.publish.2 = {"action": {"sql": "INSERT INTO t VALUES (${topic})"}}\n',
    )
    with pytest.raises(ConfErrors) as caught:
        load_all(paths)
    rules = str(paths.rules / "listdb.conf")
    assert str(caught.value).splitlines() == [
        f"{rules}:1:65: function on_message_publish is not implemented by the listdb backend",
        f"{rules}:2:53: sql actions are not for listdb",
    ]


async def test_its_pool_runs_the_rules_like_any_other(listdb: Path) -> None:
    paths = _write(
        listdb,
        f"broker.listener.tcp = 127.0.0.1:0\nmetrics.listener = off\nspool.dir = {listdb}\n"
        "backend.listdb.pool1.bucket = audit\n",
        'backend.listdb.hook.message.publish.1 = {"topic": "a/#", "action": {"function": "on_event_log"}}\n',
    )
    bridge = Bridge.load(paths)
    await bridge.start()
    try:
        for topic in ("a/1", "b/1", "a/2"):
            event = MessagePublish("m", "c1", None, topic, 1, b"x", False, "n", "127.0.0.1:1", 0.0)
            done = await bridge.dispatcher(event)
            if done is not None:
                await asyncio.wait_for(done, 10)
        await bridge.idle()
    finally:
        await bridge.stop()
    written = importlib.import_module("listdb_plugin.backend").WRITTEN
    assert written == [("audit", "listdb.message.publish.1", "a/1"), ("audit", "listdb.message.publish.1", "a/2")]
    assert bridge.metrics.events[Hookpoint.MESSAGE_PUBLISH] == 3


def _imports(path: Path) -> Iterator[str]:
    """Every module a file imports, at the top or inside a function."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_the_core_imports_neither_backends_nor_the_reports() -> None:
    """The reports reach `hookbridge report` through the `hookbridge.commands` entry point group."""
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "bridge").rglob("*.py"))
        for name in _imports(path)
        if name.split(".")[0] in ("actions", "spark_analytics")
    ]
    assert found == []


def test_a_command_of_another_package_joins_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "hello_plugin").mkdir(parents=True)
    (site / "hello_plugin" / "__init__.py").write_text(
        textwrap.dedent(
            """
            from bridge.conf.registry import CommandPlugin

            def add_arguments(parser):
                parser.add_argument("--name")

            def run(args):
                print(f"hello {args.name}")
                return 7

            COMMAND = CommandPlugin("hello", "greets", add_arguments, run, lambda argv: [a if a.startswith("-") else a.upper() for a in argv])
            """
        )
    )
    info = site / "hello_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hello-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hookbridge.commands]\nhello = hello_plugin:COMMAND\n")
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "hello", "--name", "x"],
        cwd=ROOT,
        env={"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # prepare_argv saw only the command's own arguments (values upper-cased here), then run answered.
    assert (done.returncode, done.stdout) == (7, "hello X\n"), done.stderr
    assert "report" in registry.commands()  # the project's own, by its entry point


def test_backends_import_only_the_published_interface() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "actions").rglob("*.py"))
        for name in _imports(path)
        if (name == "bridge" or name.startswith("bridge.")) and name not in PUBLISHED
    ]
    assert found == []


def test_the_root_of_bridge_holds_what_a_plug_in_may_import() -> None:
    """bridge/ is grouped by kind (conf/, pipeline/, brokers/, ops/, ...); at its root stand the
    published modules, the rule model and the job bridge.plugin re-exports, and the program's entry."""
    # bridge.extensions: run by bridge/__init__.py first (which modules are compiled, HOOKBRIDGE_NO_EXTENSIONS)
    entry = {"bridge", "bridge.__main__", "bridge.cli", "bridge.app", "bridge.errors", "bridge.extensions"}
    reexported = {"bridge.rules", "bridge.render", "bridge.functions", "bridge.job"}
    root = {"bridge" if path.stem == "__init__" else f"bridge.{path.stem}" for path in (ROOT / "bridge").glob("*.py")}
    assert root - PUBLISHED - entry - reexported == set()


def test_a_backend_loads_neither_the_broker_nor_its_codec() -> None:
    """The plug-in face is neutral: a backend names the users' and ACL records (bridge/accounts.py)
    without loading the embedded broker or the MQTT codec."""
    script = (
        "import json, sys, actions.redis; "  # the broker, its codec (codec/) with it
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('bridge.brokers.embedded'))))"
    )
    shown = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout) == []


def test_a_driver_loads_only_where_its_backend_is_used(tmp_path: Path) -> None:
    """`run` with Redis rules only, in embedded mode: no other driver, no external broker client
    (aiohttp is loaded: it is the HTTP server of /metrics and the API, docs/operations.md#management-api-apiv1)."""
    paths = _write(
        tmp_path,
        f"broker.listener.tcp = 127.0.0.1:0\nmetrics.listener = off\nspool.dir = {tmp_path}\n"
        "backend.redis.pool1.server = 127.0.0.1:6391\n",
        'backend.redis.hook.message.publish.1 = {"action": {"function": "on_message_publish"}}\n',
    )
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from bridge.app import Bridge, Paths
        Bridge.load(Paths(Path({str(paths.config)!r}), Path({str(paths.rules)!r})))
        print(json.dumps(sorted(m for m in ("redis", "asyncpg", "pymongo", "cassandra", "gmqtt", "aiohttp")
                                if m in sys.modules)))
    """)
    shown = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout) == ["aiohttp", "redis"]


def _error_classes() -> list[type[BaseException]]:
    found = []
    for folder in ("bridge", "actions"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "__main__.py":
                continue
            module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
            found += [
                value
                for value in vars(module).values()
                if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__
            ]
    return found


def test_every_error_of_the_bridge_has_one_root() -> None:
    classes = _error_classes()
    assert len(classes) >= 15
    assert [cls.__qualname__ for cls in classes if not issubclass(cls, HookbridgeError)] == []
