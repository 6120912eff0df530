"""A durable store that stays bounded (issue 36 items 5 and 6), against a real `hookbridge run`.

`broker.persistent_session_expiry` ends a 3.1.1 session with clean session 0 whose client stays
away (restored from the store too), its rows with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from support.process import BridgeProcess
from tests.integration.conftest import RawClient
from tests.integration.test_durable_sessions import (
    durable_bridge,
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
