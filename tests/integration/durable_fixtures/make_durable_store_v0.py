"""Makes durable_store_v0.db: a durable store written by the code before the store's topic index
and `routes` table (format 0, commit ad4c127), for tests/integration/test_durable_restart.py.

Run from a checkout of that commit (its `bridge` and `tests` on PYTHONPATH):

    git archive ad4c127 | tar -x -C /tmp/old && cd /tmp/old && \\
      PYTHONPATH=.:tests python tests/integration/durable_fixtures/make_durable_store_v0.py OUT_DIR

What it holds (the test checks each after the new code opens it):
- old-a, old-b (3.1.1, clean session 0) on o/# at QoS 1, offline: o-00 .. o-19 queued;
- old-c on o/#, connected at the stop with o-00 .. o-09 in flight (never acknowledged);
- old-s1, old-s2 on $share/g/job/#, offline: j-0 .. j-5 given to them in turn (the log's targets);
- the retained message r/x = rx.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from support.process import BridgeProcess
from support.raw import RawClient
from tests.integration.test_durable_sessions import durable_bridge, publish_all, start


async def make(out: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="durable-v0-"))
    bridge: BridgeProcess = durable_bridge(home)
    await start(bridge)
    port = bridge.mqtt_port
    try:
        for client_id, topic in (
            ("old-a", "o/#"),
            ("old-b", "o/#"),
            ("old-s1", "$share/g/job/#"),
            ("old-s2", "$share/g/job/#"),
        ):
            client, _ = await RawClient.connect(port, client_id, clean_session=False)
            await client.subscribe(1, (topic, 1))
            client.abort()
        c, _ = await RawClient.connect(port, "old-c", clean_session=False)
        await c.subscribe(1, ("o/#", 1))
        publisher, _ = await RawClient.connect(port, "old-pub")
        await publish_all(publisher, [(f"o/{n % 3}", b"o-%02d" % n) for n in range(20)])
        await publish_all(publisher, [(f"job/{n}", b"j-%d" % n) for n in range(6)])
        await publish_all(publisher, [("r/x", b"rx")], retain=True)
        inflight = [await c.recv() for _ in range(10)]  # never acknowledged
        assert [p.payload for p in inflight] == [b"o-%02d" % n for n in range(10)]
        await asyncio.sleep(0.5)
        assert bridge.terminate() == 0
    finally:
        bridge.stop()
    shutil.copy(home / "store" / "durable.db", out / "durable_store_v0.db")


if __name__ == "__main__":
    asyncio.run(make(Path(sys.argv[1]).resolve()))
