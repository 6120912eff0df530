"""The supervisor of `hookbridge run --workers N` (N > 1): one process watching N bridge workers.

Each worker is `python -m bridge run` with its own event loop, broker session (client id), spool
and pools (layout.py); the broker splits the messages among them through one shared
subscription. The supervisor

- starts them, and starts again one that exits while it is not stopping, after a pause that
  doubles from 0.5 s up to 30 s (back to 0.5 s once a worker has run for 30 s);
- forwards SIGHUP (reload the rules) to every worker; on SIGTERM / SIGINT stops them all, waits
  until all have drained and exited (SIGKILL after STOP_GRACE), and returns;
- scales: SIGTTIN starts one more worker, SIGTTOU retires the last one (never worker 0).

A worker stopping for good *retires* (RETIRE, bridge/cli.py): it unsubscribes, takes and
acknowledges what its broker session still holds and ends the session, so the broker stops
handing it a share of the shared subscription. That is a worker scaled down, and every worker
but 0 when the whole set stops: worker 0 keeps its session, in which the messages published while
the bridge is down wait for the next run (as with one process). A worker that crashes or is
killed keeps its session: it is started again and takes up where it was.
- serves `metrics.listener`: /metrics adds up the workers' numbers (merge.py), /healthz is 200
  only when every worker says it is ready, and shows each worker's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from bridge.app import Paths
from bridge.brokers.external.clientids import worker_clientid
from bridge.conf.config import Config
from bridge.conf.tls import http_listener_context
from bridge.ops.http import StatusServer
from bridge.ops.metrics import Family, Sample, render_families
from bridge.ops.redact import Redactor
from bridge.workers.channel import SupervisorEnd, families_from_json
from bridge.workers.child import RETIRE
from bridge.workers.layout import worker_spool_dir
from bridge.workers.merge import combined_health, counts_only, merge_families

log = logging.getLogger("hookbridge.supervisor")

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
STEADY = 30.0  # a worker up this long has started well: its next restart waits BACKOFF_FIRST again
STOP_GRACE = 60.0  # a worker drains up to 15 s (broker 5 s, pools 10 s; retiring 40 s more); then it is killed


@dataclass
class Worker:
    index: int
    clientid: str
    spool: str
    state: str = "starting"  # starting | running | restarting | retiring | stopped
    process: asyncio.subprocess.Process | None = None
    channel: SupervisorEnd | None = None
    restarts: int = 0
    last_counts: list[Family] = field(default_factory=list)  # from the last scrape: carried over a restart

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


class Supervisor:
    def __init__(self, paths: Paths, config: Config, workers: int) -> None:
        self.paths = paths
        self.config = config
        self.workers = [
            Worker(i, worker_clientid(config["broker.clientid"], i), str(worker_spool_dir(config["spool.dir"], i)))
            for i in range(workers)
        ]
        self.carried: list[Family] = []  # what workers counted before they were restarted or retired
        self._stop = asyncio.Event()
        self._keepers: dict[int, asyncio.Task[None]] = {}
        self.status: StatusServer | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload)
        loop.add_signal_handler(signal.SIGTTIN, self.scale_up)
        loop.add_signal_handler(signal.SIGTTOU, self.scale_down)
        listener = self.config["metrics.listener"]
        if listener is not None:
            redactor = Redactor(self.config.secrets)
            if self.config["api.enabled"]:
                log.warning("api.enabled: the management API is served by one bridge process, not with --workers")
            self.status = StatusServer(
                listener[0],
                listener[1],
                self.metrics_text,
                self.health,
                redactor,
                ssl_context=http_listener_context(self.config.settings),
            )
            await self.status.start()
        for worker in self.workers:
            self._start_keeper(worker)
        log.info("supervisor %d: %d workers", os.getpid(), len(self.workers))
        await self._stop.wait()
        log.info("stopping: every worker drains and exits; workers other than 0 retire")
        for worker in self.workers:
            self._signal(worker, signal.SIGTERM if worker.index == 0 else RETIRE)
        _done, late = await asyncio.wait(list(self._keepers.values()), timeout=STOP_GRACE)
        for worker in self.workers:
            if worker.alive:
                log.error("worker %d did not stop within %.0f s: killing it", worker.index, STOP_GRACE)
                self._signal(worker, signal.SIGKILL)
        await asyncio.gather(*late, return_exceptions=True)
        if self.status is not None:
            await self.status.stop()
        log.info("all workers stopped")

    # -- the workers ------------------------------------------------------------

    def _start_keeper(self, worker: Worker) -> None:
        self._keepers[worker.index] = asyncio.create_task(self._keep(worker), name=f"worker-{worker.index}")

    def scale_up(self) -> None:
        """SIGTTIN: one more worker, with the next index (its identity, layout.py)."""
        if self._stop.is_set():
            return
        if any(w.state == "retiring" for w in self.workers):  # its index would be taken by a newcomer
            log.warning("not scaling up while a worker retires: send SIGTTIN again once it has left")
            return
        index = len(self.workers)
        clientid = worker_clientid(self.config["broker.clientid"], index)
        worker = Worker(index, clientid, str(worker_spool_dir(self.config["spool.dir"], index)))
        self.workers.append(worker)
        self._start_keeper(worker)
        log.info("scaling up to %d workers", len(self.workers))

    def scale_down(self) -> None:
        """SIGTTOU: retire the last worker; once it has left it is no longer part of the set."""
        active = [w for w in self.workers if w.state != "retiring"]
        if self._stop.is_set() or len(active) <= 1:
            log.warning("not scaling down: worker 0 stays (stop the supervisor to stop it)")
            return
        worker = active[-1]
        worker.state = "retiring"
        self._signal(worker, RETIRE)
        self._keepers[worker.index].add_done_callback(lambda _: self._retired(worker))
        log.info("scaling down to %d workers: worker %d retires", len(active) - 1, worker.index)

    def _retired(self, worker: Worker) -> None:
        if self._stop.is_set() or worker is not self.workers[-1]:
            return  # stopping anyway; or a later worker retires first and removes both
        while self.workers and self.workers[-1].state == "stopped" and self.workers[-1].index > 0:
            gone = self.workers.pop()
            self._keepers.pop(gone.index, None)
            self.carried = merge_families({0: self.carried, 1: gone.last_counts})
            log.info("worker %d retired; %d workers", gone.index, len(self.workers))

    async def _keep(self, worker: Worker) -> None:
        """Run one worker until the supervisor stops or it retires, starting it again when it exits."""
        delay = BACKOFF_FIRST
        while not self._stop.is_set() and worker.state != "retiring":
            started = time.monotonic()
            try:
                code = await self._run_once(worker)
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            except OSError as exc:  # no process could be made (out of memory, too many processes)
                how = f"could not be started ({exc.strerror or exc})"
            if self._stop.is_set() or worker.state == "retiring":
                break
            if time.monotonic() - started >= STEADY:
                delay = BACKOFF_FIRST
            log.warning("worker %d %s; starting it again in %.1f s", worker.index, how, delay)
            worker.state, worker.restarts = "restarting", worker.restarts + 1
            self.carried = merge_families({0: self.carried, 1: worker.last_counts})
            worker.last_counts = []
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            delay = min(delay * 2, BACKOFF_MAX)
        worker.state = "stopped"

    async def _run_once(self, worker: Worker) -> int:
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                *self._command(worker, theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                # its own process group: a Ctrl-C in the terminal reaches the supervisor only, which
                # stops the workers itself (a worker stopping on its own would be started again)
                process_group=0,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()  # the worker holds its own copy; ours alone would hide its death
        worker.process, worker.channel = process, SupervisorEnd(ours)
        if worker.state == "retiring":  # told to retire while it was being started
            self._signal(worker, RETIRE)
        else:
            worker.state = "running"
        if self._stop.is_set():  # stopping began while it was being started
            self._signal(worker, signal.SIGTERM if worker.index == 0 else RETIRE)
        log.info(
            "worker %d started: pid %d, broker client id %s, spool %s",
            worker.index,
            process.pid,
            worker.clientid,
            worker.spool,
        )
        try:
            return await process.wait()
        finally:
            worker.channel.close()

    def _command(self, worker: Worker, control_fd: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bridge",
            "run",
            "-c",
            str(self.paths.config),
            "-r",
            str(self.paths.rules),
            "--workers",
            str(len(self.workers)),
            "--worker-index",
            str(worker.index),
            "--control-fd",
            str(control_fd),
            "--supervisor-pid",
            str(os.getpid()),
        ]

    def _signal(self, worker: Worker, sig: signal.Signals) -> None:
        if worker.alive:
            assert worker.process is not None
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(sig)

    def _reload(self) -> None:
        log.info("reloading the rules in every worker")
        for worker in self.workers:
            self._signal(worker, signal.SIGHUP)

    # -- /metrics and /healthz -----------------------------------------------

    async def _ask(self, worker: Worker, request: str) -> Any:
        """The worker's answer, or None when it is not running or does not answer."""
        if not worker.alive or worker.channel is None:
            return None
        try:
            return await worker.channel.ask(request)
        except (OSError, TimeoutError, ValueError) as exc:
            log.warning("worker %d did not answer %s: %s", worker.index, request, exc or type(exc).__name__)
            return None

    async def metrics_text(self) -> str:
        answers = await asyncio.gather(*(self._ask(worker, "metrics") for worker in self.workers))
        per_worker: dict[int, list[Family]] = {}
        for worker, answer in zip(self.workers, answers, strict=True):
            if answer is not None:
                per_worker[worker.index] = families_from_json(answer)
                worker.last_counts = counts_only(per_worker[worker.index])
        return render_families(merge_families(per_worker, self.carried) + self._own_families(per_worker))

    def _own_families(self, answered: dict[int, list[Family]]) -> list[Family]:
        workers = Family("hookbridge_workers", "gauge", "Worker processes configured (run --workers N)")
        workers.samples = [Sample(workers.name, {}, len(self.workers))]
        up = Family("hookbridge_worker_up", "gauge", "1 while the worker runs and answers the supervisor", "each")
        up.samples = [Sample(up.name, {"worker": str(w.index)}, int(w.index in answered)) for w in self.workers]
        restarts = Family("hookbridge_worker_restarts_total", "counter", "Times the supervisor started a worker again")
        restarts.samples = [Sample(restarts.name, {"worker": str(w.index)}, w.restarts) for w in self.workers]
        events = Family(
            "hookbridge_worker_events_total",
            "counter",
            "Events each worker received from the broker since it started (how the broker shares them out)",
            "each",
        )
        for index, families in sorted(answered.items()):
            received = sum(s.value for f in families if f.name == "hookbridge_events_total" for s in f.samples)
            events.samples.append(Sample(events.name, {"worker": str(index)}, received))
        return [workers, up, restarts, events]

    async def health(self) -> tuple[bool, dict[str, Any]]:
        answers = await asyncio.gather(*(self._ask(worker, "health") for worker in self.workers))
        states: dict[int, dict[str, Any]] = {}
        for worker, answer in zip(self.workers, answers, strict=True):
            state: dict[str, Any] = {
                "state": worker.state,
                "pid": worker.process.pid if worker.alive and worker.process is not None else None,
                "clientid": worker.clientid,
                "restarts": worker.restarts,
                "ready": bool(answer and answer.get("ready")),
            }
            if answer is not None:
                state["health"] = answer.get("detail")
            states[worker.index] = state
        return combined_health(states)


def supervise(paths: Paths, config: Config, workers: int) -> None:
    """Run the supervisor until SIGTERM / SIGINT and every worker has stopped."""
    asyncio.run(Supervisor(paths, config, workers).run())
