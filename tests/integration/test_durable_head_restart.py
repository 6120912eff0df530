"""The durable store's sequence numbers never go back across a kill -9, end to end: what f4770bf
fixed (docs/brokers.md#across-a-kill--9-durable-sessions), through a real `hookbridge run` with
`broker.durable_sessions = on` and raw clients.

A durable session that has acknowledged everything has its position at the head (the last
sequence number given out), and the trim then deletes the whole log: every session is past it.
Before f4770bf the head was read back at start as the log's newest entry, so after a kill -9 in
that state it went back to 0; the first messages published after the restart got sequence numbers
the session's position had already passed, and its load (`seq > position`) skipped them: the
publisher had its PUBACK, the subscriber never got them (the soak's losses, published right after
a restart). tests/unit/test_durable_head.py checks the head read back from such a store;
this checks what a client sees, in both states the session can be in at the kill (its client
connected, or gone with a DISCONNECT).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.brokers.embedded.codec import Disconnect
from support.process import BridgeProcess
from support.raw import RawClient
from tests.integration.test_durable_sessions import (
    drain,
    durable_bridge,
    handled,
    persistent,
    publish_all,
    restart,
    start,
)

RawConnect = Callable[..., Awaitable[tuple[RawClient, Any]]]

SUBSCRIBER = "head-sub"
TOPIC = "head/t"
# As many published after the restart as before: with the head read back as 0, every one of them
# gets a sequence number at or below the session's position (the old code lost them all).
BEFORE = [b"before-%02d" % n for n in range(10)]
AFTER = [b"after-%02d" % n for n in range(10)]
WITHIN = 60.0  # for anything the bridge is waited for: what is checked is what arrives, not how fast


def logged_and_position(store: Path, client_id: str) -> tuple[int, int | None]:
    """How many entries the log holds, and the position of `client_id`'s session (None before its
    `positions` row is written), read from the store opened read-only while the bridge runs."""
    db = sqlite3.connect(f"file:{store / 'durable.db'}?mode=ro", uri=True)
    try:
        (logged,) = db.execute("SELECT count(*) FROM messages").fetchone()
        row = db.execute("SELECT body FROM positions WHERE clientid = ?", (client_id,)).fetchone()
    finally:
        db.close()
    return int(logged), None if row is None else int(json.loads(row[0])["position"])


@pytest.mark.parametrize("at_kill", ["connected", "disconnected"])
async def test_messages_published_right_after_kill_9_reach_a_caught_up_session_whose_log_was_trimmed(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, at_kill: str
) -> None:
    """A durable session receives and acknowledges every message; once the trim has emptied the log
    (its position still names the last of them) the bridge gets kill -9. Messages published right
    after the restart, each acknowledged to the publisher, all reach the session when its client
    comes back: once, in order, nothing after them but what is published next."""
    bridge = durable_bridge(tmp_path)
    bridges.append(await start(bridge))
    port = bridge.mqtt_port
    subscriber, _ = await persistent(raw_connect, port, SUBSCRIBER, fresh=True, timeout=WITHIN)
    assert (await subscriber.subscribe(1, (TOPIC, 1))).reason_codes == [1]
    publisher, _ = await raw_connect(port, "head-pub")  # clean session: not in the store
    await publish_all(publisher, [(TOPIC, payload) for payload in BEFORE])
    got = await drain(subscriber, BEFORE[-1], timeout=WITHIN)
    assert [p.payload for p in got] == BEFORE
    await handled(subscriber, WITHIN)  # its PUBACKs are in: nothing queued, nothing in flight
    if at_kill == "disconnected":
        await subscriber.send(Disconnect())

    # The state the old head read went wrong on: the log trimmed to nothing, the session's
    # position past every message it held.
    store = tmp_path / "store"

    def trimmed_past_the_session() -> bool:
        logged, position = logged_and_position(store, SUBSCRIBER)
        return logged == 0 and position is not None and position >= len(BEFORE)

    await asyncio.to_thread(bridge.wait_for, trimmed_past_the_session, "the trim to empty the log", WITHIN)
    await restart(bridge, "kill")

    # Right after the restart, the session not loaded yet: each message acknowledged to its publisher.
    publisher, _ = await raw_connect(port, "head-pub", timeout=WITHIN)
    await publish_all(publisher, [(TOPIC, payload) for payload in AFTER])
    subscriber, connack = await persistent(raw_connect, port, SUBSCRIBER, timeout=WITHIN)
    assert connack.session_present
    # A marker published once the session is loaded (its CONNACK comes after its queue is read
    # back) goes to it live: it comes after whatever the store held for it, lost messages or not.
    await publish_all(publisher, [(TOPIC, b"marker")])
    got = await drain(subscriber, b"marker", timeout=WITHIN)
    payloads = [p.payload for p in got]
    missing = [payload for payload in AFTER if payload not in payloads]
    assert not missing, f"{len(missing)} of {len(AFTER)} acknowledged messages never delivered: {missing}"
    assert payloads == [*AFTER, b"marker"]  # each once, in order, none of those from before the kill
    assert not any(p.dup for p in got)  # none was sent to the session before
    await handled(subscriber, WITHIN)  # a PINGRESP next: nothing more was queued for it
