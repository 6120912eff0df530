"""The compiled build (docs/development.md#the-compiled-build): the wheel compiles the modules of
bridge/extensions.py with mypyc, the tests of those modules, the broker and the pipeline pass on it
as they do on the checkout's pure Python, and HOOKBRIDGE_NO_EXTENSIONS=1 gives pure Python both
when building and when importing an installed compiled package.

The checkout's own run (scripts/test.sh) is pure Python: an editable install is never compiled.
Here the wheel goes into a fresh virtualenv whose dependencies (the runtime's and pytest's) come
from the checkout's .venv through a `.pth` line, so the second run costs no install; its tests
run from a copy of tests/ outside the checkout, so `bridge` is the installed, compiled one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from bridge.extensions import COMPILED, NO_EXTENSIONS
from support.installed import clean_environment, fresh_virtualenv
from support.services import ROOT

# The tests of the compiled modules (the codec, the router, a client's path, the runner), fast and
# without servers.
COMPILED_MODULE_TESTS = [
    "tests/unit/test_mqtt_codec.py",
    "tests/unit/test_mqtt_codec_fuzz.py",
    "tests/unit/test_mqtt_framing.py",
    "tests/unit/test_decode_bounds.py",
    "tests/unit/test_decoder_limit.py",
    "tests/unit/test_mqtt_user_properties.py",
    "tests/unit/test_subscription_filters.py",
    "tests/unit/test_parser_fuzz.py",
    "tests/unit/test_topic_tree.py",
    "tests/unit/test_topics_msgid_render.py",
    "tests/unit/test_channel.py",
    "tests/unit/test_ack_queue.py",
    "tests/unit/test_event_stream_runs.py",
    "tests/unit/test_inflight_window.py",
    "tests/unit/test_idle_session_memory.py",
    "tests/unit/test_queued_bytes.py",
    "tests/unit/test_durable_lazy_load.py",
    "tests/unit/test_durable_preload.py",
    "tests/unit/test_durable_owed.py",
    "tests/unit/test_durable_head.py",
    "tests/unit/test_durable_rows.py",
    "tests/unit/test_durable_failure_hold.py",
    "tests/unit/test_runner_spool.py",
    "tests/unit/test_tcp_transport.py",
    "tests/unit/test_redis_resp.py",
    "tests/unit/test_redis_packing.py",
    "tests/unit/test_strict_utf8_first.py",
    "tests/unit/test_redis_runs.py",
    "tests/unit/test_redis_store_packed.py",
]
# The broker and the pipeline on top of them: the MQTT rules against the embedded broker (the
# suite's `embedded` and `embedded-durable` runs), acknowledgement once kept in Redis, malformed
# input, the dispatcher and the runner.
BROKER_AND_PIPELINE_TESTS = [
    "tests/broker_suite",
    "tests/integration/test_ack_kept.py",
    "tests/integration/test_redis_pipeline_replies.py",
    "tests/integration/test_embedded_broker.py",
    "tests/integration/test_embedded_malformed.py",
    "tests/integration/test_broker_output_bound.py",
    "tests/unit/test_engine_dispatch.py",
    "tests/unit/test_runner.py",
    "tests/unit/test_runner_spool.py",  # the compiled lanes over the spool
    # Interpreted classes deriving from compiled ones: listeners.CertConnection (a client
    # certificate's name as the user name) from Connection; and the durable sessions, their
    # journal driving the sessions and the publish path.
    "tests/integration/test_embedded_listeners.py",
    "tests/integration/test_durable_sessions.py",
    "tests/integration/test_durable_after_commit.py",  # what waits for a commit, in compiled channel.py
]

# This one counts how often the decoder calls one of its own functions by replacing it with
# monkeypatch; a compiled module calls its functions directly, not through the module's
# attribute, so the count stays 0 there. What it checks (a filter over the level bound is not
# split) is the same code, held by the checkout's pure-Python run.
COUNTS_CALLS_BY_MONKEYPATCH = [
    "tests/unit/test_decode_bounds.py::test_a_filter_over_the_levels_is_kept_unparsed_for_the_broker_to_refuse",
]

# Prints, for each compiled module, whether it was loaded from its extension.
REPORT = (
    "import importlib, sys; from bridge.extensions import COMPILED, is_compiled; "
    "print(' '.join(f'{n}={is_compiled(importlib.import_module(n))}' for n in COMPILED)); "
    "print('shared library loaded:', 'hookbridge__mypyc' in sys.modules)"
)


@pytest.fixture(scope="module")
def compiled_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """python of a fresh virtualenv with the wheel installed and the checkout .venv's packages
    (dependencies, pytest) behind it."""
    bin_dir = fresh_virtualenv(tmp_path_factory.mktemp("compiled") / "venv")
    python = bin_dir / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # A plain path line: the checkout venv's own .pth files (its editable `bridge`) are not read.
    (Path(site) / "zz_checkout_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(bin_dir / "pip"), "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        env=clean_environment(bin_dir),
    )
    return python


@pytest.fixture(scope="module")
def tests_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/ and what the tests read beside them (pytest's settings in pyproject.toml, the service
    scripts, the shipped config, rules and templates) outside the checkout; no bridge/ or actions/."""
    where = tmp_path_factory.mktemp("tests-copy")
    for folder in ("tests", "scripts", "config", "rules", "templates"):
        shutil.copytree(ROOT / folder, where / folder, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    shutil.copy2(ROOT / "pyproject.toml", where)
    return where


def report(python: Path, cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [str(python), "-c", REPORT],
        cwd=cwd,
        env=clean_environment(python.parent, **env),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_wheel_carries_an_extension_for_each_compiled_module(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in COMPILED:
        path = module.replace(".", "/")
        assert any(name.startswith(f"{path}.cpython-") and name.endswith(".so") for name in names), module
        assert f"{path}.py" in names, module  # the pure-Python fallback is installed too


def test_an_installed_wheel_imports_the_extensions(compiled_python: Path, tests_copy: Path) -> None:
    assert report(compiled_python, tests_copy) == (
        " ".join(f"{name}=True" for name in COMPILED) + "\nshared library loaded: True\n"
    )


def test_no_extensions_imports_the_sources_of_an_installed_compiled_package(
    compiled_python: Path, tests_copy: Path
) -> None:
    assert report(compiled_python, tests_copy, **{NO_EXTENSIONS: "1"}) == (
        " ".join(f"{name}=False" for name in COMPILED) + "\nshared library loaded: False\n"
    )


def test_the_codec_broker_and_pipeline_tests_pass_on_the_compiled_build(
    compiled_python: Path, tests_copy: Path
) -> None:
    done = subprocess.run(
        [
            *(str(compiled_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *COMPILED_MODULE_TESTS),
            *BROKER_AND_PIPELINE_TESTS,
            *(f"--deselect={test}" for test in COUNTS_CALLS_BY_MONKEYPATCH),
        ],
        cwd=tests_copy,
        env=clean_environment(compiled_python.parent),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1] and "skipped" not in done.stdout.splitlines()[-1]


def test_no_extensions_builds_a_pure_python_wheel(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".*", "__pycache__", "node_modules", "build", "*.egg-info", "data", "tests"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "out"), str(source)],
        check=True,
        env=clean_environment(**{NO_EXTENSIONS: "1"}),
    )
    (built,) = (tmp_path / "out").glob("hookbridge-*.whl")
    assert built.name.endswith("-py3-none-any.whl")
    assert not [name for name in zipfile.ZipFile(built).namelist() if name.endswith(".so")]
