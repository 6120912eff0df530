"""The durable store: one SQLite database in WAL mode (`<broker.durable_dir>/durable.db`).

Why SQLite (bench/durable_store_bench.py compares it with RocksDB and LMDB on this workload, see
docs/benchmarks.md): it ships with Python, a transaction is atomic across the three tables (a
message, the positions of the sessions that read it and a retained message commit together or
not at all), and its write-ahead log checksums every frame, so a write torn by `kill -9` is
rolled back at the next open instead of being read as data.

`synchronous = NORMAL`: a commit is in the WAL file when `commit()` returns, so a process that
dies (`kill -9`, a crash) loses nothing committed; only a power loss or a kernel crash may take
the last commits (the database stays consistent). That is the promise a PUBACK makes here, as
Mosquitto's and EMQX's persistence make it.

Tables:
- `messages(seq, ...)`: each message once, `seq` the time order (EMQX's key of time + topic +
  message id, seed 000, reduced to one growing integer: this store is one node's). `fanout` 1:
  routed to a session by matching its subscriptions when its queue is read back; `targets` (JSON) names the
  sessions a message was given to one by one (a shared subscription's pick, a retained message
  sent on subscribe, a fetched message) with how each got it.
- `sessions(clientid, body)`: a durable session (JSON: subscriptions, will, expiry, user),
  written when those change; `positions(clientid, body)`: its position in the log, in-flight
  window and QoS 2 ids, whether it is connected and when it expires offline (JSON), written as
  it acknowledges, connects and goes (small, so that is cheap; a reconnect writes only this row).
  Read back merged, this row's keys over the other's (stores before December 2026 kept
  `connected` and `expires_at` in `sessions`).
- an index of the log by (topic, seq), and `routes(seq, clientid)`, the sessions each message
  was given to by name (its `targets`): after a restart a session's queue is read back on its
  own when it is first needed (`logged_for`), not the whole log into every session at start.
  The index answers "the entries after its position on the topics its filters can match" (an
  exact filter: one range; `a/b/#`, `a/+/c`: the range of the literal prefix; a filter that
  starts with a wildcard: the log after its position), so a message stays one row (and one
  index entry) however many sessions it goes to. `routes` is kept by the log's key and trimmed
  with it; its index on (clientid, seq) answers one session's query.
- `retained(topic, ...)`: the retained messages.

`PRAGMA user_version` is the format: 0 a store written before the topic index and `routes`
(migrated when it is opened: the index built and the routes read from the log's `targets`,
one transaction), 1 this one.
Expiry removes the log in bulk (`_trim`): the rows up to the smallest position of the loaded
sessions go in one range delete (the key is the time order, so that is seed 002's oldest
generations), but for those a `routes` row still holds: what a session not loaded since a
restart is owed has its rows there (durable/owed.py: its backlog matched once by an `Owe` job,
each later message with the message), so a session that stays away holds only what its queue
limits let it keep, not the log after its position. Its rows go when it is loaded past them or
ends (`release`), and the entries they held with them.

At every open SQLite's quick check runs; a damaged store refuses the start (RECOVERY says what
to do), and `full_check` is `hookbridge check --durable`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bridge.brokers.embedded.sessions import MESSAGE_OVERHEAD
from bridge.errors import HookbridgeError
from bridge.topics import is_wildcard, matches, prefix_range

log = logging.getLogger("bridge.brokers.embedded")

FILENAME = "durable.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    msgid TEXT NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL,
    sender TEXT NOT NULL,
    props BLOB,
    expires REAL NOT NULL,
    fanout INTEGER NOT NULL,
    targets TEXT
);
CREATE TABLE IF NOT EXISTS sessions (clientid TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS positions (clientid TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS routes (
    seq INTEGER NOT NULL,
    clientid TEXT NOT NULL,
    PRIMARY KEY (seq, clientid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS routes_by_client ON routes (clientid, seq);
CREATE INDEX IF NOT EXISTS messages_by_topic ON messages (topic, seq);
CREATE TABLE IF NOT EXISTS retained (
    topic TEXT PRIMARY KEY,
    msgid TEXT NOT NULL,
    payload BLOB NOT NULL,
    qos INTEGER NOT NULL,
    sender TEXT NOT NULL,
    props BLOB,
    expires REAL NOT NULL
) WITHOUT ROWID;
"""

FORMAT = 1  # PRAGMA user_version of a store with `routes`
# Sequence numbers per `seq IN (...)` statement (SQLite's limit on parameters is 32,766).
_IN_LIST = 1000

# One row of `messages`, in column order.
MessageRow = tuple[int, str, str, bytes, int, int, str, bytes | None, float, int, str | None]
# One row of `retained`, in column order.
RetainedRow = tuple[str, str, bytes, int, str, bytes | None, float]


class StoreError(HookbridgeError):
    """The durable store cannot be opened or written (disk full, unreadable file)."""


# The last sequence number given out, read back at start: the highest one anything in the store
# still names. Not only the log's newest entry: the trim deletes the newest entries too once every
# session is past them, while a caught-up session's `positions` row keeps naming them (its
# position is the head; `owed_to` too). Read from the log alone, the head went back after a
# restart, and the first messages logged after it got numbers a session's position had passed:
# its load (`seq > position`) skipped them, acknowledged and never delivered.
_HEAD_QUERIES = """
SELECT max(seq) FROM messages
UNION ALL SELECT max(seq) FROM routes
UNION ALL SELECT max(max(coalesce(json_extract(body, '$.position'), 0), coalesce(json_extract(body, '$.owed_to'), 0)))
    FROM (SELECT CASE WHEN json_valid(body) THEN body ELSE '{}' END AS body FROM positions)
UNION ALL SELECT max(json_extract(entry.value, '$[0]'))
    FROM (SELECT CASE WHEN json_valid(body) THEN body ELSE '{}' END AS body FROM positions) AS p,
    json_each(p.body, '$.inflight') AS entry
"""


@dataclass(slots=True)
class Owe:
    """Give one session not loaded since the restart a `routes` row for each log entry after
    `after` up to `upto` that its (non-shared) `filters` match (durable/owed.py)."""

    clientid: str
    after: int  # its position: every `routes` row of it after this is counted
    match_after: int  # entries before this were matched already (its owed_to): not again
    upto: int
    filters: list[str]
    inflight: list[int]  # the entries of its in-flight window: held by `routes` rows too


# What a commit's Owe jobs found: client id -> (seq, size) of each entry it is owed up to `upto`.
Owing = dict[str, list[tuple[int, int]]]


@dataclass(slots=True)
class Batch:
    """Everything one commit writes."""

    messages: list[MessageRow] = field(default_factory=list)
    routes: list[tuple[int, str]] = field(default_factory=list)  # (seq, clientid) of each logged message
    sessions: dict[str, str | None] = field(default_factory=dict)  # clientid -> body; None: delete
    positions: dict[str, str | None] = field(default_factory=dict)  # clientid -> body; None: delete
    retained: dict[str, RetainedRow | None] = field(default_factory=dict)  # topic -> row; None: delete
    trim_to: int = 0  # delete the messages in (trim_from, trim_to] that no `routes` row holds
    trim_from: int = 0
    owing: list[str] = field(default_factory=list)  # sessions not loaded: their `routes` rows stay
    owe: list[Owe] = field(default_factory=list)
    unroutes: list[tuple[int, str]] = field(default_factory=list)  # (seq, clientid): dropped owed entries
    release: list[tuple[str, int]] = field(default_factory=list)  # (clientid, seq): its routes rows up to seq go

    def __bool__(self) -> bool:
        return bool(
            self.messages
            or self.sessions
            or self.positions
            or self.retained
            or self.trim_to
            or self.owe
            or self.unroutes
            or self.release
        )


# What the operator can do about a damaged store (docs/brokers.md#a-damaged-store).
RECOVERY = (
    "stop the bridge, keep a copy, then `sqlite3 durable.db .recover | sqlite3 recovered.db` and put"
    " recovered.db in its place, or move the file away to start empty; see docs/brokers.md#a-damaged-store"
)


def _refusal(problem: str) -> str:
    return f"damaged ({problem}), refusing to start on it ({RECOVERY})"


class UnreadableSession(StoreError):
    """The rows of one durable session cannot be read back (its pages are damaged)."""


def _matches(topic_filter: str, topic: str) -> bool:
    return matches(topic_filter, topic)


def damaged(error: BaseException) -> bool:
    """Whether SQLite found the file damaged (not a database, or a page it cannot read)."""
    return getattr(error, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def quick_check(db: sqlite3.Connection) -> list[str]:
    """What `PRAGMA quick_check` finds wrong; [] when the store is sound."""
    problems = [str(row[0]) for row in db.execute("PRAGMA quick_check")]
    return [] if problems == ["ok"] else problems


def full_check(path: Path) -> list[str]:
    """`hookbridge check --durable`: SQLite's integrity check (every page, and every index
    against its table) and every session's rows parsed; [] when the store is sound. Opened
    read-only: a running bridge may have it open (WAL lets the check read its last commit)."""
    problems: list[str] = []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        found = [str(row[0]) for row in db.execute("PRAGMA integrity_check")]
        if found != ["ok"]:
            problems += found
        for table in ("sessions", "positions"):
            for clientid, body in db.execute(f"SELECT clientid, body FROM {table}"):
                try:
                    json.loads(body)
                except ValueError as exc:
                    problems.append(f"{table} row of client {clientid!r} is not readable: {exc}")
    except sqlite3.Error as exc:
        problems.append(str(exc))
    finally:
        db.close()
    return problems


class DurableStore:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / FILENAME
        wal = self.path.with_name(FILENAME + "-wal")
        unclean = wal.exists() and wal.stat().st_size > 0  # a graceful close leaves it empty
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._check(wal if unclean else None)
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            existed = self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages'").fetchone() is not None
            self._db.executescript(_SCHEMA)
            self.migrated = existed and version < FORMAT
            if self.migrated:  # a store of the format before the topic index and `routes`
                self._db.execute("BEGIN")
                self._db.execute(
                    "INSERT OR IGNORE INTO routes SELECT m.seq, t.key FROM messages m, json_each(m.targets) t"
                    " WHERE m.targets IS NOT NULL"
                )
                self._db.execute(f"PRAGMA user_version = {FORMAT}")
                self._db.execute("COMMIT")
            elif not existed:
                self._db.execute(f"PRAGMA user_version = {FORMAT}")
            head = max((int(row[0] or 0) for row in self._db.execute(_HEAD_QUERIES)), default=0)
        except (OSError, sqlite3.Error) as exc:
            if damaged(exc):
                raise StoreError(f"durable store {self.path}: {_refusal(str(exc))}") from exc
            raise StoreError(f"durable store {self.path}: {exc}") from exc
        self.head = head  # the last sequence number given out
        self.trimmed_to = 0  # the log's entries up to this are held only by `routes` rows
        self._db.create_function("hb_matches", 2, _matches, deterministic=True)
        self._reader: sqlite3.Connection | None = None
        self._loader: sqlite3.Connection | None = None

    def _check(self, wal: Path | None) -> None:
        """At every open: SQLite's quick check (the structure of every page, without comparing the
        indexes with their tables: about half a second per 200 MiB, docs/benchmarks.md). After an
        unclean stop (`wal`), SQLite has first replayed the committed transactions of the WAL and
        dropped a torn tail (frames whose checksum fails). A damaged store refuses the start: a
        broker that started on it would lose the sessions whose rows it cannot read."""
        problems = quick_check(self._db)
        if problems:
            raise StoreError(f"durable store {self.path}: {_refusal('; '.join(problems[:5]))}")
        if wal is not None:
            log.warning(
                "durable store %s: the last run did not stop cleanly; its write-ahead log (%d bytes) was recovered:"
                " committed transactions kept, any torn write at its end dropped; store checked, ok",
                self.path,
                wal.stat().st_size if wal.exists() else 0,
            )

    def reserve(self) -> int:
        """The next sequence number (numbers a message never used are gaps, harmless)."""
        self.head += 1
        return self.head

    def write(self, batch: Batch) -> Owing:
        """Commit a batch atomically; raises StoreError (nothing of it is then written).
        Returns what its Owe jobs found."""
        db = self._db
        owing: Owing = {}
        try:
            db.execute("BEGIN")
            if batch.messages:
                db.executemany("INSERT OR REPLACE INTO messages VALUES (?,?,?,?,?,?,?,?,?,?,?)", batch.messages)
            if batch.routes:
                db.executemany("INSERT OR IGNORE INTO routes VALUES (?, ?)", batch.routes)
            for table, rows in (("sessions", batch.sessions), ("positions", batch.positions)):
                gone = [(clientid,) for clientid, body in rows.items() if body is None]
                if gone:
                    db.executemany(f"DELETE FROM {table} WHERE clientid = ?", gone)
                kept = [(clientid, body) for clientid, body in rows.items() if body is not None]
                if kept:
                    db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?)", kept)
            for topic, row in batch.retained.items():
                if row is None:
                    db.execute("DELETE FROM retained WHERE topic = ?", (topic,))
                else:
                    db.execute("INSERT OR REPLACE INTO retained VALUES (?,?,?,?,?,?,?)", row)
            for job in batch.owe:
                owing[job.clientid] = self._owe(job)
            self._trim(batch)
            db.execute("COMMIT")
        except (OSError, sqlite3.Error) as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"durable store {self.path}: {exc}") from exc
        if batch.trim_to:
            self.trimmed_to = batch.trim_to
        return owing

    def _owe(self, job: Owe) -> list[tuple[int, int]]:
        """An Owe job (on the writer's connection, in its transaction): one statement per filter,
        by the topic index where the filter has a literal start, the log's range else (on the
        writer thread, not the event loop); then every `routes` row of the session in the range."""
        db = self._db
        db.executemany(
            "INSERT OR IGNORE INTO routes SELECT seq, ? FROM messages WHERE seq = ?",
            [(job.clientid, seq) for seq in job.inflight],
        )
        for topic_filter in job.filters if job.upto > job.match_after else ():
            where, args = "", [job.clientid, job.match_after, job.upto]
            if not is_wildcard(topic_filter):
                where, args = " AND topic = ?", [*args, topic_filter]
            else:
                span = prefix_range(topic_filter)
                if span is not None:
                    low, high = span
                    where, args = " AND topic >= ?", [*args, low]
                    if high is not None:
                        where, args = where + " AND topic < ?", [*args, high]
                where, args = where + " AND hb_matches(?, topic)", [*args, topic_filter]
            db.execute(
                "INSERT OR IGNORE INTO routes SELECT seq, ? FROM messages WHERE seq > ? AND seq <= ? AND fanout = 1"
                + where,
                args,
            )
        query = (
            f"SELECT r.seq, length(m.topic) + length(m.payload) + {MESSAGE_OVERHEAD} FROM routes r"
            " JOIN messages m ON m.seq = r.seq WHERE r.clientid = ? AND r.seq > ? AND r.seq <= ? ORDER BY r.seq"
        )
        return [(int(seq), int(size)) for seq, size in db.execute(query, (job.clientid, job.after, job.upto))]

    def _trim(self, batch: Batch) -> None:
        """Remove what nobody is owed any more: the `routes` rows of dropped entries and of
        sessions loaded past them or gone, the log's entries up to `trim_to` that no `routes`
        row holds (a range, by the log's key), and the older entries whose last row just went."""
        db = self._db
        freed: list[int] = [seq for seq, _ in batch.unroutes]
        if batch.unroutes:
            db.executemany("DELETE FROM routes WHERE seq = ? AND clientid = ?", batch.unroutes)
        for clientid, upto in batch.release:
            query = "DELETE FROM routes WHERE clientid = ? AND seq <= ? RETURNING seq"
            freed.extend(row[0] for row in db.execute(query, (clientid, upto)))
        if batch.trim_to:
            db.execute(
                "DELETE FROM routes WHERE seq > ? AND seq <= ? AND clientid NOT IN (SELECT value FROM json_each(?))",
                (batch.trim_from, batch.trim_to, json.dumps(batch.owing)),
            )
            span = (batch.trim_from, batch.trim_to)
            if db.execute("SELECT 1 FROM routes WHERE seq > ? AND seq <= ? LIMIT 1", span).fetchone() is None:
                # Nobody is owed an entry of the range (a fleet caught up): the range alone, a
                # fifth faster than asking `routes` for each of its entries.
                db.execute("DELETE FROM messages WHERE seq > ? AND seq <= ?", span)
            else:
                db.execute(
                    "DELETE FROM messages WHERE seq > ? AND seq <= ?"
                    " AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.seq = messages.seq)",
                    span,
                )
        below = max(batch.trim_to, self.trimmed_to)
        # In the log's order: the sessions' entries are interleaved in the log, and deleting them
        # page by page (not in the order the sessions released them) took a quarter less time.
        gone = [(seq,) for seq in sorted(freed) if seq <= below]
        if gone:
            db.executemany(
                "DELETE FROM messages WHERE seq = ? AND NOT EXISTS (SELECT 1 FROM routes r WHERE r.seq = messages.seq)",
                gone,
            )

    # -- reading back (at start) ---------------------------------------------------

    def sessions(self) -> list[tuple[str, str, str | None]]:
        """(clientid, session body, position body) of every durable session."""
        query = "SELECT s.clientid, s.body, p.body FROM sessions s LEFT JOIN positions p USING (clientid)"
        return list(self._db.execute(query))

    def retained_rows(self) -> list[RetainedRow]:
        return list(self._db.execute("SELECT * FROM retained"))

    def logged_for(self, clientid: str, after: int, filters: Iterable[str]) -> dict[int, MessageRow]:
        """The log entries after `after` that may concern one session, by sequence number: those
        routed by subscription (`fanout`) on a topic its (non-shared) `filters` can match (a
        superset: the caller matches them) and those given to it by name (`routes`).

        Read on a connection of its own (the writer thread may be committing on the other one):
        it sees the last commit; what is not committed yet the journal adds from its batches."""
        db = self._loading()
        found: dict[int, MessageRow] = {}
        topics: set[str] = set()
        spans: set[tuple[str, str | None]] = set()
        for topic_filter in filters:
            if not is_wildcard(topic_filter):
                topics.add(topic_filter)
                continue
            span = prefix_range(topic_filter)
            if span is None:  # a leading wildcard: the log after its position
                topics, spans = set(), set()
                query = "SELECT * FROM messages WHERE seq > ? AND fanout = 1"
                found.update((row[0], row) for row in db.execute(query, (after,)))
                break
            spans.add(span)
        for topic in topics:
            query = "SELECT * FROM messages WHERE topic = ? AND seq > ? AND fanout = 1"
            found.update((row[0], row) for row in db.execute(query, (topic, after)))
        for low, high in spans:
            if high is None:
                query = "SELECT * FROM messages WHERE topic >= ? AND seq > ? AND fanout = 1"
                rows = db.execute(query, (low, after))
            else:
                query = "SELECT * FROM messages WHERE topic >= ? AND topic < ? AND seq > ? AND fanout = 1"
                rows = db.execute(query, (low, high, after))
            found.update((row[0], row) for row in rows)
        query = "SELECT m.* FROM routes r JOIN messages m ON m.seq = r.seq WHERE r.clientid = ? AND r.seq > ?"
        found.update((row[0], row) for row in db.execute(query, (clientid, after)))
        return found

    def owed_rows(self, clientid: str, after: int, limit: int) -> list[MessageRow]:
        """Up to `limit` log entries after `after` that one session is owed by its `routes`
        rows (by its index on (clientid, seq)), oldest first: a page of its queue."""
        query = (
            "SELECT m.* FROM routes r JOIN messages m ON m.seq = r.seq"
            " WHERE r.clientid = ? AND r.seq > ? ORDER BY r.seq LIMIT ?"
        )
        return list(self._loading().execute(query, (clientid, after, limit)))

    def messages_at(self, seqs: list[int]) -> list[MessageRow]:
        """The log entries of these sequence numbers that are still in the log."""
        found: list[MessageRow] = []
        for start in range(0, len(seqs), _IN_LIST):  # SQLite bounds a statement's parameters
            chunk = seqs[start : start + _IN_LIST]
            marks = ",".join("?" * len(chunk))
            found += self._loading().execute(f"SELECT * FROM messages WHERE seq IN ({marks})", chunk)
        return found

    # -- reading every queue at once (durable/preload.py) ---------------------------

    def log_entries_after(self, after: int, most: int) -> int:
        """How many entries the log holds after `after`, counted up to `most` (a bound that is
        cheap on a log of millions: `log_bytes_after` reads every entry's header)."""
        query = "SELECT count(*) FROM (SELECT 1 FROM messages WHERE seq > ? LIMIT ?)"
        return int(self._loading().execute(query, (after, most)).fetchone()[0])

    def log_bytes_after(self, after: int) -> int:
        """The bytes of the log after `after`, each entry counted as the queue limits count a
        message (topic + payload + MESSAGE_OVERHEAD). Reads every entry (a topic's length is
        counted in characters): about 60 ms for 150,000."""
        query = f"SELECT total(length(topic) + length(payload) + {MESSAGE_OVERHEAD}) FROM messages WHERE seq > ?"
        return int(self._loading().execute(query, (after,)).fetchone()[0])

    def log_after(self, after: int) -> Iterator[MessageRow]:
        """Every log entry after `after`, oldest first (one range of the log's key)."""
        return self._loading().execute("SELECT * FROM messages WHERE seq > ? ORDER BY seq", (after,))

    def routes_after(self, after: int) -> list[tuple[int, str]]:
        """Every (seq, client id) `routes` row after `after`: the entries given to a session by name."""
        return list(self._loading().execute("SELECT seq, clientid FROM routes WHERE seq > ?", (after,)))

    def _loading(self) -> sqlite3.Connection:
        """The connection the event loop reads sessions' queues on (not the metrics' one)."""
        if self._loader is None:
            self._loader = sqlite3.connect(self.path, check_same_thread=False)
        return self._loader

    def _read(self) -> sqlite3.Connection:
        if self._reader is None:
            self._reader = sqlite3.connect(self.path, check_same_thread=False)
        return self._reader

    def counts(self) -> tuple[int, int]:
        """(messages in the log, durable sessions), read on a connection of its own: the writer
        thread may be committing on the other one (WAL lets a reader see the last commit)."""
        reader = self._read()
        messages = reader.execute("SELECT count(*) FROM messages").fetchone()[0]
        sessions = reader.execute("SELECT count(*) FROM sessions").fetchone()[0]
        return int(messages), int(sessions)

    def close(self) -> None:
        for other in (self._reader, self._loader):
            if other is not None:
                other.close()
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            log.warning("durable store %s: checkpoint at close failed: %s", self.path, exc)
        self._db.close()
