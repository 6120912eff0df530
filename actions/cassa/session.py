"""cassandra-driver from asyncio: the cluster built from pool settings, and awaitable queries.

The driver runs its own I/O thread (the libev reactor its wheel ships); each
`execute_async` ResponseFuture is bridged to an asyncio future with
`call_soon_threadsafe`, so the event loop never blocks on the database. The
only blocking calls (connect, prepare) run in a worker thread.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

from cassandra import (
    AuthenticationFailed,
    ConsistencyLevel,
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
)
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.policies import ConstantReconnectionPolicy, DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage
from cassandra.query import SimpleStatement, tuple_factory

from bridge.plugin import PoolConfig, settings_context

# Worth retrying: no node reachable, node overloaded or restarting, a timeout (every write is idempotent).
RECOVERABLE: tuple[type[BaseException], ...] = (
    NoHostAvailable,
    OperationTimedOut,
    Unavailable,
    ReadTimeout,
    WriteTimeout,
    OverloadedErrorMessage,  # the coordinator sheds load: the server's state, not the write's fault
    IsBootstrappingErrorMessage,
    ConnectionError,
    TimeoutError,
)
try:  # the driver's "connection closed under us" (not exported from every build)
    from cassandra.connection import ConnectionBusy, ConnectionException, ConnectionShutdown

    RECOVERABLE += (ConnectionException, ConnectionShutdown, ConnectionBusy)
except ImportError:  # pragma: no cover
    pass


def build_cluster(pool: PoolConfig) -> Cluster:
    nodes = pool["nodes"] or [("127.0.0.1", 9042)]
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=pool["local_datacenter"])),
        consistency_level=ConsistencyLevel.name_to_value[pool["consistency"]],
        serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL,
        request_timeout=20,
        row_factory=tuple_factory,
    )
    auth = PlainTextAuthProvider(pool["username"], pool["password"]) if pool["username"] else None
    return Cluster(
        contact_points=list(nodes),
        port=nodes[0][1],
        auth_provider=auth,
        ssl_context=settings_context(pool.settings),
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        protocol_version=5,
        # A restarted node is used again within half a second (the default backs off up to 10 min).
        reconnection_policy=ConstantReconnectionPolicy(0.5, max_attempts=None),
        connect_timeout=5,
        control_connection_timeout=5,
        idle_heartbeat_interval=10,
    )


def fatal_connect_error(exc: BaseException) -> BaseException | None:
    """The error inside a failed connect that retrying cannot fix (bad login, TLS), if any."""
    errors = exc.errors.values() if isinstance(exc, NoHostAvailable) else [exc]
    for error in errors:
        # the driver reports a TLS failure as an OSError whose text carries the SSL error
        if isinstance(error, AuthenticationFailed | ssl.SSLError) or "[SSL" in str(error):
            return error
    return None


class AsyncSession:
    """Awaitable queries on a driver session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._prepared: dict[str, Any] = {}

    async def execute(self, statement: Any, args: Sequence[Any] | None = None) -> list[Any]:
        """Every row the statement returns, all pages."""
        loop = asyncio.get_running_loop()
        result: asyncio.Future[list[Any]] = loop.create_future()
        future = self.session.execute_async(statement, args)
        rows: list[Any] = []

        def page(current: Any) -> None:  # on the driver's thread
            rows.extend(current or ())
            if future.has_more_pages:
                future.start_fetching_next_page()  # the same callbacks fire for the next page
            else:
                loop.call_soon_threadsafe(_settle, result, rows, None)

        def failed(exc: BaseException) -> None:
            loop.call_soon_threadsafe(_settle, result, None, exc)

        future.add_callbacks(page, failed)
        return await result

    async def pages(
        self, statement: str, args: Sequence[Any] | None = None, size: int = 1000
    ) -> AsyncIterator[list[Any]]:
        """The rows of a whole-table read page by page, so that it is never in memory at once
        (hookbridge migrate-emqx44). Each page is fetched in a worker thread."""
        query = SimpleStatement(statement, fetch_size=size)
        state = None
        while True:
            result = await asyncio.to_thread(self.session.execute, query, args, paging_state=state)
            yield list(result.current_rows)
            state = result.paging_state
            if state is None:
                return

    async def prepare(self, text: str) -> Any:
        """A prepared statement, prepared once per text (the driver re-prepares after a node restart)."""
        prepared = self._prepared.get(text)
        if prepared is None:
            prepared = await asyncio.to_thread(self.session.prepare, text)
            if len(self._prepared) > 10_000:  # templates can render many texts; keep the cache bounded
                self._prepared.clear()
            self._prepared[text] = prepared
        return prepared


def _settle(result: asyncio.Future[list[Any]], rows: list[Any] | None, exc: BaseException | None) -> None:
    if result.done():  # cancelled meanwhile
        return
    if exc is not None:
        result.set_exception(exc)
    else:
        result.set_result(rows or [])
