"""The one client TLS context (bridge/conf/tls.py), as a parsed config sets it, in a real handshake.

PostgreSQL and Cassandra pools and the external broker connection all use `settings_context`;
here it meets a TLS server made from the test CA's certificate, which may require a client
certificate the same CA signed.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from bridge.conf.config import parse_config
from bridge.conf.tls import settings_context
from support.tls import Certificates, make_certificates, make_client_certificate


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Certificates, tuple[Path, Path]]:
    directory = tmp_path_factory.mktemp("pki")
    certificates = make_certificates(directory)
    return certificates, make_client_certificate(directory, certificates, "bridge")


async def handshake(server: ssl.SSLContext, client: ssl.SSLContext | None) -> str:
    """ "ok", or the name of the error the client saw."""
    assert client is not None

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")  # only once the server accepted the handshake
        await writer.drain()
        writer.close()

    served = await asyncio.start_server(greet, "127.0.0.1", 0, ssl=server)
    port = served.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
        try:
            greeting = await reader.read()  # TLS 1.3: a refused client certificate shows only now
        finally:
            writer.close()
        return "ok" if greeting == b"hello" else "refused by the server"
    except ssl.SSLCertVerificationError:
        return "server not trusted"
    except (ssl.SSLError, ConnectionError):
        return "refused by the server"
    finally:
        served.close()
        await served.wait_closed()


def server_context(certificates: Certificates, client_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certificates.ca))
    context.load_cert_chain(certificates.cert, certificates.key)
    context.verify_mode = ssl.CERT_REQUIRED if client_certificate else ssl.CERT_NONE
    return context


@pytest.mark.parametrize(
    ("lines", "client_certificate", "outcome"),
    [
        ("ssl.cafile = {ca}\n", False, "ok"),
        ("", False, "server not trusted"),  # the system's CAs do not know the test CA
        ("ssl.verify = off\n", False, "ok"),
        ("ssl.cafile = {ca}\nssl.certfile = {cert}\nssl.keyfile = {key}\n", True, "ok"),
        ("ssl.cafile = {ca}\n", True, "refused by the server"),
    ],
)
@pytest.mark.parametrize("scope", ["broker.", "backend.pgsql.pool1."])
async def test_a_client_context_from_the_settings(
    pki: tuple[Certificates, tuple[Path, Path]], scope: str, lines: str, client_certificate: bool, outcome: str
) -> None:
    certificates, (cert, key) = pki
    keys = f"{scope}ssl = on\n" + "".join(f"{scope}{line}\n" for line in lines.splitlines())
    config = parse_config("bridge.conf", keys.format(ca=certificates.ca, cert=cert, key=key))
    if scope == "broker.":
        context = settings_context(config.settings, "broker.")
    else:
        context = settings_context(config.pools["pgsql.pool1"].settings)
    assert await handshake(server_context(certificates, client_certificate), context) == outcome


def test_no_context_when_tls_is_off() -> None:
    config = parse_config("bridge.conf", "backend.pgsql.pool1.database = mqtt\n")
    assert settings_context(config.settings, "broker.") is None
    assert settings_context(config.pools["pgsql.pool1"].settings) is None
