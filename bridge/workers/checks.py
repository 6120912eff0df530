"""What `--workers N` asks of the config (errors) and of the rules (a warning about order).

Both `check` and `run` call these, so `check --workers N` refuses exactly what `run --workers N`
would. N workers share one subscription through `$share/<broker.shared_group>/...`, so only a
broker mode that declares shared subscriptions (mqtt, emqx) can run more than one.
"""

from __future__ import annotations

from bridge import registry
from bridge.conf.config import Config
from bridge.conf.errors import ConfError, Position
from bridge.events import Hookpoint
from bridge.rules import FunctionAction, Rule

# Hooks whose events change one client's state (online, its subscriptions, its offsets): a custom
# action on them (commands, sql, cql, template) usually keeps that state, which order decides.
_STATE_HOOKS = {
    Hookpoint.CLIENT_CONNECTED: "status",
    Hookpoint.CLIENT_DISCONNECTED: "status",
    Hookpoint.SESSION_SUBSCRIBED: "subscriptions",
    Hookpoint.SESSION_UNSUBSCRIBED: "subscriptions",
    Hookpoint.MESSAGE_ACKED: "offsets",
}

WHY = (
    "Mosquitto hands a shared subscription's messages out round-robin, so events of one client or "
    "topic can be applied out of order across workers; per-(publisher, topic) order holds only "
    "where the broker hashes (EMQX broker.shared_subscription_strategy = hash_clientid or "
    'hash_topic); see docs/operations.md "Several workers"'
)


def worker_problems(config: Config, workers: int) -> list[ConfError]:
    """Why `config` cannot run as `workers` processes (nothing when workers is 1)."""
    if workers <= 1:
        return []
    mode = config["broker.mode"]
    if not registry.modes()[mode].shared_subscriptions:
        able = " or ".join(name for name, plugin in registry.modes().items() if plugin.shared_subscriptions)
        default = "" if "broker.mode" in config.values_at else f" (broker.mode is not set: {mode} is the default)"
        where = config.values_at.get("broker.mode", Position(config.path, 1, 1))
        return [
            ConfError(
                where,
                f"--workers {workers} needs broker.mode = {able}{default}: the workers share the "
                f"broker's messages through one shared subscription; {mode} mode runs as one process",
            )
        ]
    if not config["broker.shared_group"]:
        return [
            ConfError(
                _shared_group_place(config),
                f"--workers {workers} needs broker.shared_group: each worker subscribes through "
                "$share/<group>/<filter>, so the broker gives every message to one of them "
                "(add e.g. `broker.shared_group = hookbridge`)",
            )
        ]
    return []


def _shared_group_place(config: Config) -> Position:
    """Where broker.shared_group is (set empty), or where it belongs: the line after the last
    `broker.` setting, among the broker's settings."""
    if "broker.shared_group" in config.values_at:
        return config.values_at["broker.shared_group"]
    broker_lines = [at.line for key, at in config.keys_at.items() if key.startswith("broker.")]
    return Position(config.path, max(broker_lines) + 1 if broker_lines else 1, 1)


def needs_order(rule: Rule) -> str:
    """What a rule keeps that event order decides ("status", "retain", ...), or ""."""
    if isinstance(rule.action, FunctionAction):
        return rule.action.spec.needs_order
    return _STATE_HOOKS.get(rule.hookpoint, "")


def ordering_warnings(rules: list[Rule], workers: int) -> list[str]:
    """One `path:line:col: warning: ...` line per rule that needs order, then why (nothing for one worker)."""
    if workers <= 1:
        return []
    lines = []
    for rule in rules:
        what = needs_order(rule)
        if not what:
            continue
        custom = f"a custom action on {rule.hookpoint}"
        action = rule.action.spec.name if isinstance(rule.action, FunctionAction) else custom
        lines.append(
            f"{rule.where}: warning: {rule.id} ({action}) keeps {what}, which needs its events in order; "
            f"--workers {workers} spreads them over {workers} processes"
        )
    if lines:
        lines.append(f"warning: {WHY}")
    return lines
