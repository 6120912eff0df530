"""What `--workers N` asks of the config (errors) and of the rules (a warning about order).

Both `check` and `run` call these, so `check --workers N` refuses exactly what `run --workers N`
would. N workers share one subscription through `$share/<broker.shared_group>/...`, so only a
broker mode that declares shared subscriptions (mqtt, emqx) can run more than one.
"""

from __future__ import annotations

from bridge.conf import registry
from bridge.conf.config import Config
from bridge.conf.errors import ConfError, Position
from bridge.events import Hookpoint
from bridge.rules import FunctionAction, Rule

# What --workers N spreads: the broker hands each message to one of the N sessions, so the
# message.publish events of one topic and publisher may be applied by two processes at once.
# Client, session and ack events are not spread: worker 0 alone subscribes to them (Mosquitto's
# log topics, EMQX's $SYS and rule events), so they keep the order the broker sent them in.
_SPREAD_BECAUSE = {
    Hookpoint.MESSAGE_PUBLISH: "its message.publish events are spread over the workers",
    # an ack refers to a message a message.publish rule stores, in whichever worker took it
    Hookpoint.MESSAGE_ACKED: "the message an ack refers to may still be on its way to the database in another worker",
}

WHY = (
    "Mosquitto hands a shared subscription's messages out round-robin, so two messages of one "
    "publisher and topic can be applied out of order by two workers; per-(publisher, topic) order holds only "
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
    """What a rule keeps that event order decides ("status", "retain", "offsets"), or ""."""
    return rule.action.spec.needs_order if isinstance(rule.action, FunctionAction) else ""


def ordering_warnings(rules: list[Rule], workers: int) -> list[str]:
    """One `path:line:col: warning: ...` line per rule whose result N workers may get wrong, then
    why (nothing for one worker). Custom actions cannot be judged: docs/operations.md says what to
    look for."""
    if workers <= 1:
        return []
    lines = []
    for rule in rules:
        what, because = needs_order(rule), _SPREAD_BECAUSE.get(rule.hookpoint, "")
        if what and because:
            name = rule.action.spec.name if isinstance(rule.action, FunctionAction) else ""
            lines.append(
                f"{rule.where}: warning: {rule.id} ({name}) keeps {what}, which needs events in order, "
                f"and with --workers {workers} {because}"
            )
    if lines:
        lines.append(f"warning: {WHY}")
    return lines
