"""Shared by the mqtt / emqx mode tests: a Mosquitto started by scripts/mosquitto.sh, configs for the bridge."""

from __future__ import annotations

import uuid
from pathlib import Path

MOSQUITTO_PORT = 1885


def external_config(
    tmp_path: Path, mode: str = "mqtt", *, clientid: str | None = None, extra: str = "", state: bool = True
) -> str:
    """Config lines for an external mode against the test Mosquitto (a fresh session unless clientid is given).

    `state`: set spool.dir (where the packet-id ledger lives) to a folder of the test; off when the
    caller's config sets spool.dir itself (make_bridge does, once the spool is merged)."""
    clientid = clientid or f"hb-{uuid.uuid4().hex[:10]}"
    lines = f"broker.mode = {mode}\nbroker.server = 127.0.0.1:{MOSQUITTO_PORT}\nbroker.clientid = {clientid}\n"
    # Long enough for a restart within a test; short, so that the sessions of finished tests do not
    # stay in the broker queueing every later test's messages.
    lines += "broker.session_expiry = 2m\n"
    if state:
        lines += f"spool.dir = {tmp_path / 'state'}\n"
    return lines + extra
