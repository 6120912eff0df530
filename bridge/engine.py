"""(hookpoint, topic) -> the rules to run, in `<n>` order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from bridge.events import Event, Hookpoint, event_topic
from bridge.rules import Rule
from bridge.topics import matches

_TOPIC_CACHE_SIZE = 65536


class Engine:
    """An immutable set of compiled rules; a reload builds a new Engine."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = sorted(rules, key=lambda r: (r.order, r.db, r.id))
        self._by_hook: dict[Hookpoint, list[Rule]] = defaultdict(list)
        for rule in self.rules:
            self._by_hook[rule.hookpoint].append(rule)
        # (hookpoint, topic) -> the rules whose topic filters match: matching every filter of
        # every rule per event was the engine's whole cost on the publish path.
        self._by_topic: dict[tuple[Hookpoint, str | None], list[Rule]] = {}

    def match(self, event: Event) -> list[Rule]:
        candidates = self._by_hook.get(event.hookpoint)
        if not candidates:
            return []
        topic = event_topic(event)
        key = (event.hookpoint, topic)
        by_topic = self._by_topic.get(key)
        if by_topic is None:
            by_topic = [
                rule
                for rule in candidates
                if rule.topics is None or (topic is not None and any(matches(f, topic) for f in rule.topics))
            ]
            if len(self._by_topic) >= _TOPIC_CACHE_SIZE:
                self._by_topic.clear()  # a fleet with more topics than this pays the match again
            self._by_topic[key] = by_topic
        return [rule for rule in by_topic if rule.applies(event)]

    def takes(self, hookpoint: Hookpoint) -> bool:
        """Whether any rule runs on this hookpoint."""
        return bool(self._by_hook.get(hookpoint))

    @property
    def pools(self) -> set[str]:
        return {rule.pool for rule in self.rules}
