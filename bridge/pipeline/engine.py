"""(hookpoint, topic) -> the rules to run, in `<n>` order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from bridge.events import Event, Hookpoint, event_topic
from bridge.rules import Rule
from bridge.topics import matches

_TOPIC_CACHE_SIZE = 65536

# Each rule with its function's check (`Rule.applies`; None: it takes every event): Engine.match.
_Checks = list[tuple[Rule, Callable[[Any, Any], bool] | None]]


class Engine:
    """An immutable set of compiled rules; a reload builds a new Engine."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = sorted(rules, key=lambda r: (r.order, r.db, r.id))
        self._by_hook: dict[Hookpoint, list[Rule]] = defaultdict(list)
        for rule in self.rules:
            self._by_hook[rule.hookpoint].append(rule)
        # (hookpoint, topic) -> the rules whose topic filters match: matching every filter of
        # every rule per event was the engine's whole cost on the publish path.
        # The cached value also holds, when any of those rules may skip an event, each rule's check.
        self._by_topic: dict[tuple[Hookpoint, str | None], tuple[list[Rule], _Checks | None]] = {}

    def match(self, event: Event) -> list[Rule]:
        """The rules to run for `event` (do not modify the list: it may be the cache's)."""
        by_topic, checks = self._matching(event.hookpoint, event_topic(event))
        if checks is None:
            return by_topic
        # Each check is looked up once per topic (Rule.applies is an interpreted property), then
        # called directly for every event.
        return [rule for rule, applies in checks if applies is None or applies(event, rule)]

    def _matching(self, hookpoint: Hookpoint, topic: str | None) -> tuple[list[Rule], _Checks | None]:
        """The rules of `hookpoint` whose topic filters match `topic` (cached per topic), and,
        when any of them may skip an event, each with its function's check (`Rule.applies`)."""
        key = (hookpoint, topic)
        cached = self._by_topic.get(key)
        if cached is None:
            by_topic = [
                rule
                for rule in self._by_hook.get(hookpoint, ())
                if rule.topics is None or (topic is not None and any(matches(f, topic) for f in rule.topics))
            ]
            checks = [(rule, rule.applies) for rule in by_topic]
            cached = by_topic, None if all(applies is None for _, applies in checks) else checks
            if len(self._by_topic) >= _TOPIC_CACHE_SIZE:
                self._by_topic.clear()  # a fleet with more topics than this pays the match again
            self._by_topic[key] = cached
        return cached

    def takes(self, hookpoint: Hookpoint, topic: str | None = None) -> bool:
        """Whether a rule may run on this hookpoint (for this topic, when one is given)."""
        if not self._by_hook.get(hookpoint):
            # No rule on the hookpoint: nothing to match, and no entry in the per-topic cache (a
            # fleet's deliveries and acks would fill it with one empty entry per topic).
            return False
        return topic is None or bool(self._matching(hookpoint, topic)[0])

    @property
    def pools(self) -> set[str]:
        return {rule.pool for rule in self.rules}
