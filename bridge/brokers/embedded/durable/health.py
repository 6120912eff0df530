"""Whether the durable store can take what the broker writes: what /healthz reports for it, like
a pool (docs/operations.md#health-get-healthz).

Two things can stop it: a commit that failed (a full disk, a file-size limit, an I/O error;
the publishers of its messages get no acknowledgement; it counts until a commit works and
journal.FAILURE_HOLD has passed since the last failure) and a disk with less free space than
`broker.durable_min_free`, which warns before commits start failing.
"""

from __future__ import annotations

import shutil
from typing import Any

from bridge.brokers.embedded.durable.journal import Journal


def store_health(journal: Journal, min_free: int) -> dict[str, Any]:
    """{"up", "writable", "free_bytes", "min_free_bytes", "error"}: up when it is writable and the
    disk holding it has at least `min_free` bytes free."""
    directory = journal.store.path.parent
    error = journal.failing()
    writable = not error
    try:
        free = shutil.disk_usage(directory).free
    except OSError as exc:  # the directory is gone or unreadable: nothing can be written there either
        free = 0
        error = error or f"durable store {directory}: cannot read its free space: {exc.strerror or exc}"
    if not error and free < min_free:
        error = f"durable store {directory}: {free} bytes free, below broker.durable_min_free ({min_free} bytes)"
    return {"up": not error, "writable": writable, "free_bytes": free, "min_free_bytes": min_free, "error": error}
