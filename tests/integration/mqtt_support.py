"""Shared by the mqtt / emqx mode tests: a Mosquitto started by scripts/mosquitto.sh, configs for the bridge."""

from __future__ import annotations

import uuid
from pathlib import Path

MOSQUITTO_PORT = 1885


def external_config(tmp_path: Path, mode: str = "mqtt", *, clientid: str | None = None, extra: str = "") -> str:
    """Config lines for an external mode against the test Mosquitto (a fresh session unless clientid is given)."""
    clientid = clientid or f"hb-{uuid.uuid4().hex[:10]}"
    return (
        f"broker.mode = {mode}\n"
        f"broker.server = 127.0.0.1:{MOSQUITTO_PORT}\n"
        f"broker.clientid = {clientid}\n"
        f"spool.dir = {tmp_path / 'state'}\n" + extra
    )
