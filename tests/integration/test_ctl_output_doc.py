"""docs/operations.md "What `ctl` prints": every example there is run against a real bridge set up
the same way (real paho clients, the shipped rules on the test Redis), and its output must be
the documented one, with what changes from run to run (numbers, times, message ids, column
widths) set aside. For `ctl rules`, whose rows are the shipped rules, the header and the first
row's shape are compared."""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
from pathlib import Path

import redis as redis_sync

from bridge.app import Bridge, Paths
from support.bridges import mqtt_port
from support.conf import config_text
from support.mqtt import V5, V311, Client
from support.services import ROOT
from tests.integration.test_ctl import ctl

KEY = "ctl-doc-k3y-0123456789"
DOC = ROOT / "docs" / "operations.md"


def documented_examples() -> list[tuple[list[str], str]]:
    """(arguments, output) of each `$ hookbridge ctl ...` in the section."""
    text = DOC.read_text()
    section = text.split("### What `ctl` prints", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 1)[1].split("```", 1)[0]
    examples = []
    for chunk in block.split("$ hookbridge ctl ")[1:]:
        command, _, output = chunk.partition("\n")
        examples.append((shlex.split(command), output.rstrip("\n")))
    return examples


def shape(text: str) -> list[str]:
    """Lines with what varies set aside: message ids, numbers, and the spaces that align columns."""
    text = re.sub(r"\b[0-9A-F]{32}\b", "ID", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return [re.sub(r" {2,}", "  ", line).rstrip() for line in text.splitlines()]


async def test_the_documented_ctl_output_is_what_ctl_prints(
    tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis
) -> None:
    examples = documented_examples()
    assert len(examples) >= 12
    home = tmp_path / "bridge"
    (home / "rules").mkdir(parents=True)
    shutil.copytree(ROOT / "templates", home / "templates")
    shutil.copy(ROOT / "rules" / "redis.conf", home / "rules" / "redis.conf")
    extra = f"spool.dir = {home / 'spool'}\ndeadletter.dir = {home / 'dl'}\napi.enabled = on\n"
    extra += f"api.keys = ops:sha256:{hashlib.sha256(KEY.encode()).hexdigest()}\nbroker.bans_file = {home / 'bans'}\n"
    text = config_text(redis_port, extra).replace("metrics.listener = off\n", "metrics.listener = 127.0.0.1:0\n")
    (home / "bridge.conf").write_text(text)
    bridge = Bridge.load(Paths(home / "bridge.conf", home / "rules"))
    await bridge.start()
    made: list[Client] = []
    try:
        port = mqtt_port(bridge)
        device = Client(port, "dev-7", version=V5)
        made.append(device)
        assert (await device.connect()).reason == 0
        assert await device.subscribe("alerts/#", 1) == [1]
        logger = Client(port, "logger", version=V311, clean=False)
        made.append(logger)
        assert (await logger.connect()).reason == 0
        assert await logger.subscribe("sensors/#", 1) == [1]
        await logger.disconnect()
        assert await device.publish("sensors/1/temp", b"21.5", 1, retain=True) == 0
        await bridge.idle()
        assert bridge.status is not None
        base = f"http://127.0.0.1:{bridge.status.port}"
        for args, documented in examples:
            code, out, err = await ctl("--url", base, *args, key=KEY)
            printed = (out + err).rstrip("\n")
            assert code == (1 if err else 0), (args, code, err)
            if args == ["rules"]:
                assert shape(printed)[0] == shape(documented)[0]
                first_row, documented_row = shape(printed)[1].split("  "), shape(documented)[1].split("  ")
                assert len(first_row) == len(documented_row) and first_row[:3] == documented_row[:3], printed
            else:
                assert shape(printed) == shape(documented), (args, printed)
    finally:
        for client in made:
            await client.close()
        await bridge.stop(drain_timeout=5)
