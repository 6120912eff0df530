"""Servers the tests use, started through the project's own scripts (idempotent)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _stop(script: str, port: int) -> None:
    """Stop the server a script started on `port`, and make sure it is down: a script stops only a
    server of this checkout's (another checkout's, or one of your own, is left alone), and a test
    that takes a server down must not go on believing it did."""
    subprocess.run(["bash", str(ROOT / "scripts" / script), str(port), "stop"], check=True)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return
    raise RuntimeError(
        f"the server on 127.0.0.1:{port} is still up after `scripts/{script} {port} stop`: it was not "
        "started by this checkout (another checkout's, or your own); this test must stop it: stop it "
        "and run again"
    )


def start_redis(port: int, *options: str) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "redis.sh"), str(port), *options], check=True)


def stop_redis(port: int) -> None:
    subprocess.run(["redis-cli", "-p", str(port), "shutdown"], check=False, capture_output=True)


def start_postgres(port: int) -> None:
    """A PostgreSQL on 127.0.0.1:port with role/password hookbridge and database mqtt (reused if up)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), str(port)], check=True)


def stop_postgres(port: int) -> None:
    """Stop the PostgreSQL that scripts/postgres.sh started on port (fast shutdown; no-op if down)."""
    _stop("postgres.sh", port)


def postgres_dsn(port: int, database: str = "mqtt") -> str:
    return f"postgresql://hookbridge:hookbridge@127.0.0.1:{port}/{database}"


def start_ferretdb(port: int) -> None:
    """A MongoDB-protocol server (FerretDB over SQLite) on 127.0.0.1:port (reused if up)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "ferretdb.sh"), str(port)], check=True)


def stop_ferretdb(port: int) -> None:
    _stop("ferretdb.sh", port)


def start_cassandra(port: int) -> None:
    """A Cassandra node answering CQL on 127.0.0.1:port with login hookbridge/hookbridge (reused if up)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "cassandra.sh"), str(port)], check=True)


def stop_cassandra(port: int) -> None:
    """Stop the node scripts/cassandra.sh started on port (it drains first; no-op if down)."""
    _stop("cassandra.sh", port)


def start_mosquitto(port: int) -> None:
    """A Mosquitto on 127.0.0.1:port configured for the mqtt mode (log on topics; reused if up)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "mosquitto.sh"), str(port)], check=True)


def stop_mosquitto(port: int) -> None:
    _stop("mosquitto.sh", port)


def start_mariadb(port: int) -> None:
    """A MariaDB on 127.0.0.1:port with user/password hookbridge and database mqtt (reused if up)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "mariadb.sh"), str(port)], check=True)


def stop_mariadb(port: int) -> None:
    """Stop the MariaDB that scripts/mariadb.sh started on port (no-op if down)."""
    _stop("mariadb.sh", port)
