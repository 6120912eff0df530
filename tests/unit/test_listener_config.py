"""The embedded broker's listeners in the config: TLS files loaded by `check` as `run` loads them,
`broker.allow_anonymous` and its loopback default, and the start-up refusal of a listener that
faces a network with nothing to authenticate its clients (docs/security.md#1-anonymous-access-and-the-start-up-check). Messages are pinned."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bridge.cli import EXIT_CONFIG, main
from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors
from support.tls import Certificates, make_certificates

P = "config/bridge.conf"
OPEN = (
    "can be reached from the network and nothing authenticates its clients: set broker.auth.password_file or "
    "broker.auth.backend{cert}, or broker.allow_anonymous = on to let anyone in (docs/security.md)"
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("pki"))


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfErrors) as caught:
        parse_config(P, text)
    return [str(e) for e in caught.value.errors]


def tls(name: str, certs: Certificates, address: str = "127.0.0.1:8883") -> str:
    key = f"broker.listener.{name}"
    return f"{key} = {address}\n{key}.certfile = {certs.cert}\n{key}.keyfile = {certs.key}\n"


def test_anonymous_by_default_only_on_loopback() -> None:
    assert parse_config(P, "")["broker.allow_anonymous"] is True
    text = "broker.listener.tcp = [::1]:1883\nbroker.listener.ws = localhost:8083\n"
    assert parse_config(P, text)["broker.allow_anonymous"] is True
    config = parse_config(P, "broker.listener.ws = 0.0.0.0:8083\nbroker.allow_anonymous = on\n")
    assert config["broker.allow_anonymous"] is True


def test_a_listener_on_the_network_with_nothing_to_authenticate_stops_the_start(certs: Certificates) -> None:
    text = (
        "broker.listener.tcp = 0.0.0.0:1883\n" + tls("ssl", certs, "[::]:8883") + "broker.listener.ws = 10.1.2.3:8083\n"
    )
    assert errors_of(text) == [
        f"{P}:1:23: broker.listener.tcp = 0.0.0.0:1883 " + OPEN.format(cert=""),
        f"{P}:2:23: broker.listener.ssl = [::]:8883 "
        + OPEN.format(cert=", or broker.listener.ssl.peer_cert_as_username = cn"),
        f"{P}:5:22: broker.listener.ws = 10.1.2.3:8083 " + OPEN.format(cert=""),
    ]
    # a host name may resolve to anything: it counts as the network
    assert errors_of("broker.listener.ws = mqtt.example.com:8083\n") == [
        f"{P}:1:22: broker.listener.ws = mqtt.example.com:8083 " + OPEN.format(cert="")
    ]


def test_client_certificates_authenticate_their_listener_only(certs: Certificates) -> None:
    secured = (
        tls("ssl", certs, "0.0.0.0:8883")
        + f"broker.listener.ssl.cafile = {certs.ca}\nbroker.listener.ssl.verify_peer = on\n"
        + "broker.listener.ssl.peer_cert_as_username = cn\n"
    )
    config = parse_config(P, secured)
    assert config["broker.allow_anonymous"] is False  # the default, as a listener faces the network
    assert errors_of(secured + "broker.listener.ws = 0.0.0.0:8083\n") == [
        f"{P}:7:22: broker.listener.ws = 0.0.0.0:8083 " + OPEN.format(cert="")
    ]


def test_anonymous_off_with_nothing_to_authenticate_refuses_everyone() -> None:
    assert errors_of("broker.allow_anonymous = off\n") == [
        f"{P}:1:26: broker.allow_anonymous = off and nothing authenticates clients, so every CONNECT would be "
        "refused: set broker.auth.password_file or broker.auth.backend (docs/security.md)"
    ]


def test_tls_listener_files_are_loaded_by_check(certs: Certificates, tmp_path: Path) -> None:
    assert errors_of("broker.listener.ssl = 127.0.0.1:8883\n") == [
        f"{P}:1:23: broker.listener.ssl needs broker.listener.ssl.certfile (and broker.listener.ssl.keyfile): "
        "the server's certificate"
    ]
    assert errors_of(tls("wss", certs) + "broker.listener.wss.peer_cert_as_username = cn\n") == [
        f"{P}:4:45: broker.listener.wss.peer_cert_as_username = cn needs broker.listener.wss.verify_peer = on "
        "(a certificate nobody verified proves no name)"
    ]
    missing = tmp_path / "missing.pem"
    assert errors_of(tls("ssl", certs) + f"broker.listener.ssl.cafile = {missing}\n") == [
        f"{P}:4:30: broker.listener.ssl.cafile: cannot load {missing}: No such file or directory"
    ]
    (wrong_key,) = errors_of(tls("ssl", certs).replace(str(certs.key), str(certs.ca)))  # a certificate as key
    assert wrong_key.startswith(
        f"{P}:2:32: broker.listener.ssl.certfile: cannot load {certs.cert} and {certs.ca}: not a PEM file this needs ("
    )
    config = parse_config(P, tls("ssl", certs) + tls("wss", certs, "127.0.0.1:8884"))
    assert (config["broker.listener.ssl"], config["broker.listener.wss"]) == (("127.0.0.1", 8883), ("127.0.0.1", 8884))


def test_check_and_run_refuse_an_open_listener(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "bridge.conf"
    conf.write_text("# an exposed broker\nbroker.listener.tcp = 0.0.0.0:1883\n")
    rules = tmp_path / "rules"
    rules.mkdir()
    for command in ("check", "run"):
        assert main([command, "-c", str(conf), "-r", str(rules)]) == EXIT_CONFIG
        err = capsys.readouterr().err
        assert f"{conf}:2:23: broker.listener.tcp = 0.0.0.0:1883 {OPEN.format(cert='')}" in err, err


def test_shipped_secure_example_passes_check(
    certs: Certificates, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """config/secure.conf as its header says to use it: TLS files in $HOOKBRIDGE_TLS_DIR, the
    Redis rules beside it."""
    root = Path(__file__).resolve().parents[2]
    rules = tmp_path / "myrules"
    rules.mkdir()
    shutil.copy(root / "rules" / "redis.conf", rules)
    monkeypatch.setenv("HOOKBRIDGE_TLS_DIR", str(certs.ca.parent))
    code = main(["check", "-c", str(root / "config" / "secure.conf"), "-r", str(rules)])
    assert code == 0, capsys.readouterr().err
    config = parse_config("secure.conf", (root / "config" / "secure.conf").read_text())
    assert config["broker.allow_anonymous"] is False
    assert {name: config[f"broker.listener.{name}"] for name in ("ssl", "ws", "wss")} == {
        "ssl": ("0.0.0.0", 8883),
        "ws": None,
        "wss": ("0.0.0.0", 8084),
    }
