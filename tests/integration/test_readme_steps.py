"""README.md's "PostgreSQL too", "MongoDB too" and "Cassandra too" steps, as a newcomer follows them.

The bridge runs as `scripts/quickstart.sh` runs it: the shipped config/bridge.conf and rules/, no
password variables in its environment. Then, as the README says, the pool lines of a rules file's
header go into config/bridge.conf, a rule is uncommented, the bridge reloads, a client publishes,
and the README's own command reads the database. Only the ports differ: the tests' servers.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.app import Bridge, Paths
from conformance.cassa_store import CassaStore
from support.bridges import mqtt_port
from support.mqtt import Client
from support.services import ROOT, start_cassandra, start_ferretdb, start_postgres

PG_PORT = 5439
MONGO_PORT = 27018
CASSA_PORT = 9042  # the README's own port: the tests' node runs there


def readme_commands(paragraph: str) -> list[str]:
    """The `$ ` lines of the first console block after the README paragraph starting with `**paragraph**`."""
    after = (ROOT / "README.md").read_text().split(f"**{paragraph}**", 1)[1]
    block = after.split("```console\n", 1)[1].split("```", 1)[0]
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def header_pool(rules_file: str) -> str:
    """The pool lines the header of rules/<rules_file> tells the user to add to config/bridge.conf."""
    lines = (ROOT / "rules" / rules_file).read_text().splitlines()
    return "".join(line.removeprefix("##   ") + "\n" for line in lines if line.startswith("##   backend."))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_port: int) -> Path:
    """A copy of the checkout's config/, rules/ and templates/, with quickstart's environment."""
    for folder in ("config", "rules", "templates"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)  # spool.dir = data/spool is relative
    monkeypatch.setenv("HOOKBRIDGE_MQTT_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("HOOKBRIDGE_METRICS_LISTEN", "off")
    monkeypatch.setenv("REDIS_SERVER", f"127.0.0.1:{redis_port}")
    for name in ("PGPASSWORD", "MONGO_USER", "MONGO_PASSWORD", "CASSANDRA_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
async def quickstart(home: Path) -> AsyncIterator[Bridge]:
    bridge = Bridge.load(Paths(home / "config" / "bridge.conf", home / "rules"))
    await bridge.start()
    yield bridge
    await bridge.stop(drain_timeout=5)


async def follow_the_step(bridge: Bridge, home: Path, pool: str, rules_file: str, rule: str) -> None:
    """Add the header's pool to config/bridge.conf, uncomment `rule` in rules/<rules_file>, reload."""
    with (home / "config" / "bridge.conf").open("a") as config:
        config.write(pool)
    rules = home / "rules" / rules_file
    text = rules.read_text()
    assert f"\n# {rule} " in text
    rules.write_text(text.replace(f"\n# {rule} ", f"\n{rule} "))
    assert await bridge.reload()


def run_readme_command(command: str) -> str:
    done = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def publish(bridge: Bridge, clientid: str, topic: str, payload: bytes) -> None:
    client = await Client(mqtt_port(bridge), clientid).connected()
    await client.publish(topic, payload, qos=1)
    await client.disconnect()
    await bridge.idle()


async def test_the_postgresql_step(quickstart: Bridge, home: Path) -> None:
    await asyncio.to_thread(start_postgres, PG_PORT)
    pool = header_pool("pgsql.conf").replace("127.0.0.1:5432", f"127.0.0.1:{PG_PORT}")
    await follow_the_step(quickstart, home, pool, "pgsql.conf", "backend.pgsql.hook.message.publish.1")
    topic = f"readme/pg/{uuid.uuid4().hex[:8]}"
    await publish(quickstart, "readme-pg", topic, b'{"cmd": "reboot"}')
    (command,) = readme_commands("PostgreSQL too.")
    assert command.startswith("psql postgresql://hookbridge:hookbridge@127.0.0.1:5432/mqtt ")
    out = await asyncio.to_thread(run_readme_command, command.replace(":5432/", f":{PG_PORT}/"))
    rows = [[cell.strip() for cell in line.split("|")] for line in out.splitlines() if topic in line]
    assert [row[1:] for row in rows] == [["readme-pg", topic, "1"]]


async def test_the_mongodb_step(quickstart: Bridge, home: Path) -> None:
    await asyncio.to_thread(start_ferretdb, MONGO_PORT)
    pool = header_pool("mongo.conf").replace("127.0.0.1:27017", f"127.0.0.1:{MONGO_PORT}")
    await follow_the_step(quickstart, home, pool, "mongo.conf", "backend.mongo.hook.message.publish.1")
    topic = f"readme/mongo/{uuid.uuid4().hex[:8]}"
    await publish(quickstart, "readme-mongo", topic, b'{"cmd": "reboot"}')
    (command, *_) = readme_commands("MongoDB too.")
    assert "mongosh" not in command and "127.0.0.1:27017" in command
    out = await asyncio.to_thread(run_readme_command, command.replace(":27017", f":{MONGO_PORT}"))
    assert f"{{'topic': '{topic}', 'payload': {{'cmd': 'reboot'}}}}" in out.splitlines()


async def test_the_cassandra_step(quickstart: Bridge, home: Path) -> None:
    await asyncio.to_thread(start_cassandra, CASSA_PORT)
    pool = header_pool("cassa.conf")
    assert f"nodes = 127.0.0.1:{CASSA_PORT}\n" in pool
    await follow_the_step(quickstart, home, pool, "cassa.conf", "backend.cassa.hook.client.connected.1")
    clientid = f"readme-{uuid.uuid4().hex[:8]}"
    await publish(quickstart, clientid, "readme/cassa", b"x")  # its connect is the event
    reader = CassaStore(CASSA_PORT)  # logs in as hookbridge / hookbridge, what scripts/cassandra.sh made
    await reader.connect()
    try:
        rows = await reader.rows("SELECT state FROM mqtt.client WHERE clientid = %s", clientid)
    finally:
        await reader.close()
    assert [row.state for row in rows] == [1]
