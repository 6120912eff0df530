"""docker-compose.yml and the bridge image, checked without a Docker engine (none runs here).

What a static check can establish: the file parses, every bind-mounted file exists, the bridge's
compose config loads with its compose rules (emqx mode refusals included) and names only compose
services, and the image's ENTRYPOINT / CMD is a command line the CLI accepts, pointing at the
mounted files. Whether the images start and talk to each other is not tested here.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.app import Paths, load_all
from bridge.cli import build_parser
from support.services import ROOT

COMPOSE = ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


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


def test_every_bind_mounted_file_exists(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for source, _target in _binds(service):
            assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"


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
    assert (
        env["EMQX_API_KEY"] == f"${{EMQX_API_KEY:-{key}}}"
        and env["EMQX_API_SECRET"] == f"${{EMQX_API_SECRET:-{secret}}}"
    )
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
