"""Topic names and filters as the codec must check them (OASIS 3.1.1 section 4.7, 5.0 sections
4.7 and 4.8.2): the general rules come from `bridge.topics`, the shared-subscription form
`$share/<group>/<filter>` is parsed here."""

from __future__ import annotations

from bridge.topics import filter_error

SHARE_PREFIX = "$share/"


def split_shared(topic_filter: str) -> tuple[str | None, str]:
    """(group, filter) for `$share/<group>/<filter>`; (None, topic_filter) for any other filter.
    Only meaningful on a filter the decoder accepted."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    _, group, rest = topic_filter.split("/", 2)
    return group, rest


def subscription_filter_error(topic_filter: str) -> str | None:
    """Why a filter in SUBSCRIBE or UNSUBSCRIBE is not valid, or None."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return filter_error(topic_filter)
    parts = topic_filter.split("/", 2)
    if len(parts) < 3:
        return f"shared subscription {topic_filter!r} has no topic filter after its group"
    group, rest = parts[1], parts[2]
    if not group or "+" in group or "#" in group:
        return f"shared subscription {topic_filter!r}: the group name must be non-empty, without '+' or '#'"
    problem = filter_error(rest)
    return None if problem is None else f"shared subscription {topic_filter!r}: {problem}"


def topic_wildcard_error(topic: str) -> str | None:
    """Why a topic name in PUBLISH or a will is not valid (text rules are checked on decoding)."""
    if "+" in topic or "#" in topic:
        return f"topic name {topic!r} contains a wildcard"
    return None
