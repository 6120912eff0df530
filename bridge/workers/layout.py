"""Who each worker is: its broker client id and its spool directory (docs/operations.md, "Several workers").

Worker 0 keeps `broker.clientid` and `spool.dir` as they are, so going from one process to N
keeps the broker session, the packet-id ledger and the spool the single process had. Worker i > 0
is `<broker.clientid>-w<i>` with `<spool.dir>/worker-<i>/`. Both must stay the same across
restarts: a worker's broker session and its ledger (bridge/brokers/external/mqtt/ledger.py) belong to its
client id, and a message it committed but had not acknowledged comes back to that session only.

Pool spools live in `<spool.dir>/<db>.<pool>/`; a pool id always holds a dot, so a `worker-<i>`
directory beside them is never taken for a pool's.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

from bridge.brokers.external.clientids import worker_clientid
from bridge.conf.config import Config

_WORKER_DIR = re.compile(r"^worker-([1-9][0-9]*)$")
MIN_SPOOL_SHARE = 64 << 10  # the least spool.max_bytes takes


def worker_spool_dir(spool_dir: str | Path, index: int) -> Path:
    return Path(spool_dir) if index == 0 else Path(spool_dir) / f"worker-{index}"


def become_worker(config: Config, index: int, workers: int) -> None:
    """Make `config` worker `index`'s of `workers`: its client id and spool, its share of
    `spool.max_bytes` (the bound stays one for the whole bridge), no public listener (the
    supervisor serves `metrics.listener` for all of them), and client events for worker 0 only."""
    config.settings["broker.clientid"] = worker_clientid(config["broker.clientid"], index)
    config.settings["spool.dir"] = str(worker_spool_dir(config["spool.dir"], index))
    config.settings["spool.max_bytes"] = max(MIN_SPOOL_SHARE, config["spool.max_bytes"] // workers)
    config.settings["metrics.listener"] = None
    config.worker = index


def clear_retired(spool_dir: str | Path) -> bool:
    """After a worker retired: remove its directory when it holds no spooled action (only its
    pools' `layout` files and empty lane folders), so no later start warns about it. A spool that
    still holds actions (their database was down) stays, and so does the warning: those actions are
    written when that worker runs again. True when the directory is gone."""
    root = Path(spool_dir)
    for pool in [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []:
        if all(f.name == "layout" for f in pool.rglob("*") if not f.is_dir()):
            shutil.rmtree(pool, ignore_errors=True)
    with contextlib.suppress(OSError):  # something is left in it
        root.rmdir()
    return not root.exists()


def leftover_workers(spool_dir: str | Path, workers: int) -> list[int]:
    """Workers >= `workers` whose directory an earlier run with more workers left behind."""
    root = Path(spool_dir)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        match = _WORKER_DIR.match(entry.name)
        if match and entry.is_dir() and int(match[1]) >= workers:
            found.append(int(match[1]))
    return sorted(found)


def leftover_warning(config: Config, workers: int) -> str | None:
    """One line saying what an earlier run with more workers left, and what to do; None if nothing."""
    left = leftover_workers(config["spool.dir"], workers)
    if not left:
        return None
    names = ", ".join(str(i) for i in left)
    clientids = ", ".join(worker_clientid(config["broker.clientid"], i) for i in left)
    dirs = ", ".join(str(worker_spool_dir(config["spool.dir"], i)) for i in left)
    return (
        f"state of worker{'s' if len(left) > 1 else ''} {names} from an earlier run with more workers: their "
        f"broker sessions ({clientids}) may hold messages the broker assigned them and {dirs} may hold "
        f"unwritten actions; run with --workers {left[-1] + 1} until they are drained, then retire them as "
        'docs/operations.md "Several workers" says (scale down)'
    )
