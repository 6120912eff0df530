"""Build configs and rule sets for tests."""

from __future__ import annotations

from pathlib import Path

from bridge.conf import registry
from bridge.conf.config import Config, parse_config
from bridge.rules import RuleContext

BASE_CONFIG = """\
node.name = test@127.0.0.1
broker.listener.tcp = 127.0.0.1:0
metrics.listener = off
"""


def config_text(redis_port: int = 6379, extra: str = "", pools: str | None = None) -> str:
    """The test config: one Redis pool on `redis_port`, or the given pool lines instead."""
    if pools is None:
        pools = f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\nbackend.redis.pool1.batch_time = 1ms\n"
    return BASE_CONFIG + pools + extra


def make_config(redis_port: int = 6379, extra: str = "") -> Config:
    return parse_config("config/bridge.conf", config_text(redis_port, extra))


def rule_context(config: Config, templates: Path) -> RuleContext:
    return RuleContext(config, templates, frozenset(registry.backends()), registry.modes()["embedded"].capabilities)
