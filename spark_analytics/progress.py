"""Progress while a report runs: one line per step on stderr, and Spark's task counts for long steps."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark import SparkContext

POLL_SECONDS = 2.0


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.context: SparkContext | None = None

    def say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.done += 1
        label = f"[{self.done}/{self.total}] {what}"
        self.say(f"{label} ...")
        began = time.monotonic()
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(label, stop), daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
        self.say(f"{label}: done in {time.monotonic() - began:.1f}s")

    def _watch(self, label: str, stop: threading.Event) -> None:
        """Every few seconds of a long step: the running Spark stages' finished / total tasks."""
        last = ""
        while not stop.wait(POLL_SECONDS):
            if self.context is None:
                continue
            tracker = self.context.statusTracker()
            stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            tasks = [(s.numCompletedTasks, s.numTasks) for s in stages if s is not None]
            if not tasks:
                continue
            line = f"{label}: tasks {sum(d for d, _ in tasks)}/{sum(t for _, t in tasks)}"
            if line != last:
                self.say(line)
                last = line

    def finish(self, text: str) -> None:
        self.say(f"{text} ({time.monotonic() - self.started:.1f}s in all)")
