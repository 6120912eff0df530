"""`broker.mode = emqx`: an EMQX 5 node's system messages, rule-engine events and REST API."""

from bridge.brokers.emqx.source import EmqxSource

__all__ = ["EmqxSource"]
