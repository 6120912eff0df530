"""The running event loop, found without a system call.

`asyncio.get_running_loop()` checks the process id on every call (CPython guards against a
loop inherited through `fork()`), and on this project's machines that `getpid()` is a real
system call: on the publish path, where the broker calls it two to four times per message, it
measured 1.5 µs of the broker's 38 µs of CPU per message (docs/benchmarks.md#the-event-loop-without-a-system-call).
`running_loop()` keeps the loop per thread and asks asyncio again only when the kept one is not
running (a test's next loop, a thread's first call).

What it leaves out is what the process id check is for: a child made by `fork()` while a loop
runs, which then runs a loop of its own; and a loop that stops in one thread and then runs in
another, while the first thread asks. The bridge does neither (its workers are new interpreters,
bridge/workers/; each loop stays in its thread), so the hot paths use this and the rest keeps
asyncio's call.
"""

from __future__ import annotations

import asyncio
import threading


class _Kept(threading.local):
    loop: asyncio.AbstractEventLoop | None = None


_kept = _Kept()


def running_loop() -> asyncio.AbstractEventLoop:
    """The event loop running in this thread (RuntimeError when none is), as
    `asyncio.get_running_loop()`."""
    loop = _kept.loop
    if loop is None or not loop.is_running():
        loop = _kept.loop = asyncio.get_running_loop()
    return loop
