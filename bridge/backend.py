"""What every backend is: connect, write a batch, say which errors are worth retrying, close.

The runner (bridge/pipeline/runner.py) owns queueing, batching, in-flight limits,
retries and ordering; a backend only turns a batch of jobs into database
calls and says which errors are worth retrying. A backend package subclasses
`Backend` and declares itself with a `BackendPlugin` (bridge/conf/registry.py);
this module is part of the interface published to backends (bridge/plugin.py).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from bridge.brokers.base import BrokerSource, Delivery, DeliveryError
from bridge.brokers.delivery import DeliveryLog
from bridge.conf import registry
from bridge.conf.config import PoolConfig
from bridge.errors import HookbridgeError
from bridge.events import SessionSubscribed
from bridge.job import Job as Job  # published to backends here (bridge/plugin.py)
from bridge.topics import filter_error


@dataclass
class FunctionContext:
    """What functions may use beyond their database."""

    node: str
    broker: BrokerSource | None = None
    # Waits until every message.publish job submitted before `seq` has been
    # committed, so a fetch sees every message published before its subscription.
    publishes_committed: Callable[[int], Awaitable[None]] | None = None
    # Continue a paged fetch after the given page has been acked.
    pager: Pager | None = None
    # Drops repeats so a message reaches a subscription once across rules.
    deliveries: DeliveryLog = field(default_factory=DeliveryLog)

    async def deliver(self, event: SessionSubscribed, deliveries: list[Delivery]) -> list[Delivery]:
        """Send to the subscriber what it has not had for this subscription; returns what was sent."""
        assert self.broker is not None
        try:
            return await self.deliveries.deliver(self.broker, event, deliveries)
        except DeliveryError as exc:
            raise PermanentError(f"cannot deliver to {event.clientid!r}: {exc}") from exc

    async def proxy_subscribe(self, clientid: str, stored: list[tuple[str, Any]]) -> None:
        """Subscribe the client to its stored (topic, qos) entries; bad entries are skipped and reported."""
        assert self.broker is not None
        bad = []
        for topic, qos in stored:
            if filter_error(topic) or qos not in (0, 1, 2):
                bad.append(f"{topic!r}={qos!r}")
                continue
            await self.broker.subscribe(clientid, topic, qos)
        if bad:
            raise PermanentError(f"skipped bad stored subscriptions of {clientid!r}: {', '.join(bad)}")


class Pager(abc.ABC):
    @abc.abstractmethod
    def track(self, job: Job, delivered: Sequence[tuple[str, int]], last: str) -> None:
        """A fetch sent one page, `delivered` (msgid, qos), and more messages wait.

        Once every delivered message is acked, run the fetch again after `last`.
        """


W = TypeVar("W")
# A write function's implementation: the writes (statements, commands) of one job, in order.
Writer = Callable[[Job], list[W]]
# A backend's WRITERS: the write functions it implements, by implementation name (bridge/functions.py).
Writers = Mapping[str, Writer[W]]


def writers(
    *,
    connected: Writer[W],
    disconnected: Writer[W],
    publish: Writer[W],
    retain: Writer[W],
    retain_delete: Writer[W],
    acked_for_queue: Writer[W],
    acked_for_pubsub: Writer[W],
    acked_delete: Writer[W],
    event_log: Writer[W],
    store: Writer[W] | None = None,
) -> dict[str, Writer[W]]:
    """A backend's WRITERS from its implementation of each write function, which it then need not
    name; `store` (on_message_store, QoS 0 included) is `publish` unless given."""
    return {
        "on_client_connected": connected,
        "on_client_disconnected": disconnected,
        "on_message_publish": publish,
        "on_message_store": store or publish,
        "on_message_retain": retain,
        "on_retain_delete": retain_delete,
        "on_message_acked_for_queue": acked_for_queue,
        "on_message_acked_for_pubsub": acked_for_pubsub,
        "on_acked_delete": acked_delete,
        "on_event_log": event_log,
    }


class PermanentError(HookbridgeError):
    """An action that cannot succeed by retrying (bad data, wrong type): counted failed."""


def backend_class(db: str) -> type[Backend]:
    """The Backend class of an installed backend, imported now (and its driver with it)."""
    found = registry.backends()[db].backend_class()
    if not issubclass(found, Backend):
        raise TypeError(f"the {db} backend's plug-in names {found!r}, which is not a Backend")
    return found


class Backend(abc.ABC):
    db: ClassVar[str]
    # The functions (docs/rules.md#function-the-built-in-function-set, bridge/functions.py)
    # this backend implements, by implementation name;
    # a rule naming another one is refused when the rules load.
    functions: ClassVar[frozenset[str]] = frozenset()
    # Set when a rule of the pool has `expired_time`: maintenance then trims.
    trim_enabled: bool = False
    # `hookbridge migrate-emqx44 --pool <db>.<pool>` (bridge/emqx44/cli.py): an async function
    # (pool, dry_run) -> lines to print that brings the data EMQX 4.4 Enterprise wrote to this
    # backend's layout, idempotently; None: the backend has none.
    emqx44_migration: ClassVar[Callable[[PoolConfig, bool], Coroutine[Any, Any, list[str]]] | None] = None

    def __init__(self, pool: PoolConfig, ctx: FunctionContext) -> None:
        self.pool = pool
        self.ctx = ctx

    @abc.abstractmethod
    async def connect(self) -> None:
        """Open the pool; create the schema when `auto_schema` is on."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        """Run a batch in order; one outcome per job (None: committed).

        Raise instead when the whole batch must be retried (connection lost):
        every write is idempotent, so replaying a partly applied batch is safe.
        """

    @abc.abstractmethod
    def is_recoverable(self, exc: BaseException) -> bool:
        """True for errors worth retrying (connection refused, timeout, loading)."""

    @abc.abstractmethod
    async def schema(self, apply: bool) -> str:
        """The tables / keys / indexes this pool needs, as text; create them with apply."""

    async def probe(self) -> None:  # noqa: B027 - every backend of the project overrides it
        """One cheap request (PING, `SELECT 1`): returns when the database answers, raises when it
        refuses. The runner calls it while the pool is idle, so a stalled database shows as down
        (/healthz) without traffic; a backend without one relies on its batches' timeouts."""

    async def maintenance(self) -> None:  # noqa: B027 - optional hook
        """Periodic work (trimming expired entries); called by the runner every `trim_interval`."""
