"""What the API reads and calls of the bridge it serves: `Host`, which bridge/app.py's `Bridge` is.

A Protocol, so that the API does not import the bridge that installs it (app.py makes `Api(self)`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from bridge.brokers.base import BrokerSource
    from bridge.conf.config import Config
    from bridge.ops.metrics import Metrics
    from bridge.pipeline.engine import Engine
    from bridge.pipeline.runner import Runner


class Host(Protocol):
    @property
    def config(self) -> Config: ...

    @property
    def broker(self) -> BrokerSource: ...

    @property
    def engine(self) -> Engine: ...  # its rules: the ones loaded now

    @property
    def metrics(self) -> Metrics: ...

    @property
    def runners(self) -> dict[str, Runner]: ...  # by pool id

    @property
    def started_at(self) -> float: ...  # time.time() of the start

    def health(self) -> tuple[bool, dict[str, Any]]: ...  # /healthz: (ready, detail)

    async def reload(self) -> bool: ...  # SIGHUP's reload; False: refused, what was loaded stays
