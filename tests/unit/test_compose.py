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
import csv
import io
import json
import os
import re
import socket
import ssl
import subprocess
import threading
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
    broken["services"]["spark"]["imag"] = "apache/spark:3.5.8"
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
        if name not in ("spark-worker", "setup"):  # setup runs once and exits
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


def test_the_bridge_config_and_rules_load_and_name_compose_services(
    compose: dict[str, Any], secrets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in compose["services"]["bridge"]["environment"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOOKBRIDGE_SECRETS", str(secrets))  # the CA file must load, as `run` loads it
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
    # From the build context; `COPY --from=<stage>` copies from an earlier stage of the build.
    for line in re.findall(r"^COPY (?!--from=)(\S+)", dockerfile, re.M):
        assert (ROOT / line).exists(), f"Dockerfile copies {line}, which does not exist"


# --- where the images come from ---

# Every image the compose file names (and the Dockerfile's base) comes from one of these maintained
# repositories, each with the reason it is one. A repository that stops being maintained leaves
# this list; docs/brokers.md ("docker compose") says how each tag was chosen.
MAINTAINED_REPOSITORIES = {
    "emqx/emqx": "EMQX's own image, published by EMQ with every EMQX release",
    "redis": "a Docker Official Image, maintained with the Redis project",
    "postgres": "a Docker Official Image, maintained by the PostgreSQL Docker community",
    "mongo": "a Docker Official Image, rebuilt for every MongoDB release",
    "cassandra": "a Docker Official Image, rebuilt for every Cassandra release",
    "apache/spark": (
        "the Apache Spark project's own image (built from github apache/spark-docker for every release); "
        "it replaces bitnami/spark, whose versioned tags Bitnami removed from Docker Hub in 2025"
    ),
    "python": "a Docker Official Image: the Dockerfile's base",
    "hookbridge": "this project's own image, built from the Dockerfile (`build: .`), never pulled",
}


def _repository_and_tag(image: str) -> tuple[str, str]:
    repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    return repository.removeprefix("docker.io/").removeprefix("library/"), tag


def test_every_image_comes_from_a_maintained_repository_at_a_pinned_tag(compose: dict[str, Any]) -> None:
    assert "bitnami" not in COMPOSE.read_text().lower()
    base = re.findall(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    images = {name: service["image"] for name, service in compose["services"].items() if "image" in service}
    for name, image in [*images.items(), *(("Dockerfile", image) for image in base)]:
        repository, tag = _repository_and_tag(image)
        assert repository in MAINTAINED_REPOSITORIES, f"{name}: {image} is not from a repository on the list"
        if repository == "hookbridge":
            assert "build" in compose["services"][name], f"{name}: hookbridge:latest must be built here, not pulled"
            continue
        assert re.match(r"\d+(\.\d+)*", tag), f"{name}: {image} is not pinned to a version"


def test_the_spark_image_is_the_line_pyspark_is_pinned_to(compose: dict[str, Any]) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pin = re.search(r"pyspark>=(\d+\.\d+)", " ".join(pyproject["project"]["optional-dependencies"]["spark"]))
    assert pin is not None
    for name in ("spark", "spark-worker"):
        repository, tag = _repository_and_tag(compose["services"][name]["image"])
        assert repository == "apache/spark" and tag.startswith(f"{pin[1]}."), f"{name}: Spark {tag}, PySpark {pin[1]}"


def test_spark_master_and_worker_start_as_the_apache_image_documents(compose: dict[str, Any]) -> None:
    """apache/spark's entrypoint runs the command it is given; a standalone master and worker are
    Spark's own classes through /opt/spark/bin/spark-class, the worker pointed at the master."""
    services = compose["services"]
    master, worker = services["spark"]["command"], services["spark-worker"]["command"]
    assert master[:2] == ["/opt/spark/bin/spark-class", "org.apache.spark.deploy.master.Master"]
    assert worker[:2] == ["/opt/spark/bin/spark-class", "org.apache.spark.deploy.worker.Worker"]
    port = master[master.index("--port") + 1]
    assert worker[2] == f"spark://spark:{port}" and f"127.0.0.1:{port}:{port}" in services["spark"]["ports"]
    assert "spark" in services["spark-worker"]["depends_on"]
    assert "environment" not in services["spark"], "SPARK_MODE and the like were bitnami's; apache/spark reads none"


# --- authentication and TLS: what deploy/setup.sh makes, and who uses it ---

SETUP = ROOT / "deploy" / "setup.sh"


def run_setup(compose: dict[str, Any], out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """deploy/setup.sh as the compose `setup` service runs it, with its default environment."""
    service = compose["services"]["setup"]
    entrypoint = service["entrypoint"]
    assert entrypoint[:2] == ["sh", "/deploy/setup.sh"] and ("./deploy/setup.sh", "/deploy/setup.sh") in _binds(service)
    mounts = {target: source for source, target in (v.split(":")[:2] for v in service["volumes"])}
    args = [str(out / mounts[path].lstrip("./")) for path in entrypoint[2:]]
    environment = {"PATH": os.environ["PATH"], **service["environment"], **env}
    return subprocess.run(["sh", str(SETUP), *args], env=environment, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def setup_output(compose: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compose-volumes")
    done = run_setup(compose, out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def secrets(setup_output: Path) -> Path:
    return setup_output / "secrets"


def test_setup_makes_the_ca_the_server_certificate_and_the_users(compose: dict[str, Any], setup_output: Path) -> None:
    secrets = setup_output / "secrets"
    assert sorted(p.name for p in (secrets / "tls").iterdir()) == ["ca.pem", "server.key", "server.pem", "server.san"]
    assert (setup_output / "ca" / "ca.key").exists() and not list(secrets.rglob("ca.key"))  # the CA key stays out
    assert oct((secrets / "tls" / "server.key").stat().st_mode & 0o777) == "0o600"
    env = compose["services"]["setup"]["environment"]
    users = list(csv.DictReader(io.StringIO((secrets / "emqx-users.csv").read_text())))
    assert users == [
        {"user_id": "hookbridge", "password": env["HOOKBRIDGE_MQTT_PASSWORD"], "is_superuser": "false"},
        {"user_id": "device1", "password": env["MQTT_DEVICE_PASSWORD"], "is_superuser": "false"},
    ]
    # the bridge logs in with the password setup gave EMQX, as the user EMQX's ACL lets read events
    bridge_env = compose["services"]["bridge"]["environment"]
    assert bridge_env["HOOKBRIDGE_MQTT_PASSWORD"] == env["HOOKBRIDGE_MQTT_PASSWORD"]
    assert '{allow, {username, "hookbridge"}, subscribe' in (ROOT / "deploy" / "emqx" / "acl.conf").read_text()
    # run again (every `docker compose up`): the CA and the certificate are kept
    before = {p.name: p.read_bytes() for p in (secrets / "tls").iterdir()}
    assert run_setup(compose, setup_output).returncode == 0
    assert before == {p.name: p.read_bytes() for p in (secrets / "tls").iterdir()}


def test_setup_refuses_what_would_break_the_users_file(compose: dict[str, Any], tmp_path: Path) -> None:
    done = run_setup(compose, tmp_path, MQTT_DEVICE_PASSWORD="a,b")
    assert done.returncode == 2 and "comma" in done.stderr and "a,b" not in done.stderr
    assert not (tmp_path / "secrets" / "emqx-users.csv").exists()


def _handshake(secrets: Path, server_name: str) -> str:
    """A real TLS handshake: a server on loopback with setup's certificate, a client trusting only
    setup's CA and asking for `server_name` (the name the bridge dials: emqx)."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(secrets / "tls" / "server.pem", secrets / "tls" / "server.key")
    client_ctx = ssl.create_default_context(cafile=str(secrets / "tls" / "ca.pem"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client_ctx.wrap_socket(raw, server_hostname=server_name) as tls,
            ):
                return tls.recv(2).decode()
        finally:
            thread.join(10)


def test_the_server_certificate_verifies_as_emqx_against_the_ca(compose: dict[str, Any], secrets: Path) -> None:
    config = (ROOT / "config" / "bridge.docker.conf").read_text()
    dialled = re.search(r"^broker\.server = ([^:]+):(\d+)$", config, re.M)
    assert dialled and dialled[1] == "emqx" and re.search(r"^broker\.ssl = on$", config, re.M)
    assert _handshake(secrets, "emqx") == "ok"
    assert _handshake(secrets, "localhost") == "ok"
    with pytest.raises(ssl.SSLCertVerificationError, match=r"match|mismatch"):
        _handshake(secrets, "not-emqx")


def test_emqx_listens_with_tls_and_a_password_only(compose: dict[str, Any]) -> None:
    conf = _mounted(compose, "emqx", "/opt/emqx/etc/emqx.conf").read_text()
    config = (ROOT / "config" / "bridge.docker.conf").read_text()
    port = re.search(r"^broker\.server = [^:]+:(\d+)$", config, re.M)[1]  # type: ignore[index]
    assert re.search(rf'listeners\.ssl\.default \{{\s*bind = "0\.0\.0\.0:{port}"', conf)
    assert re.search(r'listeners\.wss\.default \{\s*bind = "0\.0\.0\.0:8084"', conf)
    assert 'listeners.tcp.default.bind = "127.0.0.1:1883"' in conf and "listeners.ws.default.enable = false" in conf
    for name in ("ca.pem", "server.pem", "server.key"):  # what setup makes, where EMQX reads it
        assert conf.count(f'"/opt/emqx/etc/secrets/tls/{name}"') == 2
    assert ("secrets", "/opt/emqx/etc/secrets") in [
        tuple(v.split(":")[:2]) for v in compose["services"]["emqx"]["volumes"]
    ]
    assert re.search(r"authentication = \[\s*\{\s*mechanism = password_based\s*backend = built_in_database", conf)
    assert 'bootstrap_file = "/opt/emqx/etc/secrets/emqx-users.csv"' in conf and "bootstrap_type = plain" in conf
    setup = compose["services"]["emqx"]["depends_on"]["setup"]
    assert setup == {"condition": "service_completed_successfully"}


def test_only_the_brokers_tls_ports_face_the_network(compose: dict[str, Any]) -> None:
    published = {name: [str(p) for p in service.get("ports", [])] for name, service in compose["services"].items()}
    for name, ports in published.items():
        for port in ports:
            if name == "emqx" and port in ("8883:8883", "8084:8084"):
                continue
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond this machine"
    services = compose["services"]
    assert "--requirepass" in services["redis"]["command"]
    assert (
        services["mongo"]["environment"]["MONGO_INITDB_ROOT_PASSWORD"]
        == services["bridge"]["environment"]["MONGO_PASSWORD"]
    )
    redis_password = services["redis"]["command"][services["redis"]["command"].index("--requirepass") + 1]
    assert redis_password == services["bridge"]["environment"]["REDIS_PASSWORD"] != ""
