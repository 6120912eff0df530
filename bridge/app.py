"""Lifecycle: broker source -> dispatcher -> engine -> runners -> backends.

`Bridge.load` validates everything (config, rules, templates) before anything
starts; `start` connects the pools, then opens the broker; `stop` closes the
broker first (no new events), drains the runners, then closes the pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.api.routes import Api
from bridge.backend import FunctionContext, backend_class
from bridge.brokers.base import BrokerSource
from bridge.brokers.delivery import DeliveryLog
from bridge.conf import registry
from bridge.conf.config import Config, load_config
from bridge.conf.errors import ConfError, ConfErrors
from bridge.conf.schema import global_settings
from bridge.conf.tls import http_listener_context
from bridge.msgid import MsgIdGenerator
from bridge.ops.broker_metrics import BrokerMetrics
from bridge.ops.http import StatusServer
from bridge.ops.metrics import Metrics
from bridge.ops.redact import Redactor
from bridge.pipeline.deadletter import DeadLetters
from bridge.pipeline.dispatcher import Dispatcher
from bridge.pipeline.engine import Engine
from bridge.pipeline.runner import Runner
from bridge.pipeline.spool import Budget
from bridge.pipeline.status import bridge_status
from bridge.rules import Rule, RuleContext, load_rules

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Paths:
    config: Path
    rules: Path

    @property
    def templates(self) -> Path:
        return self.rules.parent / "templates"


def load_all(paths: Paths) -> tuple[Config, list[Rule]]:
    """Config + rules + templates, every problem reported at once (ConfErrors)."""
    config_errors: list[ConfError] = []
    try:
        config = load_config(paths.config)
    except ConfErrors as exc:
        if not isinstance(exc.partial, Config):  # the file could not be read: nothing to check rules by
            raise
        config, config_errors = exc.partial, exc.errors
    mode = registry.modes()[config["broker.mode"]]  # the config only takes an installed mode
    ctx = RuleContext(config, paths.templates, frozenset(registry.backends()), mode.capabilities)
    try:
        rules = load_rules(paths.rules, ctx)
    except ConfErrors as exc:
        raise ConfErrors(config_errors + exc.errors) from None
    if config_errors:
        raise ConfErrors(config_errors)
    return config, rules


class Bridge:
    def __init__(self, config: Config, rules: list[Rule], paths: Paths, broker: BrokerSource | None = None) -> None:
        self.config = config
        self.paths = paths
        self.metrics = Metrics()
        # Masks secrets wherever the bridge prints (logs, /healthz); a reload adds new pools' ones.
        self.redactor = Redactor(config.secrets)
        self.msgids = MsgIdGenerator(config["node.name"])
        self.broker = broker or self._make_broker(rules)
        self.engine = Engine(rules)
        self.runners: dict[str, Runner] = {}
        self.dispatcher = Dispatcher(self.engine, self.runners, self.metrics)
        self.deliveries = DeliveryLog()
        # One byte bound for the spools of every pool.
        self.spool_budget = Budget(config["spool.max_bytes"], config["spool.overflow"])
        self.dead_letters = DeadLetters(Path(config["deadletter.dir"]), config["deadletter.max_bytes"], self.metrics)
        self.status: StatusServer | None = None
        self.api: Api | None = None  # the management API, when api.enabled
        self.started_at = time.time()
        self._stopped = False
        for rule in rules:
            self.metrics.rule_pool[rule.id] = rule.pool

    @classmethod
    def load(cls, paths: Paths, broker: BrokerSource | None = None) -> Bridge:
        config, rules = load_all(paths)
        return cls(config, rules, paths, broker)

    def _make_broker(self, rules: list[Rule]) -> BrokerSource:
        """The configured mode's source, from its plug-in (its modules load only in that mode)."""
        source = registry.modes()[self.config["broker.mode"]].source_factory()(self.config, rules, self.msgids)
        if not isinstance(source, BrokerSource):
            raise TypeError(f"broker mode {self.config['broker.mode']} made {source!r}, which is not a BrokerSource")
        return source

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        for pool_id in sorted(self.engine.pools):
            self.runners[pool_id] = await self._start_pool(pool_id, self.engine.rules)
        unused = set(self.config.pools) - self.engine.pools
        read_by = {
            self.config[key]: key for key, setting in global_settings().items() if setting.pool_ref and self.config[key]
        }
        for pool_id in sorted(unused):
            if pool_id in read_by:  # the broker's users or ACL: read on their own connection, when needed
                log.info("pool %s: no rule writes to it; %s reads from it", pool_id, read_by[pool_id])
            else:
                log.info("pool %s is configured but no rule uses it; not connecting", pool_id)
        self._gauges()
        # Brokers ack a message once every job of it is done
        # (docs/architecture.md#acknowledged-means-kept): the dispatcher then
        # returns a future per event, resolved through the runners' commit hooks.
        self.dispatcher.track_commits = self.broker.acks_after_commit
        listener = self.config["metrics.listener"]
        if listener is not None:
            api = self.api = Api(self) if self.config["api.enabled"] else None
            self.status = StatusServer(
                listener[0],
                listener[1],
                self.metrics.render_fresh,
                self.health,
                self.redactor,
                routes=api.install if api is not None else None,
                max_body=self.config["api.max_body"],
                ssl_context=http_listener_context(self.config.settings),
            )
            await self.status.start()
        # $SYS/broker/hookbridge/...: read at each interval (a reload replaces the engine and runners)
        self.broker.report_bridge_status(
            lambda: bridge_status(self.runners, self.spool_budget, self.engine, self.metrics)
        )
        await self.broker.start(self.dispatcher)
        log.info(
            "hookbridge %s running: %d rules, pools %s, broker %s",
            self.config["node.name"],
            len(self.engine.rules),
            ", ".join(sorted(self.runners)) or "none",
            self.broker.mode,
        )

    async def _start_pool(self, pool_id: str, rules: list[Rule]) -> Runner:
        """Connect a pool and start its runner, for `rules` (the ones loaded now, or being loaded)."""
        pool = self.config.pools[pool_id]
        ctx = FunctionContext(
            node=self.config["node.name"], broker=self.broker, pager=self.dispatcher.pager, deliveries=self.deliveries
        )
        backend = backend_class(pool.db)(pool, ctx)
        backend.trim_enabled = any(r.expired_time for r in rules if r.pool == pool_id)  # maintenance: trim
        try:
            await backend.connect()
            runner = Runner(pool, backend, self.metrics, Path(self.config["spool.dir"]), self.spool_budget)
            runner.rules = {rule.id: rule for rule in rules if rule.pool == pool_id}
            runner.commit_hooks.append(self.dispatcher.job_done)  # "this job is done" (broker acks)
            runner.failure_hooks.append(self.dead_letters.add)  # a failed action is kept, not dropped
            ctx.publishes_committed = runner.publishes_committed
            await runner.start()
        except BaseException:
            with contextlib.suppress(Exception):  # a half-made connection pool: let it go
                await backend.close()
            raise
        log.info("pool %s connected", pool_id)
        return runner

    async def stop(self, drain_timeout: float = 10.0, *, retire: bool = False) -> None:
        """Drain and close. `retire`: this bridge is not coming back (a worker scaled down), so
        the broker session is emptied and ended instead of kept for the next run."""
        if self._stopped:
            return
        self._stopped = True
        if retire:
            await self.broker.retire()
        await self.broker.stop()
        for runner in self.runners.values():
            await runner.stop(drain_timeout)
            await runner.backend.close()
        if self.status is not None:
            await self.status.stop()
        log.info("hookbridge stopped")

    async def reload(self) -> bool:
        """Reload rules and the broker's password and ACL files (SIGHUP). On any error the old rules
        stay and every error is logged.

        Pools the new rules use for the first time are connected before anything changes; one
        that cannot connect (a wrong password) refuses the whole reload, and the pools connected
        for it are closed again.
        """
        for problem in self.broker.reload():  # the password and ACL files: on a problem the old ones stay
            log.error("not reloaded, the users and ACL entries read before stay: %s", problem)
        try:
            config, rules = load_all(self.paths)
        except ConfErrors as exc:
            return self._refuse_reload([str(error) for error in exc.errors])
        self.redactor.add(config.secrets)
        if self.api is not None:  # the API keys, as the config now reads (a config error keeps the old ones)
            self.api.access.replace(config["api.keys"] or {})
        engine = Engine(rules)
        new_pools = sorted(engine.pools - set(self.runners))
        self.config.pools.update({p: config.pools[p] for p in new_pools})
        started: dict[str, Runner] = {}
        for pool_id in new_pools:
            try:
                started[pool_id] = await self._start_pool(pool_id, rules)
            except Exception as exc:
                await self._forget_pools(started, new_pools)
                return self._refuse_reload([f"pool {pool_id} cannot connect: {exc or type(exc).__name__}"])
        self.runners.update(started)
        for rule in rules:
            self.metrics.rule_pool[rule.id] = rule.pool
        for pool_id, runner in self.runners.items():  # spooled actions of removed rules get dropped, counted
            runner.rules = {rule.id: rule for rule in rules if rule.pool == pool_id}
            runner.backend.trim_enabled = any(rule.expired_time for rule in runner.rules.values())
        self.engine = engine
        self.dispatcher.swap(engine)
        log.info("rules reloaded: %d rules", len(rules))
        return True

    def _refuse_reload(self, problems: list[str]) -> bool:
        for problem in problems:
            log.error("reload refused: %s", problem)
        log.error("reload refused: keeping the %d rules loaded before", len(self.engine.rules))
        return False

    async def _forget_pools(self, started: dict[str, Runner], new_pools: list[str]) -> None:
        """Undo a refused reload's new pools: stop what was started, drop their settings."""
        for runner in started.values():
            await runner.stop(1.0)  # nothing was routed to it yet
            await runner.backend.close()
        for pool_id in new_pools:
            self.config.pools.pop(pool_id, None)

    async def idle(self) -> None:
        """Wait until every event the broker has seen is handled and written (tests, benchmarks).

        Writes can cause new events (a fetch delivers, the delivery fires message.delivered),
        so this repeats until broker and runners are quiet at the same time.
        """
        while True:
            await self.broker.idle()
            for runner in list(self.runners.values()):
                await runner.idle()
            await asyncio.sleep(0)  # let a pager follow-up or a broker event start
            if (
                not self.broker.busy
                and not self.dispatcher.pager.resubmitting
                and all(runner.quiet for runner in self.runners.values())
            ):
                return

    # -- health --------------------------------------------------------------

    def _gauges(self) -> None:
        self.metrics.gauge(
            "hookbridge_queue_depth",
            "Actions waiting, per pool",
            lambda: {p: float(r.depth) for p, r in self.runners.items()},
        )
        self.metrics.gauge(
            "hookbridge_pool_up",
            "1 when the pool's last write worked",
            lambda: {p: float(r.healthy) for p, r in self.runners.items()},
            merge="each",
        )
        self.metrics.gauge(
            "hookbridge_broker_up",
            "1 while the broker source is serving",
            lambda: {self.broker.mode: float(self.broker.is_connected())},
            merge="each",
        )
        self.metrics.gauge(
            "hookbridge_broker_dropped_messages",
            "Queued messages dropped because a session's queue was full (count or bytes), all sessions",
            lambda: {self.broker.mode: float(self.broker.dropped_messages)},
        )
        if self.config["broker.durable_sessions"]:
            self.metrics.gauge(
                "hookbridge_broker_durable_sessions",
                "Durable sessions in the embedded broker's store (broker.durable_sessions)",
                lambda: {self.broker.mode: float(self.broker.durable.get("sessions", 0))},
            )
            self.metrics.gauge(
                "hookbridge_broker_durable_messages",
                "Messages in the durable store's log: each once, however many sessions are owed it",
                lambda: {self.broker.mode: float(self.broker.durable.get("messages", 0))},
            )
            self.metrics.gauge(
                "hookbridge_broker_durable_sessions_unloaded",
                "Durable sessions restored at start whose queue is not read back from the store yet"
                " (it is when the client returns or something first needs it)",
                lambda: {self.broker.mode: float(self.broker.durable.get("unloaded", 0))},
            )
            self.metrics.gauge(
                "hookbridge_broker_durable_store_up",
                "1 while the durable store can write: its last commit worked, none failed in the last"
                " 30 s, and its disk has broker.durable_min_free free (/healthz says why not)",
                lambda: {self.broker.mode: float(bool((self.broker.durable_health() or {}).get("up")))},
                merge="each",
            )
        self._refusals()
        if self.config["broker.mode"] == "embedded":
            BrokerMetrics(self.broker).register(self.metrics)  # connections, traffic, drops
            self.metrics.counter(
                "hookbridge_broker_output_paused_total",
                "Times the embedded broker stopped reading from a client that had not taken "
                "broker.max_output_bytes of its output (PUBACKs, PINGRESPs, messages)",
                lambda: {self.broker.mode: float(self.broker.output_pauses)},
                label="pool",
            )
        self.metrics.gauge(
            "hookbridge_spool_bytes",
            "Bytes of spooled actions on disk, per pool",
            lambda: {p: float(r.spool.bytes if r.spool else 0) for p, r in self.runners.items()},
        )
        self.metrics.gauge(
            "hookbridge_spooled_actions",
            "Actions waiting in the spool, per pool",
            lambda: {p: float(r.spool.pending if r.spool else 0) for p, r in self.runners.items()},
        )
        self.metrics.gauge(
            "hookbridge_broker_inflight",
            "Messages received from an external broker and not yet acknowledged (bounded by receive maximum)",
            lambda: {self.broker.mode: float(self.broker.inflight)},
        )
        self.metrics.gauge(
            "hookbridge_fetches_paging",
            "Offline fetches waiting for acks to send the next page",
            lambda: {"all": float(self.dispatcher.pager.paging)},
        )

    def _refusals(self) -> None:
        """What the broker refused (the embedded one: limits, logins, ACL), every reason shown from
        the start so a rate can be alerted on before the first refusal."""
        if not self.broker.refusal_reasons:
            return
        reasons = dict.fromkeys(self.broker.refusal_reasons, 0)
        self.metrics.counter(
            "hookbridge_broker_refused_total",
            "Connections, packets, logins and queued messages the embedded broker refused or dropped, by reason",
            lambda: {**reasons, **self.broker.refused},  # a reason counted but not declared shows too
            label="reason",
        )

    def health(self) -> tuple[bool, dict[str, Any]]:
        pools = {
            pool_id: {
                "up": runner.healthy,
                "queue": runner.depth,
                "spooled": runner.spool.pending if runner.spool else 0,
                "error": runner.last_error,
                "spool_error": runner.spool_error,
            }
            for pool_id, runner in self.runners.items()
        }
        broker_up = self.broker.is_connected()
        budget = self.spool_budget
        spool = {"bytes": budget.used, "max_bytes": budget.max_bytes, "near_full": budget.near_full}
        writable = not any(runner.spool_error for runner in self.runners.values())
        durable = self.broker.durable_health()  # the embedded broker's durable store, when on
        ready = broker_up and all(p["up"] for p in pools.values()) and not budget.near_full and writable
        ready = ready and (durable is None or bool(durable["up"]))
        detail = {
            "ready": ready,
            "broker": {"mode": self.broker.mode, "up": broker_up},
            "pools": pools,
            "spool": spool,
        }
        if durable is not None:
            detail["durable"] = dict(durable)
        return ready, detail
