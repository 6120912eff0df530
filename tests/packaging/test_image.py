"""The bridge image, built without an engine: the Dockerfile replayed (tests/support/dockerfile.py)
into a fresh folder and virtualenv, then its ENTRYPOINT + CMD run with what docker-compose.yml
mounts, against the tests' real servers, and the README's walkthrough done through it.

What the replay cannot do here, and how this stands in for it: EMQX (the compose stack's broker)
does not run on this machine, and the compose Cassandra has no login while the tests' node has
one. So the compose config and rules, their addresses rewritten to this machine's loopback servers,
are checked by the image's own `hookbridge check` (every backend's plug-in imported and every rule
loaded in the image); and the image's unchanged ENTRYPOINT + CMD runs with the shipped
config/bridge.conf and rules/ mounted where compose mounts its own (the embedded broker and Redis,
the README's walkthrough). Image paths map into the replay's folder (Image.path).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
import yaml

from bridge.extensions import NO_EXTENSIONS
from support.dockerfile import Image, replay
from support.installed import RunningBridge, bridge_environment, clean_environment, readme_walkthrough
from support.services import ROOT

DOCKERFILE = ROOT / "Dockerfile"
# The compose services' names, as the compose config writes its servers, and the tests' servers.
LOOPBACK = {
    "redis:6379": "127.0.0.1:6391",
    "postgres:5432": "127.0.0.1:5439",
    "mongo:27017": "127.0.0.1:27018",
    "cassandra:9042": "127.0.0.1:9042",
    "emqx:8883": "127.0.0.1:8883",
    "http://emqx:18083": "http://127.0.0.1:18083",
    "0.0.0.0:9100": "127.0.0.1:9100",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    return replay(DOCKERFILE, ROOT, tmp_path_factory.mktemp("image"))


def mount(image: Image, service: dict[str, Any], replace: dict[str, Path] | None = None) -> None:
    """The service's volumes into the image's folder: bind mounts copied (a file or a folder, or
    what `replace` gives for that source), named volumes as empty folders (or kept if there)."""
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        where = image.path(target)
        if not source.startswith("./"):
            where.mkdir(parents=True, exist_ok=True)
            continue
        found = (replace or {}).get(source, ROOT / source)
        where.parent.mkdir(parents=True, exist_ok=True)
        if found.is_dir():
            subprocess.run(["rm", "-rf", str(where)], check=True)
            subprocess.run(["cp", "-r", str(found), str(where)], check=True)
        else:
            where.write_bytes(found.read_bytes())


def image_problems(image: Image, tmp_path: Path) -> list[str]:
    """What a user of the image would hit, beyond `run`: every command listed and answering."""
    problems: list[str] = []
    env = clean_environment(image.bin_dir)
    program = image.argv()[0]
    listed = subprocess.run([program, "--help"], env=env, capture_output=True, text=True)
    if listed.returncode != 0:
        problems.append(f"hookbridge --help: exit {listed.returncode}: {listed.stderr[-500:]}")
    # PySpark is the optional extra, not in the image: `report` must say how to add it, no more.
    report = subprocess.run(
        [program, "report", "traffic", "--source", "pgsql.pool1", "--from", "-1h", "--out", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    if report.returncode != 2 or "pip install 'hookbridge[spark]'" not in report.stderr:
        problems.append(f"hookbridge report: exit {report.returncode}: {report.stderr.strip()[-500:]}")
    init = subprocess.run([program, "init", str(tmp_path / "home")], env=env, capture_output=True, text=True)
    if init.returncode != 0 or not (tmp_path / "home" / "config" / "bridge.conf").exists():
        problems.append(f"hookbridge init: exit {init.returncode}: {init.stderr[-500:]}")
    return problems


def test_the_image_runs_as_its_own_user_in_the_spool_volume(image: Image, compose: dict[str, Any]) -> None:
    assert image.user not in ("root", "0", "0:0") and image.user in image.users
    home = image.users[image.user]
    assert image.workdir == home  # the working folder is the user's own
    volumes = dict(volume.split(":")[:2] for volume in compose["services"]["bridge"]["volumes"])
    assert volumes.get("bridge-spool") == home  # a new volume takes the folder's owner: the user's
    spool = re.search(r"^spool\.dir = (\S+)$", (ROOT / "config" / "bridge.docker.conf").read_text(), re.M)
    assert spool is not None and spool[1].startswith(home + "/")


def test_the_image_runs_the_compiled_build(image: Image) -> None:
    """The build stage compiled the per-message path (docs/development.md#the-compiled-build)."""
    report = "import importlib; from bridge.extensions import COMPILED, is_compiled; " + (
        "print(sorted(n for n in COMPILED if not is_compiled(importlib.import_module(n))))"
    )
    done = subprocess.run(
        [str(image.bin_dir / "python"), "-c", report],
        cwd=image.path(image.workdir),
        env=clean_environment(image.bin_dir),
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_every_command_of_the_image_answers(image: Image, tmp_path: Path) -> None:
    assert image_problems(image, tmp_path) == []


def test_the_compose_config_and_rules_check_in_the_image(image: Image, compose: dict[str, Any], tmp_path: Path) -> None:
    service = compose["services"]["bridge"]
    mount(image, service)
    # The secrets volume, filled as the compose `setup` service fills it (deploy/setup.sh).
    setup = compose["services"]["setup"]
    setup_env = {k: re.sub(r"\$\{\w+:-(.*)\}", r"\1", v) for k, v in setup["environment"].items()}
    subprocess.run(
        ["sh", str(ROOT / "deploy" / "setup.sh"), str(tmp_path / "ca"), str(image.path("/etc/hookbridge/secrets"))],
        env=clean_environment(**setup_env),
        check=True,
        capture_output=True,
    )
    config = image.path("/etc/hookbridge/bridge.conf")
    text = config.read_text()
    for compose_address, loopback in LOOPBACK.items():
        assert compose_address in text, compose_address
        text = text.replace(compose_address, loopback)
    for folder in ("/etc/hookbridge", image.workdir):  # the image's paths, in the replay's folder
        text = text.replace(folder, str(image.path(folder)))
    config.write_text(text)
    argv = image.argv()
    assert argv[1] == "run"
    environment = {k: re.sub(r"\$\{\w+:-(.*)\}", r"\1", v) for k, v in service["environment"].items()}
    checked = subprocess.run(
        [argv[0], "check", *argv[2:]],
        cwd=image.path(image.workdir),
        env=clean_environment(image.bin_dir, **environment),
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip().endswith("pools cassa.pool1, mongo.pool1, pgsql.pool1, redis.pool1")


def test_the_image_command_runs_the_bridge_and_the_readme_walkthrough(
    image: Image, compose: dict[str, Any], tmp_path: Path, redis_db: redis_sync.Redis, redis_port: int
) -> None:
    service = compose["services"]["bridge"]
    shipped = {"./config/bridge.docker.conf": ROOT / "config" / "bridge.conf", "./deploy/rules": ROOT / "rules"}
    mount(image, service, replace=shipped)
    env = bridge_environment(image.bin_dir, redis_port)
    bridge = RunningBridge(image.argv(), image.path(image.workdir), env, tmp_path / "bridge.log")
    try:
        readme_walkthrough(bridge.mqtt_port, redis_db)
    finally:
        code = bridge.stop()
    assert code == 0, (tmp_path / "bridge.log").read_text()[-3000:]
    assert (image.path(image.workdir) / "data" / "spool").is_dir()  # the spool, in the volume


def test_a_dockerfile_without_spark_analytics_fails_the_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image as it once was: `pip install .` without spark_analytics/ left `report`'s entry point
    unimportable. The replay of such a Dockerfile must not pass."""
    monkeypatch.setenv(NO_EXTENSIONS, "1")  # a pure-Python wheel: what is missing does not depend on compiling
    text = DOCKERFILE.read_text()
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace("COPY spark_analytics ./spark_analytics\n", ""))
    assert broken.read_text() != text
    problems = image_problems(replay(broken, ROOT, tmp_path / "broken"), tmp_path)
    assert len(problems) == 1 and problems[0].startswith("hookbridge report: exit 2: hookbridge report: ")
    assert "No module named 'spark_analytics'" in problems[0]
