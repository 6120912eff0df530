"""The topics of a sorted index (sortedkeys.py) that a filter matches, in order, from a cursor.

The API pages the retained messages of a filter (`GET /api/v1/retained?filter=...`) in topic
order. Testing every topic against the filter costs the whole store for a filter that matches
few of them, such as `+/42/meter/#` over 300,000 topics. Instead, each topic looked at that does
not match says where the next one that could match starts, and the walk jumps there (a binary
search): `site/07/meter/x` against `+/42/meter/#` jumps to `site/42`; `site/43/meter/x` to
`site0`, past every `site/...` topic. A page then costs the topics it returns plus, for each
branch of the tree the filter rules out, one look and one jump (a binary search), whatever the
number of topics in those branches.

Why the jumps are exact: in string order the topics that start with a given prefix are one
contiguous run, so "every topic under `a/b/`" is the range [`a/b/`, `a/b0`) ('0' follows '/'),
and "the first topic whose level k is `42`, under `a/`" is the first key at or after `a/42`.
"""

from __future__ import annotations

from collections.abc import Iterator

from bridge.brokers.embedded.sortedkeys import SortedKeys

# What `_next_candidate` answers besides a key to jump to.
MATCH = True  # the topic matches
NEXT = ""  # it does not, and the very next key may: step on
# None: no later topic can match; the walk ends


def _past_branch(prefix: str) -> str | None:
    """The first key after every topic that starts with `prefix` (which ends with '/')."""
    return prefix[:-1] + "0" if prefix else None  # '0' is the character after '/'


def _next_candidate(levels: list[str], topic: str) -> str | bool | None:
    """MATCH when the filter (its `levels`) matches `topic`; else the least key after `topic`
    that may match (NEXT: the following one), or None when no later topic can match."""
    if topic.startswith("$") and levels[0] in ("+", "#"):
        # MQTT 4.7.2: not matched by a leading wildcard; every `$` topic sorts before '%'
        return "%"
    start = 0  # where the topic's level k starts
    for level in levels:
        if level == "#":
            return MATCH  # (`a/#` matches `a` too)
        if start > len(topic):
            return NEXT  # the topic has fewer levels: a longer one just after it may match
        end = topic.find("/", start)
        if end < 0:
            end = len(topic)
        if level != "+" and topic[start:end] != level:
            prefix, rest = topic[:start], topic[start:]
            if rest < level:
                return prefix + level  # the first topic under `prefix` whose level is `level`
            if rest.startswith(level) and rest[len(level)] < "/":
                # `a-b` is past `a` but before `a/...` ('-' sorts before '/'): those are still ahead
                return prefix + level + "/"
            return _past_branch(prefix)  # this branch has no more candidates
        start = end + 1
    if start > len(topic):
        return MATCH  # as many levels as the filter
    return _past_branch(topic[:start])  # more levels than the filter: nothing under them matches


def matching_keys(keys: SortedKeys, topic_filter: str, after: str | None) -> Iterator[tuple[str, bool]]:
    """Each topic of `keys` after `after` (all for None) that the walk looks at, with whether
    `topic_filter` matches it, in order; the topics it jumps over are not looked at.

    A generator over the live index, like `SortedKeys.after`: read it within one loop turn."""
    levels = topic_filter.split("/")
    seek, inclusive = after, False
    while True:
        for topic in keys.after(seek, inclusive=inclusive):
            verdict = _next_candidate(levels, topic)
            yield topic, verdict is MATCH
            if verdict is MATCH or verdict == NEXT:
                continue
            if verdict is None:
                return
            assert isinstance(verdict, str)
            seek, inclusive = verdict, True
            break
        else:
            return
