"""(hookpoint, topic) -> the rules to run, in `<n>` order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from bridge.events import Event, Hookpoint, event_topic
from bridge.rules import Rule
from bridge.topics import matches


class Engine:
    """An immutable set of compiled rules; a reload builds a new Engine."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = sorted(rules, key=lambda r: (r.order, r.db, r.id))
        self._by_hook: dict[Hookpoint, list[Rule]] = defaultdict(list)
        for rule in self.rules:
            self._by_hook[rule.hookpoint].append(rule)

    def match(self, event: Event) -> list[Rule]:
        candidates = self._by_hook.get(event.hookpoint)
        if not candidates:
            return []
        topic = event_topic(event)
        return [
            rule
            for rule in candidates
            if (rule.topics is None or (topic is not None and any(matches(f, topic) for f in rule.topics)))
            and rule.applies(event)
        ]

    @property
    def pools(self) -> set[str]:
        return {rule.pool for rule in self.rules}
