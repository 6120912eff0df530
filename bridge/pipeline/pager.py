"""Paged offline fetch: the next page goes out once the previous one is acked.

`max_returned_count` bounds what one fetch sends; nothing is skipped, because
the rest follows page by page. A page is done when every QoS 1/2 message in it
has been acked by the subscriber; the fetch then runs again from the last id
it considered (the job's `cursor`), as a new job through the same runner.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.backend import Job, Pager
from bridge.events import ClientConnected, Event, MessageAcked, SessionSubscribed, SessionUnsubscribed

log = logging.getLogger(__name__)

Resubmit = Callable[[Job], Coroutine[Any, Any, None]]


@dataclass
class _Page:
    job: Job
    last: str
    pending: set[str]


class FetchPager(Pager):
    def __init__(self, resubmit: Resubmit, max_tracked: int = 100_000) -> None:
        self._resubmit = resubmit
        # clientid -> (filter, rule id) -> the page waiting for acks
        self._pages: dict[str, dict[tuple[str, str], _Page]] = defaultdict(dict)
        self._max = max_tracked
        self._tasks: set[asyncio.Task[None]] = set()

    def track(self, job: Job, delivered: Sequence[tuple[str, int]], last: str) -> None:
        event = job.event
        assert isinstance(event, SessionSubscribed)
        pending = {msgid for msgid, qos in delivered if qos > 0}
        if not pending:  # QoS 0 only: nothing to wait for
            self._continue(job, last)
            return
        if self.paging >= self._max:
            log.warning(
                "fetch pager: %d fetches paging already; %s waits for its next subscription", self._max, event.clientid
            )
            return
        self._pages[event.clientid][(event.topic, job.rule.id)] = _Page(job, last, pending)

    def _continue(self, job: Job, last: str) -> None:
        follow_up = Job(job.rule, job.event, cursor=last)
        task = asyncio.get_running_loop().create_task(self._resubmit(follow_up))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def waits_for(self, clientid: str) -> bool:
        """Whether a fetch of this client waits for its acks to send the next page."""
        return bool(self._pages.get(clientid))

    def observe(self, event: Event) -> None:
        """Feed every broker event through here before the rules run."""
        pages = self._pages.get(event.clientid)
        if not pages:
            return
        if isinstance(event, MessageAcked):
            for key, page in list(pages.items()):
                if event.msgid in page.pending:
                    page.pending.discard(event.msgid)
                    if not page.pending:
                        del pages[key]
                        self._continue(page.job, page.last)
        elif isinstance(event, SessionUnsubscribed):
            for key in [k for k in pages if k[0] == event.topic]:
                del pages[key]
        elif isinstance(event, ClientConnected) and event.clean_session:
            pages.clear()  # a clean session starts over: its old fetches are gone
        if not pages:
            self._pages.pop(event.clientid, None)

    @property
    def resubmitting(self) -> bool:
        """A next page is on its way into a runner."""
        return bool(self._tasks)

    @property
    def paging(self) -> int:
        return sum(len(pages) for pages in self._pages.values())
