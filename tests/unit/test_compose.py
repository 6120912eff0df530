"""docker-compose.yml and the bridge image, checked without a Docker engine (none runs here).

What a static check can establish: the file, its variables interpolated as Compose does, is valid
against the Compose Specification's own JSON schema (tests/unit/schemas/compose-spec.json, vendored;
tests/unit/schemas/README.md says from where); every file or folder it mounts or builds from exists;
the bridge's compose config loads with its compose rules (emqx mode refusals included) and names
only compose services; and the image's ENTRYPOINT / CMD is a command line the CLI accepts,
pointing at the mounted files. Whether the images start and talk to each other is not tested here.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from bridge.app import Paths, load_all
from bridge.cli import build_parser
from support.services import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "compose-spec.json").read_text())

# Compose's interpolation: $$ is a literal $; $NAME and ${NAME}; ${NAME:-default} / ${NAME-default}
# (unset or empty / unset), ${NAME:?error} / ${NAME?error}, ${NAME:+replacement} / ${NAME+replacement}.
# A default that itself holds a variable is refused here (invalid) rather than guessed at.
_VARIABLE = re.compile(
    r"\$(?:(?P<dollar>\$)|(?P<plain>[A-Za-z_]\w*)"
    r"|\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?+])(?P<arg>[^{}]*))?\}|(?P<bad>))"
)


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """The document as Compose sees it: variables substituted in every string value (not in keys)."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match["dollar"]:
            return "$"
        if match["plain"]:
            return env.get(match["plain"], "")
        name, op, arg = match["name"], match["op"], match["arg"]
        if name is None:
            raise ValueError(f"invalid (or nested) interpolation in {value!r}")
        is_set = bool(env.get(name)) if op and op.startswith(":") else name in env
        if op is None:
            return env.get(name, "")
        if op.endswith("-"):
            return env[name] if is_set else str(interpolate(arg, env))
        if op.endswith("+"):
            return str(interpolate(arg, env)) if is_set else ""
        if not is_set:
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        return env[name]

    return _VARIABLE.sub(substitute, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """docker-compose.yml as `docker compose up` reads it with no variable set and no .env file."""
    doc = interpolate(yaml.safe_load(COMPOSE.read_text()), {})
    assert isinstance(doc, dict)
    return doc


def schema_errors(doc: dict[str, Any]) -> list[str]:
    validator = Draft202012Validator(SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors]


def test_it_is_valid_against_the_compose_specification_schema(compose: dict[str, Any]) -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert schema_errors(compose) == []


def test_the_schema_check_catches_what_compose_would_refuse(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["servics"] = {}  # a typo at the top
    broken["services"]["redis"]["healthcheck"]["intervall"] = "5s"
    broken["services"]["bridge"]["depends_on"]["emqx"]["condition"] = "service_up"
    del broken["services"]["spark"]["image"]
    broken["services"]["spark"]["imag"] = "bitnami/spark:3.5"
    errors = schema_errors(broken)
    assert [e.split(":")[0] for e in errors] == [
        "(top)",
        "services.bridge.depends_on",  # service_up is no condition Compose knows
        "services.redis.healthcheck",
        "services.spark",
    ]


def test_variables_are_interpolated_as_compose_does() -> None:
    env = {"SET": "v", "EMPTY": ""}
    cases = {
        "${SET}": "v",
        "$SET/x": "v/x",
        "${UNSET}": "",
        "${UNSET:-d}": "d",
        "${EMPTY:-d}": "d",
        "${EMPTY-d}": "",
        "${SET:-d}": "v",
        "${SET:+r}": "r",
        "${EMPTY:+r}": "",
        "${EMPTY+r}": "r",
        "$$SET": "$SET",
        "a$${SET}": "a${SET}",
    }
    assert {text: interpolate(text, env) for text in cases} == cases
    for text in ("${UNSET:?needed}", "${EMPTY:?needed}", "${SET", "$ {SET}", "${UNSET:-${SET}}"):
        with pytest.raises(ValueError, match=r"required|invalid"):
            interpolate(text, env)
    assert interpolate({"${KEY}": ["${SET}", 5]}, env) == {"${KEY}": ["v", 5]}


def _binds(service: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            out.append((source, target))
    return out


def test_services_volumes_and_health_checks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"emqx", "redis", "postgres", "mongo", "cassandra", "bridge", "spark"} <= set(services)
    assert services["spark"]["profiles"] == ["spark"]
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if name != "spark-worker":
            assert "healthcheck" in service, f"{name} has no health check"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith("./"):
                assert source in compose["volumes"], f"{name}: volume {source} is not a declared named volume"
    assert services["emqx"]["image"].startswith("emqx/emqx:5.")
    assert set(services["bridge"]["depends_on"]) == {"emqx", "redis", "postgres", "mongo", "cassandra"}


def host_paths(compose: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, path) for every host file or folder the file mounts, builds from or reads."""
    out: list[tuple[str, str]] = []
    for name, service in compose["services"].items():
        build = service.get("build")
        if build is not None:
            context = build if isinstance(build, str) else build.get("context", ".")
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            out += [(f"{name} builds from", context), (f"{name} builds with", f"{context}/{dockerfile}")]
        for volume in service.get("volumes", []):
            if isinstance(volume, str):
                source = volume.split(":")[0]
                if source.startswith((".", "/", "~")):
                    out.append((f"{name} mounts", source))
            elif volume.get("type") == "bind":
                out.append((f"{name} mounts", volume["source"]))
        env_files = service.get("env_file", [])
        for env_file in [env_files] if isinstance(env_files, str) else env_files:
            if isinstance(env_file, str) or env_file.get("required", True):
                out.append((f"{name} reads", env_file if isinstance(env_file, str) else env_file["path"]))
    for kind in ("configs", "secrets"):
        out += [(f"{kind}.{key}", item["file"]) for key, item in compose.get(kind, {}).items() if "file" in item]
    return out


def missing_host_paths(compose: dict[str, Any]) -> list[str]:
    return [f"{what} {path}, which does not exist" for what, path in host_paths(compose) if not (ROOT / path).exists()]


def test_every_file_it_mounts_or_builds_from_exists(compose: dict[str, Any]) -> None:
    paths = dict((path, what) for what, path in host_paths(compose))
    assert {".", "./Dockerfile", "./deploy/rules", "./config/bridge.docker.conf"} <= set(paths)
    assert missing_host_paths(compose) == []
    broken = copy.deepcopy(compose)
    broken["services"]["bridge"]["volumes"].append({"type": "bind", "source": "./nowhere", "target": "/x"})
    broken["services"]["bridge"]["build"] = {"context": ".", "dockerfile": "Dockerfile.missing"}
    assert missing_host_paths(broken) == [
        "bridge builds with ./Dockerfile.missing, which does not exist",
        "bridge mounts ./nowhere, which does not exist",
    ]


def _mounted(compose: dict[str, Any], service: str, target: str) -> Path:
    return next(ROOT / s for s, t in _binds(compose["services"][service]) if t == target)


def test_the_bridge_config_and_rules_load_and_name_compose_services(compose: dict[str, Any]) -> None:
    config_file = _mounted(compose, "bridge", "/etc/hookbridge/bridge.conf")
    rules_dir = _mounted(compose, "bridge", "/etc/hookbridge/rules")
    assert _mounted(compose, "bridge", "/etc/hookbridge/templates") == ROOT / "templates"
    config, rules = load_all(Paths(config_file, rules_dir))  # emqx mode: refused functions would fail here
    services = set(compose["services"])
    assert config["broker.mode"] == "emqx"
    assert config["broker.server"][0] in services
    assert re.match(r"http://([^:/]+)", config["broker.emqx.api"])[1] in services  # type: ignore[index]
    for pool in config.pools.values():
        hosts = (
            [pool["server"][0]]
            if pool.db in ("redis", "pgsql")
            else [h for h, _ in pool.settings.get("nodes") or pool["server"]]
        )
        for host in hosts:
            assert host in services, f"pool {pool.id} points at {host}, not a compose service"
    assert {rule.pool for rule in rules} == set(config.pools)  # every pool is used by a rule


def test_emqx_is_provisioned_for_what_the_bridge_expects(compose: dict[str, Any]) -> None:
    conf = _mounted(compose, "emqx", "/opt/emqx/etc/emqx.conf").read_text()
    for event in ("client_connected", "client_disconnected", "client_subscribed", "client_unsubscribed"):
        assert re.search(rf"{event} = true", conf), event
    assert 'bootstrap_file = "/opt/emqx/etc/hookbridge_api_key.conf"' in conf
    assert any(t == "/opt/emqx/etc/hookbridge_api_key.conf" for _, t in _binds(compose["services"]["emqx"]))
    for event in ("message_delivered", "message_acked"):
        assert f'FROM \\"$events/{event}\\"' in conf and f'topic = "hookbridge/events/{event}"' in conf
    assert 'payload = "${.}"' in conf
    # the API key EMQX creates is the one the bridge uses by default
    key, secret, _role = (
        _mounted(compose, "emqx", "/opt/emqx/etc/hookbridge_api_key.conf").read_text().strip().split(":")
    )
    env = compose["services"]["bridge"]["environment"]
    assert env["EMQX_API_KEY"] == key and env["EMQX_API_SECRET"] == secret  # with no variables set
    config = (ROOT / "config" / "bridge.docker.conf").read_text()
    assert "broker.clientid = hookbridge-1" in config and "clientid != 'hookbridge-1'" in conf
    assert "broker.emqx.event_topic = hookbridge/events/#" in config


def test_the_image_entrypoint_is_the_cli(compose: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.M)[1])  # type: ignore[index]
    cmd = json.loads(re.search(r"^CMD (.+)$", dockerfile, re.M)[1])  # type: ignore[index]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["hookbridge"] and scripts["hookbridge"] == "bridge.cli:main"
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.M)
    for argv in (cmd, compose["services"]["bridge"]["command"]):
        args = build_parser().parse_args(argv)
        assert args.command == "run" if hasattr(args, "command") else True
        targets = {t for _, t in _binds(compose["services"]["bridge"])}
        assert args.config in targets and args.rules in targets
    for line in re.findall(r"^COPY (\S+)", dockerfile, re.M):
        assert (ROOT / line).exists(), f"Dockerfile copies {line}, which does not exist"
