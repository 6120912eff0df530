"""MQTT topic names and filters: validation and matching (MQTT 3.1.1 section 4.7)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from functools import lru_cache


def filter_error(topic_filter: str) -> str | None:
    """Why `topic_filter` is not a valid MQTT topic filter, or None when it is."""
    if not topic_filter:
        return "topic filter must not be empty"
    if "\x00" in topic_filter:
        return "topic filter must not contain NUL"
    if len(topic_filter.encode("utf-8", "surrogatepass")) > 65535:
        return "topic filter is longer than 65535 bytes"
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            return f"bad topic filter {topic_filter!r}: '#' must be a whole level and the last one"
        if "+" in level and level != "+":
            return f"bad topic filter {topic_filter!r}: '+' must be a whole level"
    return None


def topic_name_error(topic: str) -> str | None:
    """Why `topic` is not a valid topic name for PUBLISH, or None."""
    if not topic:
        return "topic name must not be empty"
    if "+" in topic or "#" in topic:
        return "topic name must not contain wildcards"
    if "\x00" in topic:
        return "topic name must not contain NUL"
    return None


def is_wildcard(topic_filter: str) -> bool:
    return "+" in topic_filter or "#" in topic_filter


@lru_cache(maxsize=4096)
def _levels(topic_filter: str) -> tuple[str, ...]:
    return tuple(topic_filter.split("/"))


def matches(topic_filter: str, topic: str) -> bool:
    """True when `topic` matches `topic_filter`.

    Topics starting with `$` are not matched by a filter whose first level is a
    wildcard ([MQTT-4.7.2-1]). `a/#` also matches `a` ([MQTT-4.7.1-2]).
    """
    if topic_filter == "#":  # the most common rule filter
        return not topic.startswith("$")
    if not is_wildcard(topic_filter):
        return topic_filter == topic
    if topic.startswith("$") and topic_filter[0] in "+#":
        return False
    pattern = _levels(topic_filter)
    levels = topic.split("/")
    for index, level in enumerate(pattern):
        if level == "#":
            return True
        if index >= len(levels):
            return False
        if level != "+" and level != levels[index]:
            return False
    return len(levels) == len(pattern)


def literal_prefix(topic_filter: str) -> str:
    """The part of a filter before its first wildcard level (for index scans)."""
    prefix: list[str] = []
    for level in _levels(topic_filter):
        if level in ("+", "#"):
            break
        prefix.append(level)
    return "/".join(prefix)


def prefix_range(topic_filter: str) -> tuple[str, str | None] | None:
    """The [low, high) range of strings holding every topic the filter can match; None: all.

    For an index range scan: candidates are then checked with `matches`. Code point order
    is also UTF-8 byte order, so the range is right for binary string comparison too.
    """
    prefix = literal_prefix(topic_filter)
    if not prefix:
        return None
    following = ord(prefix[-1]) + 1
    if following == 0xD800:  # surrogates are not characters: skip past them
        following = 0xE000
    return prefix, (prefix[:-1] + chr(following)) if following <= 0x10FFFF else None


async def matching(topic_filter: str, candidates: Callable[[str], Awaitable[Iterable[str]]]) -> list[str]:
    """The topics a filter matches, sorted.

    An exact topic is its own answer (nothing is read); for a wildcard filter, a store's
    `candidates` (a superset, such as the topics under the filter's literal prefix) are matched
    by MQTT rules.
    """
    if not is_wildcard(topic_filter):
        return [topic_filter]
    return sorted(topic for topic in await candidates(topic_filter) if matches(topic_filter, topic))
