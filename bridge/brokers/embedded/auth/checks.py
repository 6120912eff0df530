"""Slow password checks (bcrypt, PBKDF2 with many iterations) off the event loop, shared fairly
between the addresses clients connect from (docs/security.md#what-each-limit-bounds).

The checks of one address wait in their own queue, bounded (`per_address`, the running ones
included): past it a CONNECT from that address is refused without hashing (CONNACK 3 /
0x89 server busy, counted as `login_busy`). A few worker threads (`workers`, about one per core:
hashing is CPU work, more threads only share the same cores) take the next check from each
address in turn, so a login from another address waits for the checks already running and at
most one more per other address, not for every wrong password queued before it. Before, every
check went to asyncio's default thread pool in arrival order: 40 connections sending wrong
passwords (bcrypt) kept a good login waiting past the connect timeout.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import HookbridgeError

PER_ADDRESS = 8  # checks of one address waiting or running
WORKERS = max(1, min(4, os.cpu_count() or 1))


class TooManyChecks(HookbridgeError):
    """The address already has `per_address` checks waiting or running."""

    def __init__(self, address: str, waiting: int) -> None:
        super().__init__(f"{waiting} password checks from {address} already waiting")
        self.address, self.waiting = address, waiting


@dataclass(slots=True)
class _Address:
    queued: deque[tuple[asyncio.Future[bool], Callable[..., bool], tuple[Any, ...]]] = field(default_factory=deque)
    running: int = 0

    @property
    def pending(self) -> int:
        return len(self.queued) + self.running


class FairChecks:
    def __init__(self, workers: int = WORKERS, per_address: int = PER_ADDRESS) -> None:
        self.workers = workers
        self.per_address = per_address
        self._executor: ThreadPoolExecutor | None = None  # made by the first slow check
        self._running = 0
        # Addresses with checks waiting, in turn order: the front one goes next, then to the back
        # if it has more; an address with no check waiting joins at the front.
        self._turns: OrderedDict[str, _Address] = OrderedDict()
        self._addresses: dict[str, _Address] = {}  # every address with a check waiting or running
        self.done = 0  # checks run, for /metrics-style inspection and the tests

    def pending(self, address: str) -> int:
        entry = self._addresses.get(address)
        return entry.pending if entry is not None else 0

    async def run(self, address: str, check: Callable[..., bool], *args: Any) -> bool:
        """`check(*args)` in a worker thread, in `address`'s turn; TooManyChecks if its queue is full."""
        entry = self._addresses.get(address)
        if entry is None:
            entry = self._addresses[address] = _Address()
        elif entry.pending >= self.per_address:
            raise TooManyChecks(address, entry.pending)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry.queued.append((future, check, args))
        if address not in self._turns:
            # Before the addresses that have had a turn: one that just had its turn is at the back.
            self._turns[address] = entry
            self._turns.move_to_end(address, last=False)
        self._dispatch()
        try:
            return await future
        finally:
            if future.cancelled():  # the connection went away while its check waited
                self._forget(address, entry)

    def _dispatch(self) -> None:
        while self._running < self.workers and self._turns:
            address, entry = self._turns.popitem(last=False)
            future, check, args = entry.queued.popleft()
            if entry.queued:
                self._turns[address] = entry  # its next check waits for every other address's
            if future.done():  # cancelled while waiting
                self._forget(address, entry)
                continue
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="password-check")
            entry.running += 1
            self._running += 1
            work = asyncio.wrap_future(self._executor.submit(check, *args))
            work.add_done_callback(functools.partial(self._finished, address, entry, future))

    def _finished(
        self, address: str, entry: _Address, future: asyncio.Future[bool], work: asyncio.Future[bool]
    ) -> None:
        entry.running -= 1
        self._running -= 1
        self.done += 1
        self._forget(address, entry)
        if not future.done():
            if work.cancelled():
                future.cancel()
            elif (error := work.exception()) is not None:
                future.set_exception(error)
            else:
                future.set_result(work.result())
        self._dispatch()

    def _forget(self, address: str, entry: _Address) -> None:
        if not entry.pending and self._addresses.get(address) is entry:
            del self._addresses[address]
            self._turns.pop(address, None)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
