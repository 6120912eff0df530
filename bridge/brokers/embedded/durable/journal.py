"""What the broker writes to the durable store, when, and how it rebuilds its sessions from it.

A durable session (durable sessions on, expiry > 0) does not copy the messages it is owed: it
keeps a *position* in the message log (every logged message after it that its subscriptions
match is still owed to it; none before it is, but its in-flight window) and the list of its
in-flight messages by sequence number and packet id. So 1,000 durable subscribers of a topic
cost one copy of each message plus one small row each, rewritten when they acknowledge.

Writes are batched: everything the broker does in one event-loop step goes in one commit,
scheduled with `call_soon`. A publisher's PUBACK waits for the commit that holds its message
(`committed()`), as it waits for the rules (docs/architecture.md#acknowledged-means-kept).

At start `restore()` reads back the sessions' metadata (subscriptions, position, will and expiry
timers, QoS 2 ids) and the retained messages; then, while they are small enough
(broker.durable_preload), every session's queue in one pass over the log (preload.py), as
Mosquitto reads its database at start. Else the queues stay in the store: the listener opens in
about the time reading the sessions' rows takes, whatever the size of the log, and a session's
queue is read back (`load`) when it is first needed: its client reconnects, a fetch delivers to it, the API
subscribes it. A load reads only what may concern the session (store.logged_for: by the log's
topic index, the entries after its position on topics its filters can match; by `routes`, those
given to it alone), plus what is logged but not committed yet, and routes them again to it
alone, oldest first: a logged entry (routed by subscription) goes to it as the router gave it
(its subscriptions' live_from, no-local, QoS), a `targets` entry as it was given. So its queue
is what it was, in the same order; its in-flight messages get their packet ids back and go out
again with DUP set when the client returns. Until its load, a message the router routes to the
session is logged (as routed by subscription, with a `routes` row for it) but not queued: the
load reads it from the log, once, in order. Expiry of a session that was never loaded drops it
unread.

What such a session is owed is counted without loading it (owed.py): its backlog is matched
once in the store in the first commits after the start (store.Owe), each later message adds an
entry; past the queue limits its oldest entries are dropped as a loaded queue's are, and the
trim passes what it is not owed (`trim_bound`, `_trim`). Once counted, a load reads only its
`routes` rows, a page at a time (`load_paged` yields to the loop between pages on a reconnect).

A loaded session does not hold the trim back while its client is away (offline _ABSENT_AFTER
with messages queued): its entries below the trim get `routes` rows, as an unloaded session's
have, and are released once it has taken them (`_kept`).

A QoS 2 PUBLISH's packet id is committed with its message (`hold_incoming`): a resend after a
crash is recognised. A session whose rows cannot be read is refused at its CONNECT
(`check_readable`), logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import orjson

from bridge.brokers.embedded.codec import EMPTY, Properties, Will
from bridge.brokers.embedded.codec import properties as mqtt_properties
from bridge.brokers.embedded.codec.kinds import WILL, PacketType
from bridge.brokers.embedded.durable.owed import Owed
from bridge.brokers.embedded.durable.preload import gather
from bridge.brokers.embedded.durable.store import (
    FORMAT,
    RECOVERY,
    Batch,
    DurableStore,
    MessageRow,
    Owe,
    Owing,
    UnreadableSession,
)
from bridge.brokers.embedded.router import Message, Retained, Router, Target
from bridge.brokers.embedded.sessions import (
    MESSAGE_OVERHEAD,
    NEVER,
    IncomingQos2,
    Outgoing,
    PendingWill,
    SessionState,
    Subscription,
)
from bridge.brokers.embedded.stream import Kept
from bridge.brokers.embedded.throttle import Throttle
from bridge.brokers.eventloop import running_loop

log = logging.getLogger("bridge.brokers.embedded")

# How often the log is trimmed below the smallest session position (one range delete).
_TRIM_INTERVAL = 1.0
# A store that refuses one commit (a full disk) refuses the retries too, several a second: one
# error line per interval says how many it stands for.
COMMIT_FAILURE_REPORT_INTERVAL = 10.0
# After a failed commit the store counts as unwritable (/healthz 503) until a commit works and at
# least this long has passed since the last failure: a nearly full disk takes the small commits
# (a session's state) and refuses the big ones (the messages), and /healthz must not flap to ready
# between them.
FAILURE_HOLD = 30.0
# A loaded durable session offline this long with queued messages stops holding the log's trim
# back: its entries below the trim get `routes` rows (as a session not loaded has), so one device
# that stays away does not keep the whole log after its oldest message. Longer than a reconnect
# storm lasts: the sessions back by then cost no rows.
_ABSENT_AFTER = 10.0
# Log entries read back per query when a session is loaded.
_PAGE = 256
# Restored sessions whose backlog one commit matches (store.Owe) after a start.
_OWE_PER_COMMIT = 100


class Restorer(Protocol):
    """What `Journal.restore` rebuilds sessions into (broker.Broker)."""

    router: Router
    states: dict[str, SessionState]

    def restored_session(
        self, clientid: str, expiry: int, username: str | None, owner: str | None, level: int
    ) -> SessionState: ...

    def delay_will(self, state: SessionState, pending: PendingWill, delay: float) -> None: ...

    def expire(self, state: SessionState) -> None: ...


def _props(properties: Properties) -> bytes | None:
    return None if properties is EMPTY else mqtt_properties.encode(properties)


def _unprops(data: bytes | None, context: int = PacketType.PUBLISH) -> Properties:
    if not data:
        return EMPTY
    return mqtt_properties.decode(data, 0, len(data), context)[0]


def _to_wall(deadline: float, now_wall: float, now_mono: float) -> float:
    """A monotonic deadline as a wall-clock time (0 stays 0: never)."""
    return now_wall + (deadline - now_mono) if deadline else 0.0


def _to_mono(deadline: float, now_wall: float, now_mono: float) -> float:
    return now_mono + (deadline - now_wall) if deadline else 0.0


class Journal:
    def __init__(
        self, store: DurableStore, states: dict[str, SessionState], *, interval: float = 0.002, preload: int = 0
    ) -> None:
        self.store = store
        # Restored queues up to this many bytes together are read at start (preload.py); 0: never.
        self.preload = preload
        self.states = states
        self.commit_failures = 0
        self._failure_reports = Throttle(COMMIT_FAILURE_REPORT_INTERVAL)
        self.last_error = ""  # why the last commit failed, for /healthz (durable/health.py); kept after
        self._failed_at = 0.0  # when it failed (monotonic)
        self._recovered = True  # a commit worked since
        # Durable sessions whose rows cannot be read (a damaged store): client id -> why.
        self.unreadable: dict[str, str] = {}
        # At most one commit per `interval` (broker.durable_commit_interval): under load a commit
        # holds many messages and acknowledgements; when idle the first change commits at once.
        self.interval = interval
        self._batch = Batch()
        self._dirty: set[str] = set()  # position, in-flight window changed
        self._dirty_whole: set[str] = set()  # subscriptions, will, expiry changed too
        self._committed: asyncio.Future[None] | None = None
        self._flush_at: asyncio.TimerHandle | asyncio.Handle | None = None
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="durable-store")
        self._writing = False
        self._in_write: Batch | None = None  # the batch the writer thread is committing
        self._writing_done: asyncio.Future[None] | None = None  # done when that commit is
        self._last_flush = 0.0
        self._last_trim = 0.0
        self._trimmed_to = 0
        # Sessions that had `routes` rows kept by a trim (owed while not loaded): their rows go
        # once they are loaded and past them, or gone (Batch.release).
        self._kept: set[str] = set()
        self._released: dict[str, int] = {}  # of those: their rows up to this are gone already
        self._away: dict[str, float] = {}  # loaded sessions offline holding the trim back: since when
        self._owe: list[Owe] = []  # Owe jobs for the next commit (restore)
        self._trim_timer: asyncio.TimerHandle | None = None

    # -- writing ---------------------------------------------------------------------

    def reserve(self) -> int:
        return self.store.reserve()

    def log(
        self,
        seq: int,
        message: Message,
        *,
        routed: Sequence[str] = (),
        targets: dict[str, Target] | None = None,
    ) -> None:
        """Add a message to the log (committed with the current batch): `routed`, the durable
        sessions it went to by subscription (a load finds it by the log's topic index and
        matches it again); `targets`, those it was given to by name (a `routes` row each)."""
        now_wall, now_mono = time.time(), time.monotonic()
        row: MessageRow = (
            seq,
            message.msgid,
            message.topic,
            message.payload,
            message.qos,
            int(message.retain),
            message.from_clientid,
            _props(message.properties),
            _to_wall(message.expires, now_wall, now_mono),
            int(bool(routed)),
            json.dumps(targets, separators=(",", ":")) if targets else None,
        )
        batch = self._batch
        batch.messages.append(row)
        if targets:
            batch.routes.extend((seq, clientid) for clientid in targets)
        size = len(message.topic) + len(message.payload) + MESSAGE_OVERHEAD
        for by_name, clientids in ((False, routed), (True, targets or ())):
            for clientid in clientids:
                state = self.states.get(clientid)
                if state is not None and state.unloaded is not None:  # owed while not loaded: owed.py
                    if not by_name:
                        batch.routes.append((seq, clientid))
                    state.unloaded["owed"].add(seq, size)
                    self._limit(state)
        self._soon()

    def _limit(self, state: SessionState) -> None:
        """The queue limits for a session not loaded: its oldest owed entries past them go."""
        assert state.unloaded is not None
        for seq, reason in state.unloaded["owed"].over(state.limits):
            self._batch.unroutes.append((seq, state.clientid))
            state.count_drop(reason)
            # its owed_to goes with the drop: a restart does not match the entry to it again
            self.touch(state)

    def retain(self, retained: Retained) -> None:
        expires = _to_wall(retained.expires, time.time(), time.monotonic())
        self._batch.retained[retained.topic] = (
            retained.topic,
            retained.msgid,
            retained.payload,
            retained.qos,
            retained.from_clientid,
            _props(retained.properties),
            expires,
        )
        self._soon()

    def unretain(self, topic: str) -> None:
        self._batch.retained[topic] = None
        self._soon()

    def touch(self, state: SessionState, *, whole: bool = False) -> None:
        """The session changed: its position or in-flight window, or (`whole`) more."""
        if state.durable or state.persisted:
            if self.states.get(state.clientid) is not state:  # it ended: what it was owed goes
                self._batch.release.append((state.clientid, self.store.head))
                self._kept.discard(state.clientid)
            self._dirty.add(state.clientid)
            if whole:
                self._dirty_whole.add(state.clientid)
            self._soon()

    def committed(self) -> asyncio.Future[None] | None:
        """Done once what is pending now is committed, the commit being written included;
        None when nothing is pending."""
        if not self._batch and not self._dirty:
            return self._writing_done  # None unless a commit is being written
        if self._committed is None:
            self._committed = running_loop().create_future()
        return self._committed

    def _soon(self) -> None:
        if self._flush_at is None:
            loop = running_loop()
            wait = self._last_flush + self.interval - loop.time()
            self._flush_at = loop.call_soon(self.flush) if wait <= 0 else loop.call_later(wait, self.flush)

    def flush(self) -> None:
        """Hand everything pending to the writer thread as one transaction.

        One commit is in flight at a time: what happens meanwhile goes into the next one (group
        commit), and SQLite's slow moments (a checkpoint) stall the writer, not the event loop.
        """
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        if self._writing:
            return  # the commit in flight calls flush again when it is done
        loop = running_loop()
        self._last_flush = loop.time()
        batch, self._batch = self._batch, Batch()
        dirty, self._dirty = self._dirty, set()
        whole, self._dirty_whole = self._dirty_whole, set()
        head = self.store.head
        for clientid in dirty:
            state = self.states.get(clientid)
            if state is not None and state.durable:
                if clientid in whole or not state.persisted:
                    batch.sessions[clientid] = _json(snapshot(state))
                batch.positions[clientid] = _json(progress(state, head))
                state.persisted = True
            else:
                batch.sessions[clientid] = batch.positions[clientid] = None
                if state is not None:
                    state.persisted = False
        # Restored sessions' backlogs, a share per commit: each commit stays short (publishers'
        # acks wait for commits), the rest follows in the next ones.
        batch.owe, self._owe = self._owe[:_OWE_PER_COMMIT], self._owe[_OWE_PER_COMMIT:]
        now = time.monotonic()
        if now - self._last_trim >= _TRIM_INTERVAL:
            self._last_trim = now
            self._trim(batch, head, now)
        else:  # the next trim comes even if nothing else happens
            self._trim_in(_TRIM_INTERVAL - (now - self._last_trim))
        future, self._committed = self._committed, None
        if not batch:
            if future is not None and not future.done():
                future.set_result(None)
            return
        if future is None:  # for whoever asks for `committed` while it is being written
            future = loop.create_future()
        self._writing = True
        self._in_write, self._writing_done = batch, future
        written = loop.run_in_executor(self._writer, self.store.write, batch)
        written.add_done_callback(lambda done: self._written(done, future, dirty, batch))

    def _trim_in(self, delay: float) -> None:
        """A trim in `delay` seconds at the latest (a timer due sooner stays)."""
        loop = running_loop()
        timer = self._trim_timer
        if timer is not None:
            if timer.when() <= loop.time() + delay:
                return
            timer.cancel()
        self._trim_timer = loop.call_later(delay, self._trim_due)

    def _trim_due(self) -> None:
        """A trim is due and nothing was committed since the last one (a burst then silence)."""
        self._trim_timer = None
        if self._writing:  # the commit in flight is followed by this one
            self._trim_timer = running_loop().call_later(_TRIM_INTERVAL / 10, self._trim_due)
        else:
            self.flush()

    def _trim(self, batch: Batch, head: int, now: float) -> None:
        """Trim the log past what is owed to nobody: up to the bound of the loaded sessions, but
        for the `routes` rows of the sessions not loaded (`owing`) and of those loaded but away
        (their entries below the bound get rows now); release the rows of sessions that were owed
        entries below the trim and are loaded past them, or gone."""
        bound, away = self.trim_bound(now)
        going = [since for since in self._away.values() if now - since < _ABSENT_AFTER]
        if going:  # a trim when the first of them counts as away
            self._trim_in(min(going) + _ABSENT_AFTER - now)
        if bound > self._trimmed_to:
            batch.owing = [clientid for clientid, state in self.states.items() if state.unloaded is not None]
            for absentee, first in away:
                if first >= bound:
                    continue  # nothing of it below the trim that has no row yet
                entries = _entries_in(absentee, self._trimmed_to, bound)
                batch.routes.extend((seq, absentee.clientid) for seq in entries)
                batch.owing.append(absentee.clientid)
            batch.trim_from, batch.trim_to = self._trimmed_to, bound
            self._kept.update(batch.owing)
            self._trimmed_to = bound
        for clientid in list(self._kept):
            state = self.states.get(clientid)
            if state is None or not state.durable:
                batch.release.append((clientid, head))
                self._kept.discard(clientid)
                self._released.pop(clientid, None)
            elif state.unloaded is None:  # loaded: up to its oldest message in flight or queued
                upto = min(_first_above(state, 0, head), self._trimmed_to)
                if upto > self._released.get(clientid, -1):  # else nothing of it is there to go
                    batch.release.append((clientid, upto))
                    self._released[clientid] = upto
                if upto >= self._trimmed_to:
                    self._kept.discard(clientid)
                    self._released.pop(clientid, None)

    def _written(
        self, done: asyncio.Future[Owing], future: asyncio.Future[None] | None, dirty: set[str], batch: Batch
    ) -> None:
        self._writing = False
        self._in_write = self._writing_done = None  # committed, or not (then its publishers get no ack)
        error = done.exception()
        if error is None:
            for clientid, rows in done.result().items():  # Owe jobs: a backlog now counted
                state = self.states.get(clientid)
                if state is not None and state.unloaded is not None:
                    state.unloaded["owed"].add_backlog(rows)
                    self._limit(state)
                    state.touch()  # its owed_to: its backlog is in `routes`
        if error is not None:
            self._owe = batch.owe + self._owe  # matched again with the next commit
            self.commit_failures += 1
            self.last_error, self._failed_at, self._recovered = str(error), time.monotonic(), False
            skipped = self._failure_reports.due()
            if skipped is not None:
                more = f" ({skipped} more failed commits since the last report)" if skipped else ""
                log.error("%s: not committed, the messages of this step are not acknowledged%s", error, more)
            self._dirty |= dirty  # the sessions are written again with the next commit
            self._dirty_whole |= dirty
            if future is not None and not future.done():
                future.cancel()
        else:
            self._recovered = True
            if future is not None and not future.done():
                future.set_result(None)
        if self._batch or self._dirty or self._owe:
            self._soon()

    def failing(self, now: float | None = None) -> str:
        """Why the store counts as unwritable, "" when it does not: its last commit failed, or
        one failed less than FAILURE_HOLD seconds ago."""
        if not self.last_error:
            return ""
        if not self._recovered:
            return self.last_error
        ago = (time.monotonic() if now is None else now) - self._failed_at
        if ago >= FAILURE_HOLD:
            return ""
        return f"{self.last_error} ({ago:.0f} s ago; ready again {FAILURE_HOLD:.0f} s after the last failed commit)"

    def trim_bound(self, now: float) -> tuple[int, list[tuple[SessionState, int]]]:
        """The highest sequence number no durable session needs by its position, and the loaded
        sessions that are away (offline _ABSENT_AFTER seconds with messages queued), each with the
        bound it would set: they do not hold it back, their entries below it get `routes` rows
        (`_trim`). A session not loaded
        whose backlog is counted (owed.py) holds its entries by its `routes` rows too, and so does
        a loaded one for the entries it was owed below the last trim (`_kept`)."""
        head, held_below = self.store.head, self._trimmed_to
        bound = head
        away: list[tuple[SessionState, int]] = []
        offline: dict[str, float] = {}
        for state in self.states.values():
            if not state.durable:
                continue
            unloaded = state.unloaded
            if unloaded is not None:
                if not unloaded["owed"].complete:  # until then its entries are held by its position
                    bound = min(bound, state.position, *(entry[0] - 1 for entry in unloaded["inflight"]))
                continue
            kept = state.clientid in self._kept
            first = _first_above(state, held_below if kept else 0, head)
            if first < head and state.conn is None:
                since = offline[state.clientid] = self._away.get(state.clientid, now)
                if now - since >= _ABSENT_AFTER:
                    away.append((state, first))
                    continue
            bound = min(bound, first)
        self._away = offline
        return bound, away

    def close(self) -> None:
        """Write what is pending and close the store (at stop: the loop waits for the writer)."""
        self._writer.shutdown(wait=True)  # the commit in flight ends first
        self._writing = False
        self._in_write = self._writing_done = None
        self._dirty_whole |= self._dirty
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="durable-store")
        self.flush()
        self._writer.shutdown(wait=True)
        if self._trim_timer is not None:
            self._trim_timer.cancel()
            self._trim_timer = None
        self.store.close()

    # -- reading back ----------------------------------------------------------------

    def restore(self, broker: Restorer) -> None:
        """Rebuild the durable sessions (not their queues: `load`) and the retained messages (at start)."""
        started = time.monotonic()
        now_wall, now_mono = time.time(), time.monotonic()
        for row in self.store.retained_rows():
            topic, msgid, payload, qos, sender, props, expires = row
            deadline = _to_mono(expires, now_wall, now_mono)
            if deadline and deadline <= now_mono:
                self.unretain(topic)
                continue
            broker.router.retained[topic] = Retained(msgid, topic, payload, qos, sender, _unprops(props), deadline)
        bodies: dict[str, dict[str, Any]] = {}
        router = broker.router
        for clientid, body, progress_body in self.store.sessions():
            try:
                data = json.loads(body)
                data.update(json.loads(progress_body) if progress_body else _NOTHING_OWED)
            except ValueError as exc:  # a damaged row: refused at its CONNECT (check_readable)
                self._unreadable(clientid, f"its row is not readable: {exc}")
                continue
            bodies[clientid] = data
            state = broker.restored_session(clientid, data["expiry"], data["username"], data["owner"], data["level"])
            state.persisted = True
            state.position = data["position"]
            for full, qos, live_from, no_local, rap, identifier in data["subs"]:
                router.subscribe(state, Subscription(full, qos, live_from, no_local, rap, identifier))
            for packet_id in data["incoming"]:
                state.hold_incoming_qos2(packet_id, IncomingQos2(None, acked=True))
            owed_to = data.get("owed_to", 0)
            state.unloaded = {"inflight": data["inflight"], "owed": Owed(), "owed_to": owed_to}
        queued = self._preload(router) if self.preload else None
        if queued is None:  # each queue read back when first needed; what each is owed counted meanwhile
            for clientid in bodies:
                state = broker.states[clientid]
                assert state.unloaded is not None
                filters = [full for full in state.subscriptions if not full.startswith("$share/")]
                inflight = [entry[0] for entry in state.unloaded["inflight"]]
                after, match_after = state.position, max(state.position, state.unloaded["owed_to"])
                self._owe.append(Owe(clientid, after, match_after, self.store.head, filters, inflight))
        for clientid, data in bodies.items():
            self._resume_timers(broker, broker.states[clientid], data, now_wall)
        if self._owe:
            self._soon()  # their backlogs counted in the first commit (owed.py)
        log.info(
            "durable store %s: %d sessions, %d retained messages restored in %.2f s%s (%s)",
            self.store.path,
            len(bodies),
            len(broker.router.retained),
            time.monotonic() - started,
            f", the store migrated to format {FORMAT}" if self.store.migrated else "",
            "each session's queue is read back from the log when it is first needed"
            if queued is None
            else f"their queues read at once: {queued} messages",
        )

    def _preload(self, router: Router) -> int | None:
        """Every restored session's queue read in one pass (preload.py); how many messages were
        queued, or None when they are over the budget or the read failed (then each session is
        loaded when first needed, and a session whose rows cannot be read is refused then)."""
        waiting = {clientid: state for clientid, state in self.states.items() if state.unloaded is not None}
        try:
            found = gather(self.store, router, waiting, self.preload)
        except sqlite3.Error as exc:
            log.warning("durable store %s: the queues could not be read at once (%s)", self.store.path, exc)
            return None
        if found is None:
            log.info(
                "durable store %s: the restored queues are over broker.durable_preload (%d bytes): each is read"
                " back when first needed",
                self.store.path,
                self.preload,
            )
            return None
        queued = 0
        for clientid, state in waiting.items():
            stored = state.unloaded
            assert stored is not None
            in_flight = [found.in_flight[seq] for seq, *_ in stored["inflight"] if seq in found.in_flight]
            queued += self._queue_read(router, state, stored, found.rows.pop(clientid, {}), in_flight)
        return queued

    def check_readable(self, clientid: str) -> None:
        """Raise UnreadableSession when what the store holds of this session cannot be read."""
        why = self.unreadable.get(clientid)
        if why is not None:
            raise UnreadableSession(f"durable store {self.store.path}: session of client {clientid!r}: {why}")

    def _unreadable(self, clientid: str, why: str) -> None:
        """Mark a session unreadable (its CONNECTs are refused); logged once per session."""
        if clientid not in self.unreadable:
            log.error(
                "durable store %s: the session of client %r cannot be read (%s); its CONNECTs are refused"
                " with server unavailable until the store is repaired (%s)",
                self.store.path,
                clientid,
                why,
                RECOVERY,
            )
        self.unreadable[clientid] = why

    def forget_unreadable(self, clientid: str) -> None:
        """A clean start of the client id: its old session is given up, the new one is written."""
        self.unreadable.pop(clientid, None)

    def load(self, router: Router, state: SessionState) -> int:
        """Read back the queue of a session restored at start (see the module's docstring): its
        in-flight window and the log entries after its position that concern it, at once.
        Returns how many messages were queued. A client's reconnect uses `load_paged`."""
        stored = state.unloaded
        if stored is None:
            return 0
        self.check_readable(state.clientid)
        with self._reading(state):
            if stored["owed"].complete:  # what it is owed has its `routes` rows: only those
                rows = {row[0]: row for row in self._owed_rows(state.clientid, state.position)}
            else:
                filters = [full for full in state.subscriptions if not full.startswith("$share/")]
                rows = self.store.logged_for(state.clientid, state.position, filters)
            in_flight = self.store.messages_at([entry[0] for entry in stored["inflight"]])
        return self._queue_read(router, state, stored, rows, in_flight)

    async def load_paged(self, router: Router, state: SessionState) -> int:
        """`load`, reading what the session is owed by its `routes` rows a page at a time and
        letting the event loop run between pages (a queue of 1 MB of 2 KB messages: two pages),
        so a returning client with a long queue does not hold every other client up."""
        stored = state.unloaded
        if stored is None or not stored["owed"].complete:
            return self.load(router, state)
        clientid = state.clientid
        self.check_readable(clientid)
        rows: dict[int, MessageRow] = {}
        after = state.position
        while True:
            with self._reading(state):
                page = self.store.owed_rows(clientid, after, _PAGE)
            rows.update((row[0], row) for row in page)
            if len(page) < _PAGE:
                break  # the last page, in the same step as the rest: nothing logged in between
            after = page[-1][0]
            await asyncio.sleep(0)
            if state.unloaded is not stored:
                return 0  # loaded meanwhile (the API): nothing more to do
        with self._reading(state):
            in_flight = self.store.messages_at([entry[0] for entry in stored["inflight"]])
        return self._queue_read(router, state, stored, rows, in_flight)

    @contextlib.contextmanager
    def _reading(self, state: SessionState) -> Iterator[None]:
        """Reads of a session's rows: a damaged page makes it unreadable (refused, logged once)."""
        try:
            yield
        except sqlite3.Error as exc:
            self._unreadable(state.clientid, f"its queue cannot be read: {exc}")
            raise UnreadableSession(
                f"durable store {self.store.path}: session of client {state.clientid!r}: {exc}"
            ) from exc

    def _queue_read(
        self,
        router: Router,
        state: SessionState,
        stored: dict[str, Any],
        rows: dict[int, MessageRow],
        in_flight: list[MessageRow],
    ) -> int:
        """Queue what a load read, with what is logged for the session but not committed yet,
        oldest first (every read is done: from here the session changes)."""
        clientid, after = state.clientid, state.position
        pending: list[MessageRow] = []
        for batch in (self._in_write, self._batch):  # logged, not committed yet (or committing)
            if batch is None or not batch.messages:
                continue
            mine = {seq for seq, routed in batch.routes if routed == clientid}
            pending.extend(row for row in batch.messages if row[0] > after and (row[9] or row[0] in mine))
        for row in pending:
            rows.setdefault(row[0], row)
        owed = stored["owed"]
        if owed.complete:  # what it is owed, to the entry: not those its limits dropped since
            still = {seq for seq, _ in owed.entries}
            rows = {seq: row for seq, row in rows.items() if seq in still}
        now_wall, now_mono = time.time(), time.monotonic()
        state.unloaded = None
        self._restore_inflight(state, stored["inflight"], in_flight + pending, now_wall, now_mono)
        queued = 0
        for seq in sorted(rows):
            row = rows[seq]
            _seq, msgid, topic, payload, qos, retain, sender, props, expires, fanout, targets = row
            deadline = _to_mono(expires, now_wall, now_mono)
            if deadline and deadline <= now_mono:
                continue  # 5.0 message expiry: never delivered once expired
            if fanout:
                message = Message(msgid, topic, payload, qos, bool(retain), sender, _unprops(props), deadline)
                queued += router.replay_for(state, message, seq)
            if targets is not None:
                target = json.loads(targets).get(clientid)
                if target is not None:
                    out_qos, out_retain, filters, ids = target
                    state.enqueue(_outgoing(row, out_qos, out_retain, tuple(filters), tuple(ids), now_wall, now_mono))
                    queued += 1
        return queued

    def _owed_rows(self, clientid: str, after: int) -> list[MessageRow]:
        """Every log entry a session is owed by its `routes` rows, read a page at a time."""
        found: list[MessageRow] = []
        while True:
            page = self.store.owed_rows(clientid, after, _PAGE)
            found += page
            if len(page) < _PAGE:
                return found
            after = page[-1][0]

    def _restore_inflight(
        self,
        state: SessionState,
        inflight: list[list[Any]],
        logged: list[MessageRow],
        now_wall: float,
        now_mono: float,
    ) -> None:
        if not inflight:
            return
        rows: dict[int, MessageRow] = {}
        for entry in logged:
            rows.setdefault(entry[0], entry)
        for seq, packet_id, qos, retain, pubrec, filters, ids in inflight:
            row = rows.get(seq)
            if row is not None:
                message = _outgoing(row, qos, bool(retain), tuple(filters), tuple(ids), now_wall, now_mono)
                message.packet_id, message.pubrec = packet_id, bool(pubrec)
                state.inflight.restore(message)

    @staticmethod
    def _resume_timers(broker: Restorer, state: SessionState, data: dict[str, Any], now_wall: float) -> None:
        """Its will and its expiry, as if its connection (if it had one) ended now."""
        will = _unwill(data["will"]) if data["will"] else None
        if will is not None:
            if data.get("connected", False):
                due = now_wall + min(will.properties.will_delay_interval or 0, state.expiry)
            else:
                due = data["will_due"] or now_wall
            broker.delay_will(state, PendingWill(will, "(before the restart)"), max(0.0, due - now_wall))
        if state.expiry != NEVER:
            offline_until = None if data.get("connected", False) else data.get("expires_at")
            deadline = offline_until or now_wall + state.expiry
            state.expires_at = deadline
            state.expiry_timer = running_loop().call_later(max(0.0, deadline - now_wall), broker.expire, state)


def hold_incoming(state: SessionState, packet_id: int, kept: Kept) -> None:
    """A durable session's QoS 2 PUBLISH was routed (so logged, in the batch being filled): its
    packet id goes into the same commit as the message, so a PUBLISH resent with DUP after a
    kill -9 is recognised and not passed on again (docs/brokers.md#exactly-once).

    Only once the rules kept it (`kept`): an id committed before that would make a resend after
    a crash look done while a rule's write was lost with the process (acknowledged means kept);
    when the rules take longer than the commit, the id goes into the commit after theirs."""
    held = state.incoming_qos2.get(packet_id)
    if held is None:
        return

    def keep(future: Kept = None) -> None:
        if future is None or (not future.cancelled() and future.exception() is None):
            held.acked = True
            state.touch()

    if kept is None or kept.done():
        keep(kept)
    else:
        kept.add_done_callback(keep)


def position(state: SessionState, head: int) -> int:
    """Every logged message after this sequence number that is for the session is still queued."""
    if state.unloaded is not None:
        return state.position  # its queue is still in the log
    for message in state.outbox:
        if message.seq:
            return message.seq - 1
    return head


def _first_above(state: SessionState, floor: int, head: int) -> int:
    """Like `position` for a loaded session, counting only the messages after `floor` (those at
    or below it are held by `routes` rows): its in-flight and queued messages."""
    bound = head
    for message in state.inflight.values():
        if message.seq > floor:
            bound = min(bound, message.seq - 1)
    for message in state.outbox:
        if message.seq > floor:
            return min(bound, message.seq - 1)
    return bound


def _entries_in(state: SessionState, floor: int, upto: int) -> list[int]:
    """The log entries in (floor, upto] of a loaded session's in-flight and queued messages."""
    found = [message.seq for message in state.inflight.values() if floor < message.seq <= upto]
    for message in state.outbox:
        if message.seq > upto:
            break  # the queue is in log order
        if message.seq > floor:
            found.append(message.seq)
    return found


def _json(value: Any) -> str:
    """A session's row: the JSON json.dumps writes compactly (json.loads reads it back), about
    ten times faster (orjson): every CONNECT and every commit of acknowledgements writes one."""
    # Typed here: the compiled build's type check runs without orjson installed (setup.py).
    data: bytes = orjson.dumps(value)
    return data.decode()


# The progress of a session whose positions row is missing: nothing owed (it is written with the
# session's first row, in the same commit, so this is only for a store written otherwise).
_NOTHING_OWED: dict[str, Any] = {"position": 0, "inflight": [], "incoming": []}


def progress(state: SessionState, head: int) -> dict[str, Any]:
    """How far a durable session is (its `positions` row, JSON): rewritten as it acknowledges,
    and at each CONNECT and disconnection (whether it is connected, when it expires offline: a
    reconnect with nothing else changed rewrites this row only; read back over the `sessions`
    row's, which held them before)."""
    connected = state.conn is not None
    expires_at = state.expires_at if not connected else None
    if state.unloaded is not None:
        owed = state.unloaded["owed"]
        return {
            "position": state.position,
            "inflight": state.unloaded["inflight"],
            "incoming": [packet_id for packet_id, held in state.incoming_qos2.items() if held.acked],
            # every entry up to this it is owed has its `routes` row (owed.py)
            "owed_to": head if owed.complete else state.unloaded["owed_to"],
            "connected": connected,
            "expires_at": expires_at,
        }
    return {
        "position": position(state, head),
        "inflight": [
            [m.seq, m.packet_id, m.qos, m.retain, m.pubrec, list(m.filters), list(m.subscription_ids)]
            for m in state.inflight.values()
            if m.seq
        ],
        "incoming": [packet_id for packet_id, held in state.incoming_qos2.items() if held.acked],
        "connected": connected,
        "expires_at": expires_at,
    }


def stored_fields(state: SessionState) -> tuple[object, ...]:
    """What of a session's `sessions` row a CONNECT that resumes it may change (`snapshot`): the
    row is rewritten only when this differs before and after (Broker.connect)."""
    conn = state.conn
    will = conn.will if conn is not None else None
    return (state.expiry, state.level, state.username, state.owner, will is not None, state.will is not None)


def snapshot(state: SessionState) -> dict[str, Any]:
    """A durable session as stored (its `sessions` row, JSON): written when these change."""
    conn_will = state.conn.will if state.conn is not None else None
    pending = state.will
    will = conn_will if conn_will is not None else (pending.will if pending is not None else None)
    return {
        "expiry": state.expiry,
        "username": state.username,
        "owner": state.owner,
        "level": state.level,
        "subs": [
            [s.filter, s.qos, s.live_from, s.no_local, s.retain_as_published, s.identifier]
            for s in state.subscriptions.values()
        ],
        "will": _will(will) if will is not None else None,
        "will_due": pending.due if pending is not None and conn_will is None else None,
    }


def _will(will: Will) -> dict[str, Any]:
    return {
        "topic": will.topic,
        "payload": will.payload.hex(),
        "qos": will.qos,
        "retain": will.retain,
        "props": (_props(will.properties) or b"").hex(),
    }


def _unwill(data: dict[str, Any]) -> Will:
    props = _unprops(bytes.fromhex(data["props"]), WILL)
    return Will(data["topic"], bytes.fromhex(data["payload"]), data["qos"], data["retain"], props)


def _outgoing(
    row: MessageRow,
    qos: int,
    retain: bool,
    filters: tuple[str, ...],
    ids: tuple[int, ...],
    now_wall: float,
    now_mono: float,
) -> Outgoing:
    seq, msgid, topic, payload, _qos, _retain, sender, props, expires, _fanout, _targets = row
    return Outgoing(
        msgid,
        topic,
        payload,
        qos,
        retain,
        sender,
        filters,
        _unprops(props),
        _to_mono(expires, now_wall, now_mono),
        ids,
        seq=seq,
    )
