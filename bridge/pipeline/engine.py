"""(hookpoint, topic) -> the rules to run, in `<n>` order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from bridge.events import Event, Hookpoint, event_topic
from bridge.rules import FunctionAction, Rule
from bridge.topics import matches

_TOPIC_CACHE_SIZE = 65536

# Each rule with its function's `applies` (None: it takes every event): see Engine.match.
_Checks = list[tuple[Rule, Callable[[Any, Any], bool] | None]]


def _check(rule: Rule) -> Callable[[Any, Any], bool] | None:
    """What Rule.applies calls for this rule; None when it always says yes."""
    action = rule.action
    return action.spec.applies if isinstance(action, FunctionAction) else None


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
        # A function's own check, called directly: Rule.applies is an interpreted call per rule
        # and event on every message's path.
        return [rule for rule, applies in checks if applies is None or applies(event, rule)]

    def _matching(self, hookpoint: Hookpoint, topic: str | None) -> tuple[list[Rule], _Checks | None]:
        """The rules of `hookpoint` whose topic filters match `topic` (cached per topic), and,
        when any of them may skip an event (`Rule.selective`), each with its function's check."""
        key = (hookpoint, topic)
        cached = self._by_topic.get(key)
        if cached is None:
            by_topic = [
                rule
                for rule in self._by_hook.get(hookpoint, ())
                if rule.topics is None or (topic is not None and any(matches(f, topic) for f in rule.topics))
            ]
            checks = [(rule, _check(rule)) for rule in by_topic] if any(r.selective for r in by_topic) else None
            cached = by_topic, checks
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
