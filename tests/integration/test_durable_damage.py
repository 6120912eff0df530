"""A damaged durable store (docs/brokers.md#a-damaged-store), against a real `hookbridge run`.

Bytes of `durable.db` overwritten where the messages of one session lie (the b-tree pages that
hold its payloads get an invalid page type, as a bad disk sector or a stray write would leave
them): with the bridge stopped, the next start refuses with a message naming the file; while it
runs (after its check at open), that session's CONNECT is refused with server unavailable,
counted at /metrics and logged once with the path, and every other session is served;
`hookbridge check --durable` finds the damage and says how to recover.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bridge.brokers.embedded.codec import Connack, ConnectReturnCode
from support.process import BridgeProcess
from support.raw import RawClient
from support.services import ROOT
from tests.integration.test_durable_sessions import drain, durable_bridge, persistent, publish_all, restart, start

RawConnect = Callable[..., Awaitable[tuple[RawClient, Any]]]

MARK = b"damaged-payload-"  # the payloads of the session whose pages are overwritten
SOUND = b"sound-1" + b"s" * 3500  # too large to share a 4 KiB page with one of those


async def owed_sessions(bridge: BridgeProcess, raw_connect: RawConnect) -> None:
    """`victim` owed 40 messages of 2 KB on victim/t, `sound` owed one of 3.5 KB on sound/t; both offline."""
    port = bridge.mqtt_port
    for client_id, topic in (("victim", "victim/t"), ("sound", "sound/t")):
        client, _ = await persistent(raw_connect, port, client_id)
        assert (await client.subscribe(1, (topic, 1))).reason_codes == [1]
        client.abort()
    publisher, _ = await raw_connect(port, "publisher")
    await publish_all(publisher, [("victim/t", MARK + b"%02d" % n + b"x" * 2000) for n in range(40)])
    await publish_all(publisher, [("sound/t", SOUND)])
    publisher.abort()


def overwrite_pages_holding(store: Path, needle: bytes) -> int:
    """Give every page of durable.db that holds `needle` an invalid b-tree page type; returns
    how many pages. The page size is read from the file's header (bytes 16-17)."""
    path = store / "durable.db"
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    pages = {offset // page_size for offset in _find_all(data, needle)}
    assert pages and 0 not in pages
    for page in pages:
        data[page * page_size] = 0xFF  # not one of the four b-tree page types
    with open(path, "r+b") as file:  # in place: a running bridge keeps its open file
        file.write(data)
    return len(pages)


def _find_all(data: bytearray, needle: bytes) -> list[int]:
    found, at = [], data.find(needle)
    while at >= 0:
        found.append(at)
        at = data.find(needle, at + 1)
    return found


def check_durable(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", "check", "--durable", "-c", "bridge.conf", "-r", "rules"],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def test_a_store_damaged_while_stopped_refuses_the_start_naming_the_file(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = durable_bridge(tmp_path)
    bridges.append(await start(bridge))
    await owed_sessions(bridge, raw_connect)
    assert bridge.terminate() == 0  # a clean stop: its write-ahead log is empty
    assert check_durable(tmp_path).returncode == 0
    assert overwrite_pages_holding(tmp_path / "store", MARK) >= 1

    checked = check_durable(tmp_path)
    path = tmp_path / "store" / "durable.db"
    assert checked.returncode == 1, checked
    assert f"{path}: damaged:" in checked.stderr and "to recover:" in checked.stderr, checked.stderr

    with contextlib.suppress(AssertionError):  # /healthz may answer before the store is opened
        await asyncio.to_thread(bridge.start)
    assert bridge.process is not None
    assert await asyncio.to_thread(bridge.process.wait, 60) != 0
    log = bridge.log.read_text()
    assert f"durable store {path}: damaged (" in log and "refusing to start on it" in log, log[-3000:]
    assert "docs/brokers.md#a-damaged-store" in log


async def test_a_session_whose_rows_cannot_be_read_is_refused_counted_and_logged_once(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = durable_bridge(tmp_path, preload="0")  # its queue not read at start: damaged after it
    bridges.append(await start(bridge))
    await owed_sessions(bridge, raw_connect)
    await restart(bridge, "term")  # checked at open, sound; no session loaded yet
    assert overwrite_pages_holding(tmp_path / "store", MARK) >= 1  # damaged under the running bridge

    for attempt in (1, 2):
        client, connack = await raw_connect(bridge.mqtt_port, "victim", clean_session=False)
        assert isinstance(connack, Connack) and connack.reason_code == ConnectReturnCode.SERVER_UNAVAILABLE, connack
        assert bridge.metric("hookbridge_broker_refused_total", reason="durable_unreadable") == attempt
        client.abort()
    path = tmp_path / "store" / "durable.db"
    logged = [line for line in bridge.log.read_text().splitlines() if "cannot be read" in line]
    assert len(logged) == 1 and str(path) in logged[0] and "'victim'" in logged[0], logged

    sound, connack = await persistent(raw_connect, bridge.mqtt_port, "sound")  # the others are served
    assert connack.session_present
    assert [p.payload for p in await drain(sound, SOUND)] == [SOUND]
