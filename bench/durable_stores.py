"""The three embedded engines of bench/durable_store_bench.py behind one small interface.

Each keeps messages keyed by an 8-byte big-endian sequence (publish order, seed 000's time-ordered
key) in generations (seed 002: a generation holds a run of sequences and expires as a whole),
plus one position row per durable session. Each engine is set up the way its documentation
recommends for a store that must survive the process being killed (`kill -9`) but not
necessarily a power cut:

- SQLite: `journal_mode=WAL`, `synchronous=NORMAL`. A commit is in the WAL file (in the OS page
  cache) when it returns; only a checkpoint fsyncs. A table per generation, `seq INTEGER PRIMARY
  KEY` (the rowid, so keys are stored once).
- LMDB: `sync=False` (no fsync at commit; the pages are written with pwrite, so the kernel has
  them). A named database per generation, messages put with `append=True` (sorted keys fill pages
  instead of splitting them half full, as its docs advise for sequential keys).
- RocksDB (rocksdict): the WAL on, `WriteOptions.sync = False` (the default: each write batch
  reaches the WAL file with write(), not fsync). A column family per generation.

Messages carry their topic and payload; the KV engines pack them as `<topic length><topic><payload>`.
"""

from __future__ import annotations

import sqlite3
import struct
import threading
from pathlib import Path
from typing import Any, ClassVar, Protocol

Row = tuple[int, str, bytes]  # sequence, topic, payload

SEQ = struct.Struct(">Q")
SESSION = struct.Struct(">I")
TOPIC_LEN = struct.Struct(">H")


class Store(Protocol):
    name: ClassVar[str]

    def __init__(self, path: Path) -> None: ...

    def append(self, generation: int, rows: list[Row], positions: list[tuple[int, int]]) -> None:
        """Store rows (all of one generation) and session positions in one commit."""

    def scan(self, after: int) -> int:
        """Read every message with a sequence above `after`, oldest first; return how many."""

    def newest(self) -> int:
        """The highest sequence stored (0 when empty)."""

    def oldest(self) -> int:
        """The lowest sequence stored (0 when empty)."""

    def drop_generation(self, generation: int) -> None:
        """Remove a whole generation at once (its table, named database or column family)."""

    def delete_below(self, generation: int, below: int) -> None:
        """Remove a generation's messages with a sequence below `below` (a range delete)."""

    def close(self) -> None: ...


def pack(topic: str, payload: bytes) -> bytes:
    encoded = topic.encode()
    return TOPIC_LEN.pack(len(encoded)) + encoded + payload


class SqliteStore:
    name: ClassVar[str] = "SQLite (WAL)"

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path / "store.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS sessions (id INTEGER PRIMARY KEY, position INTEGER NOT NULL)")
        names = self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'gen_%'")
        self.generations = sorted(int(name.removeprefix("gen_")) for (name,) in names)

    def table(self, generation: int) -> str:
        if generation not in self.generations:
            self.db.execute(f"CREATE TABLE gen_{generation} (seq INTEGER PRIMARY KEY, topic TEXT, payload BLOB)")
            self.generations.append(generation)
        return f"gen_{generation}"

    def append(self, generation: int, rows: list[Row], positions: list[tuple[int, int]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany(f"INSERT INTO {self.table(generation)} VALUES (?, ?, ?)", rows)
        self.db.executemany(
            "INSERT INTO sessions VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET position = excluded.position", positions
        )
        self.db.execute("COMMIT")

    def scan(self, after: int) -> int:
        count = 0
        for generation in self.generations:
            for _seq, _topic, payload in self.db.execute(f"SELECT * FROM gen_{generation} WHERE seq > ?", (after,)):
                count += payload is not None
        return count

    def newest(self) -> int:
        if not self.generations:
            return 0
        return int(self.db.execute(f"SELECT max(seq) FROM gen_{self.generations[-1]}").fetchone()[0] or 0)

    def oldest(self) -> int:
        for generation in self.generations:  # a generation emptied by a range delete is skipped
            found = self.db.execute(f"SELECT min(seq) FROM gen_{generation}").fetchone()[0]
            if found is not None:
                return int(found)
        return 0

    def drop_generation(self, generation: int) -> None:
        self.db.execute(f"DROP TABLE gen_{generation}")
        self.generations.remove(generation)

    def delete_below(self, generation: int, below: int) -> None:
        self.db.execute(f"DELETE FROM gen_{generation} WHERE seq < ?", (below,))

    def close(self) -> None:
        self.db.close()


class SqliteCheckpointThreadStore(SqliteStore):
    """SQLite as above, but the WAL is checkpointed by a thread on its own connection instead of
    by whichever commit crosses `wal_autocheckpoint` (that commit waits for the checkpoint's
    fsyncs, which on an event loop is a pause of every client). sqlite3 lets go of the GIL while
    SQLite works, so the thread's fsyncs do not hold up the committing thread."""

    name: ClassVar[str] = "SQLite (WAL, checkpoints in a thread)"
    INTERVAL = 0.1

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.db.execute("PRAGMA wal_autocheckpoint=0")
        self.stopping = threading.Event()
        self.checkpointer = threading.Thread(target=self.checkpoint, args=(path / "store.db",), daemon=True)
        self.checkpointer.start()

    def checkpoint(self, file: Path) -> None:
        db = sqlite3.connect(file, isolation_level=None)
        db.execute("PRAGMA synchronous=NORMAL")
        while not self.stopping.wait(self.INTERVAL):
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        db.close()

    def close(self) -> None:
        self.stopping.set()
        self.checkpointer.join()
        super().close()


class LmdbStore:
    name: ClassVar[str] = "LMDB"

    def __init__(self, path: Path) -> None:
        import lmdb

        # map_size only reserves address space; the file grows as pages are used
        self.env = lmdb.open(str(path), map_size=4 << 30, max_dbs=64, sync=False)
        self.sessions = self.env.open_db(b"sessions")
        with self.env.begin() as txn:
            names = [bytes(key) for key, _ in txn.cursor() if bytes(key).startswith(b"gen-")]
        self.dbs = {int(name[4:]): self.env.open_db(name) for name in sorted(names)}

    def db(self, generation: int) -> Any:
        if generation not in self.dbs:
            self.dbs[generation] = self.env.open_db(f"gen-{generation:08d}".encode())
        return self.dbs[generation]

    def append(self, generation: int, rows: list[Row], positions: list[tuple[int, int]]) -> None:
        db = self.db(generation)
        with self.env.begin(write=True) as txn:
            for seq, topic, payload in rows:
                txn.put(SEQ.pack(seq), pack(topic, payload), db=db, append=True)
            for session, position in positions:
                txn.put(SESSION.pack(session), SEQ.pack(position), db=self.sessions)

    def scan(self, after: int) -> int:
        count = 0
        with self.env.begin(buffers=True) as txn:
            for generation in sorted(self.dbs):
                cursor = txn.cursor(db=self.dbs[generation])
                if cursor.set_range(SEQ.pack(after + 1)):
                    for value in cursor.iternext(keys=False):
                        count += len(value) > 0
        return count

    def edge(self, last: bool) -> int:
        with self.env.begin() as txn:
            for generation in sorted(self.dbs, reverse=last):  # skipping generations left empty
                cursor = txn.cursor(db=self.dbs[generation])
                if cursor.last() if last else cursor.first():
                    return int(SEQ.unpack(cursor.key())[0])
        return 0

    def newest(self) -> int:
        return self.edge(last=True)

    def oldest(self) -> int:
        return self.edge(last=False)

    def drop_generation(self, generation: int) -> None:
        with self.env.begin(write=True) as txn:
            txn.drop(self.dbs.pop(generation), delete=True)

    def delete_below(self, generation: int, below: int) -> None:
        # LMDB has no range delete: a cursor deletes key by key, in one transaction
        with self.env.begin(write=True, db=self.dbs[generation]) as txn:
            cursor = txn.cursor()
            if cursor.first():
                while cursor.key() < SEQ.pack(below) and cursor.delete():
                    pass

    def close(self) -> None:
        self.env.close()


class RocksStore:
    name: ClassVar[str] = "RocksDB (rocksdict)"

    def __init__(self, path: Path) -> None:
        from rocksdict import Options, Rdict, WriteOptions

        self.options = Options(raw_mode=True)
        self.options.create_if_missing(True)
        self.options.create_missing_column_families(True)
        existing = Rdict.list_cf(str(path)) if (path / "CURRENT").exists() else []
        families = {name: self.family_options() for name in existing if name != "default"}
        families.setdefault("sessions", self.family_options())
        self.db = Rdict(str(path), self.options, column_families=families)
        self.write_options = WriteOptions()
        self.write_options.sync = False  # the default, said here: the WAL is written, not fsynced
        self.generations = sorted(int(name[4:]) for name in families if name.startswith("gen-"))
        self.sessions = self.db.get_column_family_handle("sessions")

    @staticmethod
    def family_options() -> Any:
        from rocksdict import Options

        return Options(raw_mode=True)

    def family(self, generation: int) -> Any:
        name = f"gen-{generation:08d}"
        if generation not in self.generations:
            self.db.create_column_family(name, self.family_options())
            self.generations.append(generation)
        return self.db.get_column_family_handle(name)

    def append(self, generation: int, rows: list[Row], positions: list[tuple[int, int]]) -> None:
        from rocksdict import WriteBatch

        batch, family = WriteBatch(raw_mode=True), self.family(generation)
        for seq, topic, payload in rows:
            batch.put(SEQ.pack(seq), pack(topic, payload), family)
        for session, position in positions:
            batch.put(SESSION.pack(session), SEQ.pack(position), self.sessions)
        self.db.write(batch, self.write_options)

    def scan(self, after: int) -> int:
        count = 0
        for generation in self.generations:
            family = self.db.get_column_family(f"gen-{generation:08d}")
            for value in family.values(from_key=SEQ.pack(after + 1)):
                count += len(value) > 0
        return count

    def edge(self, last: bool) -> int:
        for generation in sorted(self.generations, reverse=last):  # skipping generations left empty
            family = self.db.get_column_family(f"gen-{generation:08d}")
            key = next(iter(family.keys(backwards=last)), None)
            if key is not None:
                return int(SEQ.unpack(bytes(key))[0])  # type: ignore[arg-type]
        return 0

    def newest(self) -> int:
        return self.edge(last=True)

    def oldest(self) -> int:
        return self.edge(last=False)

    def drop_generation(self, generation: int) -> None:
        self.db.drop_column_family(f"gen-{generation:08d}")
        self.generations.remove(generation)

    def delete_below(self, generation: int, below: int) -> None:
        family = self.db.get_column_family(f"gen-{generation:08d}")
        family.delete_range(SEQ.pack(0), SEQ.pack(below), self.write_options)

    def close(self) -> None:
        del self.sessions  # a column family handle keeps the database (and its LOCK) open
        self.db.close()


ENGINES: dict[str, tuple[type[Store], str]] = {
    "sqlite": (SqliteStore, "sqlite3"),
    "sqlite-thread": (SqliteCheckpointThreadStore, "sqlite3"),
    "lmdb": (LmdbStore, "lmdb"),
    "rocksdb": (RocksStore, "rocksdict"),
}
