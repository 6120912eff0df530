"""The worker side of `run --workers N`: what a worker process does besides being a normal bridge.

It never outlives its supervisor: Linux sends it SIGTERM when the supervisor dies, even by
SIGKILL (PR_SET_PDEATHSIG), and on any system the end of its channel (channel.py) stops it too.
Either way it stops as on SIGTERM: it drains, commits and acknowledges what it holds.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from bridge.app import Bridge
from bridge.workers.channel import answer_supervisor

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# From the supervisor: stop for good (scaled down, or the whole set stops and this is not worker
# 0): retire from the broker (end the session) after draining. Any other stop keeps the session.
RETIRE = signal.SIGUSR1


retire_asked = False  # RETIRE came while the worker was starting: it retires once it serves


def hold_signals_until_serving() -> None:
    """SIGHUP or RETIRE before the event loop handles them would end the process (their default
    action): the supervisor forwards a reload to every worker, including one that is still
    starting, and may scale one down as it starts. A reload then is moot (the rules are being
    loaded); a retirement is remembered (`retire_asked`)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def remember(_signum: int, _frame: object) -> None:
        global retire_asked
        retire_asked = True

    signal.signal(RETIRE, remember)


def die_with_supervisor(supervisor_pid: int) -> None:
    """Ask the kernel for SIGTERM when the supervisor dies; if it is gone already, stop now."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            log.warning("cannot ask for a signal when the supervisor dies: %s", os.strerror(ctypes.get_errno()))
    if os.getppid() != supervisor_pid:  # it died before the request above took effect
        raise SystemExit("the supervisor is gone; not starting")


def channel_task(control_fd: int, bridge: Bridge) -> Callable[[], Coroutine[Any, Any, None]]:
    """What the worker runs beside the bridge: answer the supervisor until it goes away."""
    sock = socket.socket(fileno=control_fd)

    async def serve() -> None:
        await answer_supervisor(sock, bridge.metrics.fresh_families, bridge.health)
        log.info("the supervisor closed the channel: stopping")

    return serve
