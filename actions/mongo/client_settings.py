"""A pool's MongoDB client settings: the backend's, the broker's user and ACL lookups' and
`migrate-emqx44`'s clients are all made from them."""

from __future__ import annotations

import os
import tempfile
from typing import Any


def client_options(pool: Any) -> dict[str, Any]:
    """AsyncMongoClient's settings from a pool's keys (also the broker's user lookups)."""
    options: dict[str, Any] = {
        "host": [f"{host}:{port}" for host, port in pool["server"]],
        "maxPoolSize": max(2, pool["pool_size"]),
        "serverSelectionTimeoutMS": 5000,  # a down server fails a batch in 5 s; the runner retries
        "connectTimeoutMS": 5000,
        "tz_aware": True,
        "appname": "hookbridge",
    }
    login = pool["login"] or pool["username"]
    if login:
        options.update(username=login, password=pool["password"], authSource=pool["auth_source"])
    if pool["replica_set"]:
        options["replicaSet"] = pool["replica_set"]
    elif pool["type"] == "single" and len(pool["server"]) == 1:
        options["directConnection"] = True
    if pool["ssl"]:
        options["tls"] = True
        if pool["ssl.cafile"]:
            options["tlsCAFile"] = pool["ssl.cafile"]
        if pool["ssl.certfile"]:
            options["tlsCertificateKeyFile"] = _certificate_key_file(pool["ssl.certfile"], pool["ssl.keyfile"])
        if not pool["ssl.verify"]:
            options["tlsAllowInvalidCertificates"] = True
            options["tlsAllowInvalidHostnames"] = True
    return options


def _certificate_key_file(certfile: str, keyfile: str) -> str:
    """PyMongo wants certificate and key in one PEM file: join them when they are two."""
    if not keyfile or keyfile == certfile:
        return certfile
    with open(certfile, "rb") as cert, open(keyfile, "rb") as key:
        pem = cert.read().rstrip(b"\n") + b"\n" + key.read()
    handle, path = tempfile.mkstemp(prefix="hookbridge-mongo-", suffix=".pem")  # mode 0600
    with os.fdopen(handle, "wb") as out:
        out.write(pem)
    return path
