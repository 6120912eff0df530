"""Broker client ids of `run --workers N`: worker 0 is `<broker.clientid>`, worker i is `<broker.clientid>-w<i>`.

Kept free of imports: the broker sources use it to tell the bridge's own sessions from
application clients (a worker sees its siblings' connects in Mosquitto's log and EMQX's $SYS).
"""

from __future__ import annotations

import re

_WORKER_SUFFIX = re.compile(r"-w[1-9][0-9]*$")


def worker_clientid(clientid: str, index: int) -> str:
    return clientid if index == 0 else f"{clientid}-w{index}"


def same_bridge(own: str, other: str) -> bool:
    """True when `other` is `own` or another worker's session of the same bridge (any worker count)."""
    return _WORKER_SUFFIX.sub("", other) == _WORKER_SUFFIX.sub("", own)
