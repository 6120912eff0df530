"""A durable session's rows (durable/journal.py `snapshot` and `progress`, written by orjson) read
back as they were written: names and filters outside ASCII, a 5.0 session's expiry, a queue."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from test_durable_lazy_load import broker, committed, publish, queued

from bridge.brokers.embedded.sessions import Subscription

CLIENT, USER, FILTER = "gerät-ü/1", "benutzer-é", "häuser/+/温度"


async def test_rows_outside_ascii_read_back_the_same(tmp_path: Path) -> None:
    first = broker(tmp_path)
    state = first.restored_session(CLIENT, 3600, USER, USER, 5)
    first.router.subscribe(state, Subscription(FILTER, 1, "", identifier=7))
    state.touch(whole=True)
    publish(first, "häuser/küche/温度", "21,5 °C".encode())
    await committed(first)
    assert first.journal is not None
    first.journal.close()

    with sqlite3.connect(tmp_path / "durable.db") as db:
        (body,) = db.execute("SELECT body FROM sessions WHERE clientid = ?", (CLIENT,)).fetchone()
        (position,) = db.execute("SELECT body FROM positions WHERE clientid = ?", (CLIENT,)).fetchone()
    row = json.loads(body)
    assert (row["username"], row["owner"], row["expiry"], row["level"]) == (USER, USER, 3600, 5)
    assert row["subs"] == [[FILTER, 1, row["subs"][0][2], False, False, 7]]
    assert json.loads(position)["position"] == 0

    second = broker(tmp_path)
    assert second.journal is not None
    second.journal.restore(second)
    again = second.loaded(second.states[CLIENT])
    assert (again.username, again.expiry, list(again.subscriptions)) == (USER, 3600, [FILTER])
    assert again.subscriptions[FILTER].identifier == 7
    assert queued(again) == ["21,5 °C".encode()]
    second.journal.close()
