"""scripts/mariadb.sh as the docs show it: `scripts/mariadb.sh [PORT] [start|stop]`, idempotent.

A port nobody uses, so the server the other tests share is never touched; what the test starts it
stops, and its data directory under .run/ is removed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator

import asyncmy
import pytest

from support.services import ROOT

# A user, password and database that only the server's own quoting gets right.
NAMES = {
    "HOOKBRIDGE_MYSQL_USER": "o'brien`x",
    "HOOKBRIDGE_MYSQL_PASSWORD": 'it\'s "quoted" \\ `and` $HOME; DROP USER root',
    "HOOKBRIDGE_MYSQL_DATABASE": "my`db'",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **NAMES}
    command = [str(ROOT / "scripts" / "mariadb.sh"), *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, check=False, timeout=120)


def _query(port: int, *statements: str) -> list[tuple[object, ...]]:
    """Log in as the script's user to its database, run the statements; the last one's rows."""

    async def run() -> list[tuple[object, ...]]:
        conn = await asyncmy.connect(
            host="127.0.0.1",
            port=port,
            user=NAMES["HOOKBRIDGE_MYSQL_USER"],
            password=NAMES["HOOKBRIDGE_MYSQL_PASSWORD"],
            db=NAMES["HOOKBRIDGE_MYSQL_DATABASE"],
            autocommit=True,
        )
        try:
            async with conn.cursor() as cursor:
                for statement in statements:
                    await cursor.execute(statement)
                return list(await cursor.fetchall())
        finally:
            conn.close()

    return asyncio.run(run())


@pytest.fixture
def port() -> Iterator[int]:
    port = _free_port()
    yield port
    _script(str(port), "stop")
    shutil.rmtree(ROOT / ".run" / f"mariadb-{port}", ignore_errors=True)


def test_mariadb_starts_reuses_and_stops_on_a_port(port: int) -> None:
    started = _script(str(port))
    assert started.returncode == 0, started.stderr
    _query(port, "CREATE TABLE kept (n int)", "INSERT INTO kept VALUES (7)")
    again = _script(str(port), "start")  # a second start reuses the running server
    assert again.returncode == 0, again.stderr
    assert "already answering" in again.stderr
    assert _script(str(port), "stop").returncode == 0
    with pytest.raises(asyncmy.errors.OperationalError, match=r"Can.t connect"):
        _query(port, "SELECT 1")
    assert _script(str(port), "stop").returncode == 0  # stopping twice is fine
    restarted = _script(str(port))  # the data directory is kept: the table is still there
    assert restarted.returncode == 0, restarted.stderr
    assert _query(port, "SELECT n FROM kept") == [(7,)]
    assert _query(port, "SELECT @@bind_address, @@local_infile") == [("127.0.0.1", 1)]
