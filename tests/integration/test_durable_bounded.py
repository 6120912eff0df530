"""A durable store that stays bounded, against a real `hookbridge run`.

`broker.persistent_session_expiry` ends a 3.1.1 session with clean session 0 whose client stays
away (restored from the store too), its rows with it; a session not loaded since a restart
obeys the queue limits (durable/owed.py) and does not hold the log's trim.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.brokers.embedded.codec import Pingreq, Pingresp
from bridge.brokers.embedded.sessions import MESSAGE_OVERHEAD
from support.process import BridgeProcess
from support.raw import RawClient
from tests.integration.test_durable_sessions import (
    drain,
    durable_bridge,
    handled,
    persistent,
    publish_all,
    restart,
    sessions_stored,
    start,
    store_rows_mentioning,
)

RawConnect = Callable[..., Awaitable[tuple[RawClient, Any]]]


async def test_a_3_1_1_persistent_session_expires_after_broker_persistent_session_expiry(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = durable_bridge(tmp_path)
    bridge.home.joinpath("bridge.conf").write_text(
        bridge.home.joinpath("bridge.conf").read_text() + "broker.persistent_session_expiry = 3s\n"
    )
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    for client_id in ("absent-a", "absent-b"):
        client, _ = await persistent(raw_connect, port, client_id)  # 3.1.1, clean session 0
        assert (await client.subscribe(1, (f"{client_id}/t", 1))).reason_codes == [1]
        client.abort()
    publisher, _ = await raw_connect(port, "publisher")
    await publish_all(publisher, [("absent-a/t", b"for-absent-a"), ("absent-b/t", b"for-absent-b")])
    publisher.abort()
    await sessions_stored(bridge, 2)
    # absent-b is restored by the next start: its expiry is the setting's, from the restart.
    await restart(bridge, "kill")
    needles = [b"absent-a", b"absent-b", b"for-absent-a", b"for-absent-b"]
    await sessions_stored(bridge, 0)  # both gone once their 3 s passed, whatever the restart did
    gone = lambda: not store_rows_mentioning(tmp_path / "store", needles)  # noqa: E731
    await asyncio.to_thread(bridge.wait_for, gone, "their rows deleted", 60)
    client, connack = await raw_connect(port, "absent-a", clean_session=False)
    assert not connack.session_present


FLEET = 100_000  # messages queued for one session not loaded since the restart
PAYLOAD = 2000
QUEUE_BYTES = 1 << 20


async def ping_rtts(client: RawClient, stop: asyncio.Event) -> list[float]:
    """PINGREQ / PINGRESP round trips until `stop`: how long the broker's event loop kept a
    connected client waiting (a figure to report, not a pass/fail)."""
    rtts = []
    while not stop.is_set():
        started = time.perf_counter()
        await client.send(Pingreq())
        assert isinstance(await client.recv(), Pingresp)
        rtts.append(time.perf_counter() - started)
    return rtts


async def test_a_session_not_loaded_obeys_the_queue_limits_and_the_store_stays_bounded(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    """100,000 x 2 KB for a session not loaded since a restart, with limits of 1,000 messages /
    1 MB: the store keeps what the limits keep (its oldest entries dropped and counted, as for a
    loaded session), the log is trimmed past them while the session is away, and its reconnect
    reads back only what it is owed (its filter begins with a wildcard)."""
    bridge = durable_bridge(tmp_path, preload="0")  # not loaded: not read at start either
    bridge.home.joinpath("bridge.conf").write_text(
        bridge.home.joinpath("bridge.conf").read_text()
        + f"broker.max_offline_messages = 1000\nbroker.max_offline_bytes = {QUEUE_BYTES}\n"
    )
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    device, _ = await persistent(raw_connect, port, "far-device")
    assert (await device.subscribe(1, ("+/far-device/cmd", 1))).reason_codes == [1]
    device.abort()
    await sessions_stored(bridge, 1)
    await restart(bridge, "kill")  # restored, not loaded

    publisher, _ = await raw_connect(port, "fleet-publisher")
    payloads = [b"%06d-" % n + b"p" * (PAYLOAD - 7) for n in range(FLEET)]
    for first in range(0, FLEET, 2000):
        await publish_all(publisher, [("cmd/far-device/cmd", p) for p in payloads[first : first + 2000]])
    assert bridge.metric("hookbridge_broker_durable_sessions_unloaded") == 1

    def log_entries() -> float:
        return bridge.metric("hookbridge_broker_durable_messages")

    await asyncio.to_thread(bridge.wait_for, lambda: log_entries() <= 1000, "the log trimmed to what is owed", 120)
    store = tmp_path / "store" / "durable.db"
    size = store.stat().st_size
    dropped = bridge.metric("hookbridge_broker_refused_total", reason="offline_bytes")
    assert dropped >= FLEET - 1000, dropped
    # SQLite reuses the pages a trim frees but never gives them back, so the file's size is the
    # most the log held at once: how far the trim fell behind the publisher, which a loaded
    # machine stretches (34 MiB here when quiet, 70 MiB beside other test runs). Unbounded, the
    # whole stream stays: 395 MiB. Half the stream's payload tells the two apart on any machine.
    assert size < FLEET * PAYLOAD // 2, f"durable.db is {size} bytes"

    prober, _ = await raw_connect(port, "prober")
    stop = asyncio.Event()
    probing = asyncio.create_task(ping_rtts(prober, stop))
    device, connack = await persistent(raw_connect, port, "far-device")
    assert connack.session_present
    got = [p.payload for p in await drain(device, payloads[-1], timeout=60)]
    stop.set()
    rtts = await probing
    kept = len(got)
    assert got == payloads[-kept:], "not the newest, in order, once"
    assert kept * (PAYLOAD + len("cmd/far-device/cmd") + MESSAGE_OVERHEAD) <= QUEUE_BYTES
    assert kept + dropped == FLEET, (kept, dropped)
    print(
        f"\nfleet: {FLEET} x {PAYLOAD} B for a session not loaded, limits 1,000 / 1 MiB: durable.db {size / 2**20:.1f} MiB,"
        f" log entries {log_entries():.0f}, {kept} delivered on reconnect, {dropped:.0f} dropped;"
        f" connected client's PINGREQ round trip during the reconnect: max {max(rtts) * 1000:.1f} ms"
        f" over {len(rtts)} pings"
    )


@pytest.mark.parametrize("way", ["restored, read back when first needed", "restored, read at start", "not restarted"])
async def test_the_log_is_trimmed_past_a_session_that_has_not_come_back(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, way: str
) -> None:
    """A durable session offline and owed one message; another durable session gets and
    acknowledges 5,000: the log keeps the one, the rest is trimmed; after a kill -9 the absent
    session gets its message when it returns, once. The absent session is one restored by a
    restart and not loaded since (its entry held by its `routes` row from the start), one whose
    queue the restart read into memory (broker.durable_preload), or one that never left memory:
    those two are offline holding the trim back, and after a while (journal._ABSENT_AFTER) their
    entries get `routes` rows and the trim goes past them."""
    bridge = durable_bridge(tmp_path, preload="0" if way == "restored, read back when first needed" else None)
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    absent, _ = await persistent(raw_connect, port, "absent")
    assert (await absent.subscribe(1, ("absent/t", 1))).reason_codes == [1]
    absent.abort()
    reader, _ = await persistent(raw_connect, port, "reader")
    assert (await reader.subscribe(1, ("busy/t", 1))).reason_codes == [1]
    reader.abort()
    publisher, _ = await raw_connect(port, "publisher")
    await publish_all(publisher, [("absent/t", b"for-absent")])
    publisher.abort()
    await sessions_stored(bridge, 2)
    if way != "not restarted":
        await restart(bridge, "kill")  # both restored

    reader, connack = await persistent(raw_connect, port, "reader")
    assert connack.session_present
    publisher, _ = await raw_connect(port, "publisher")
    busy = [b"busy-%04d" % n for n in range(5000)]
    for first in range(0, len(busy), 1000):
        await publish_all(publisher, [("busy/t", p) for p in busy[first : first + 1000]])
    assert [p.payload for p in await drain(reader, busy[-1])] == busy
    await handled(reader)  # its PUBACKs are in: nothing of the 5,000 is owed to anyone

    def log_entries() -> float:
        return bridge.metric("hookbridge_broker_durable_messages")

    await asyncio.to_thread(
        bridge.wait_for, lambda: log_entries() == 1, "the log trimmed to the absent one's message", 60
    )
    reader.abort()
    await restart(bridge, "kill")
    absent, connack = await persistent(raw_connect, port, "absent")
    assert connack.session_present
    assert [p.payload for p in await drain(absent, b"for-absent")] == [b"for-absent"]
    await handled(absent)
    reader, connack = await persistent(raw_connect, port, "reader")
    assert connack.session_present
    await reader.send(Pingreq())
    assert isinstance(await reader.recv(), Pingresp)  # none of the 5,000 again
    await asyncio.to_thread(bridge.wait_for, lambda: log_entries() == 0, "the log trimmed to nothing", 60)
