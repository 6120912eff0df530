"""MongoDB backend on PyMongo's AsyncMongoClient.

A batch is cut at its read-then-act jobs; the writes in between are grouped by
collection and each group goes out as one `bulk_write`, the groups concurrently.
A group is unordered (the server continues past a failed operation) unless one of
its operations needs order (online status, your templates). Duplicate keys from
idempotent writes are successes; any other refused operation fails its own job
only. Connection loss raises, and the runner retries the whole batch: every
function's write is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import BulkWriteError, CollectionInvalid, ConnectionFailure, OperationFailure, PyMongoError

from actions.mongo import emqx44, schema
from actions.mongo.client_settings import client_options
from actions.mongo.functions import DUPLICATE_KEY, WRITERS, Write
from actions.mongo.reads import MongoStore
from actions.mongo.templates import render_writes
from bridge.backend import Backend, Job, PermanentError
from bridge.batches import cut_at_reads, planned, read
from bridge.fetch import READERS
from bridge.plugin import FunctionAction, TemplateAction

log = logging.getLogger(__name__)

# Server codes meaning "try again later": shutting down, stepping down, not primary, too busy.
# Server-state codes: unreachable (6, 7, 89, 9001), shutting down (91, 11600), not (or no longer)
# primary (189, 10058, 10107, 11602, 13435, 13436), time limit (262), out of disk (14031), a
# majority not yet available (133, 134), and 46841.
_RETRY_CODES = frozenset(
    {6, 7, 89, 91, 133, 134, 189, 262, 9001, 10058, 10107, 11600, 11602, 13435, 13436, 14031, 46841}
)
# Codes meaning "this server has no TTL indexes" (FerretDB v1: 238).
_NO_TTL_CODES = frozenset({115, 238})
_KNOWN_TOPICS_MAX = 100_000

Entry = tuple[int, Write]  # the job's index in the batch, one of its writes


class MongoBackend(Backend):
    db = "mongo"
    emqx44_migration = emqx44.migrate  # hookbridge migrate-emqx44 (docs/migrate-from-emqx44.md)
    functions = frozenset(WRITERS) | frozenset(READERS)

    async def connect(self) -> None:
        self.client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(**client_options(self.pool))
        self.database = self.client[self.pool["database"]]
        self.ttl: bool | None = None  # does mqtt_msg have a TTL index? None: not known yet
        self._known_topics: set[str] = set()
        self._schema_pending = True
        try:
            await self._ensure_schema()
        except Exception as exc:
            # Refused credentials or certificate will not fix themselves: refuse to start.
            # The server merely not up yet: start anyway; batches wait and retry.
            if not self.is_recoverable(exc) or _tls_refused(exc):
                raise
            log.warning("pool %s: MongoDB not reachable yet (%s); actions wait and retry", self.pool.id, exc)

    async def _ensure_schema(self) -> None:
        if not self._schema_pending:
            return
        if self.pool["auto_schema"]:
            await self.schema(apply=True)
        else:
            await self.database.command("ping")  # connect now, so bad credentials show at start
            self.ttl = await self._has_ttl_index()
        self._schema_pending = False

    async def probe(self) -> None:
        await self.client.admin.command("ping")

    async def close(self) -> None:
        await self.client.close()

    def is_recoverable(self, exc: BaseException) -> bool:
        if isinstance(exc, ConnectionFailure | OSError | TimeoutError):  # includes AutoReconnect, NotPrimary
            return True
        if isinstance(exc, OperationFailure) and not isinstance(exc, BulkWriteError):
            if exc.code in _RETRY_CODES or exc.has_error_label("RetryableWriteError"):
                return True
            return "not primary" in str(exc).lower() or "not master" in str(exc).lower()  # codeless, older servers
        return False

    async def schema(self, apply: bool) -> str:
        if not apply:
            return schema.describe()
        existing = set(await self.database.list_collection_names())
        for name in schema.COLLECTIONS:
            if name not in existing:
                with contextlib.suppress(CollectionInvalid):  # another bridge created it just now
                    await self.database.create_collection(name)
        for index in schema.INDEXES:
            await self.database[index.collection].create_index(list(index.keys), name=index.name, **index.options)
        self.ttl = await self._create_expiry_index()
        return schema.describe(self.ttl)

    async def _create_expiry_index(self) -> bool:
        """A TTL index on expires_at where the server has them; else a plain one (periodic delete)."""
        if await self._has_ttl_index():
            return True
        collection = self.database[schema.EXPIRY.collection]
        keys = list(schema.EXPIRY.keys)
        try:
            await collection.create_index(keys, name=schema.EXPIRY.name, **schema.TTL_OPTIONS)
            return True
        except OperationFailure as exc:
            if exc.code not in _NO_TTL_CODES:
                raise
        log.info("pool %s: the server refuses TTL indexes; expired messages are deleted periodically", self.pool.id)
        await collection.create_index(keys, name=schema.EXPIRY.name)
        return False

    async def _has_ttl_index(self) -> bool:
        indexes = await self.database[schema.EXPIRY.collection].index_information()
        return any("expireAfterSeconds" in info for info in indexes.values())

    # -- batches -------------------------------------------------------------

    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        await self._ensure_schema()
        store = MongoStore(self.database)
        return await cut_at_reads(batch, self._write_run, lambda job: read(self, store, job, refusals=(PyMongoError,)))

    def _writes(self, job: Job) -> list[Write]:
        action = job.rule.action
        if isinstance(action, FunctionAction):
            return WRITERS[action.spec.impl_name](job)
        assert isinstance(action, TemplateAction)
        return render_writes(action.template, job.values)

    def _groups(
        self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]
    ) -> dict[str, list[Entry]]:
        groups: dict[str, list[Entry]] = {}
        topics: set[str] = set()
        for index, writes in planned(self, batch, run, outcomes, self._writes):
            for write in writes:
                if write.topic is not None:
                    if write.topic in self._known_topics or write.topic in topics:
                        continue
                    topics.add(write.topic)
                groups.setdefault(write.collection, []).append((index, write))
        return groups

    async def _write_run(self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]) -> None:
        groups = self._groups(batch, run, outcomes)
        if not groups:
            return
        results = await asyncio.gather(
            *(self._bulk(name, entries, outcomes) for name, entries in groups.items()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result  # recoverable (the others were handled per job): retry the batch
        if "mqtt_topic" in groups:
            if len(self._known_topics) > _KNOWN_TOPICS_MAX:
                self._known_topics.clear()
            self._known_topics.update(w.topic for _, w in groups["mqtt_topic"] if w.topic is not None)

    async def _bulk(self, name: str, entries: list[Entry], outcomes: list[BaseException | None]) -> None:
        collection = self.database[name]
        ordered = any(write.ordered for _, write in entries)
        pending = entries
        while pending:
            try:
                await collection.bulk_write([write.bulk_op() for _, write in pending], ordered=ordered)
                return
            except BulkWriteError as exc:
                errors = exc.details.get("writeErrors", [])
                if not errors:
                    raise  # a write concern error only: nothing known to be wrong with the data
                again: list[Entry] = []
                for error in errors:
                    index, write = pending[error["index"]]
                    retry = self._refused(name, index, write, error.get("code"), error.get("errmsg"), outcomes)
                    if retry is not None:
                        again.append((index, retry))
                # ordered: the server stopped at the one error; the rest was not tried yet
                pending = again + (pending[errors[-1]["index"] + 1 :] if ordered else [])
            except KeyError:
                # The server's reply to a partly failed bulk lacked a count PyMongo reads (FerretDB
                # v1 omits nModified): which writes failed is unknown, so go one at a time.
                await self._one_at_a_time(collection, pending, outcomes)
                return
            except PyMongoError as exc:  # e.g. a document the driver cannot encode, or too large
                if self.is_recoverable(exc):
                    raise
                if len(pending) == 1:
                    outcomes[pending[0][0]] = PermanentError(f"{name}: {exc}")
                    return
                for entry in pending:  # find the culprit
                    await self._bulk(name, [entry], outcomes)
                return

    def _refused(
        self, name: str, index: int, write: Write, code: Any, message: Any, outcomes: list[BaseException | None]
    ) -> Write | None:
        """The server refused one write: success, a fallback to send instead, or the job fails."""
        if code == DUPLICATE_KEY and write.duplicate_ok:
            return None
        if write.fallback is not None and code != DUPLICATE_KEY:
            return write.fallback
        outcomes[index] = PermanentError(f"{name}: {message} (code {code})")
        return None

    async def _one_at_a_time(self, collection: Any, entries: list[Entry], outcomes: list[BaseException | None]) -> None:
        for index, write in entries:
            if not write.idempotent:
                outcomes[index] = PermanentError(
                    f"{collection.name}: a write of this batch failed and the server did not say which; "
                    "not replayed, as it may have been applied already"
                )
                continue
            current: Write | None = write
            while current is not None:
                try:
                    await current.run_alone(collection)
                    break
                except OperationFailure as exc:
                    if self.is_recoverable(exc):
                        raise
                    current = self._refused(collection.name, index, current, exc.code, exc, outcomes)

    async def maintenance(self) -> None:
        """Delete expired messages where the server has no TTL index (rules with `expired_time`)."""
        if not self.trim_enabled or self.ttl is not False:
            return
        await self.database.mqtt_msg.delete_many({"expires_at": {"$lte": dt.datetime.now(dt.UTC)}})


def _tls_refused(exc: BaseException) -> bool:
    """A TLS handshake the certificates failed (PyMongo reports it only as text, inside a timeout)."""
    return "[SSL" in str(exc) or "CERTIFICATE_VERIFY_FAILED" in str(exc)
