"""ACL entries and the `Permissions` one client gets from them
(docs/security.md#4-who-may-publish-and-subscribe-acl-file-database-acls).

Entries come from the ACL file (aclfile.py, Mosquitto's `acl_file` format) and from a database
(acldb.py, EMQX 4's layouts). Both end as `Entry` rows; `ClientPermissions` compiles the rows
that apply to one client (with `%u` / `%c` filled in) into one regular expression per question,
so a check on the per-message path is a single `fullmatch`:

- a matching deny entry refuses, whatever grants it (Mosquitto: "deny topics are handled before
  topics that grant"; the order of database rows is not defined, so denies win there too);
- else a matching grant allows;
- else `broker.acl.nomatch` decides, except for `$SYS` topics, which only an entry opens.

SUBSCRIBE asks whether an entry *covers* the filter (every topic the filter can match, the
entry matches too), so a client that may read `dev/#` cannot subscribe to `#`; a client that
may subscribe to `#` but not read `secret/#` is filtered per message on delivery instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from bridge.accounts import READ, WRITE, Entry

CLIENTID, USERNAME = "%c", "%u"
_FORBIDDEN_IN_LEVEL = ("/", "+", "#")


def fill(entry: Entry, username: str | None, clientid: str) -> str | None:
    """The entry's filter for one client, or None when it cannot apply to that client.

    A placeholder is a whole level. A value that is missing (no user name) or that would
    change the filter's shape (`/`, `+`, `#` in a client id) makes the entry not apply: a
    client must not widen its own grant by choosing its client id.
    """
    if not entry.substitute or ("%" not in entry.topic_filter):
        return entry.topic_filter
    levels = entry.topic_filter.split("/")
    for index, level in enumerate(levels):
        if level not in (CLIENTID, USERNAME):
            continue
        value = clientid if level == CLIENTID else username
        if not value or any(char in value for char in _FORBIDDEN_IN_LEVEL):
            return None
        levels[index] = value
    return "/".join(levels)


@lru_cache(maxsize=16384)
def filter_regex(topic_filter: str) -> str:
    """The regular expression of the topics a filter matches (fullmatch), per MQTT 4.7."""
    parts: list[str] = []
    for index, level in enumerate(topic_filter.split("/")):
        first = index == 0
        if level == "#":
            if first:
                return r"(?!\$).*"  # `#` never matches a `$` topic [MQTT-4.7.2-1]
            return "/".join(parts) + r"(?:/.*)?"  # `a/#` matches `a` too [MQTT-4.7.1-2]
        if level == "+":
            parts.append(r"(?!\$)[^/]*" if first else r"[^/]*")
        else:
            parts.append(re.escape(level))
    return "/".join(parts)


Matcher = Callable[[str], object]


def _never(topic: str) -> object:
    return None


@lru_cache(maxsize=4096)
def _union(filters: tuple[str, ...]) -> Matcher:
    """One compiled test for "any of these filters matches the topic"."""
    if not filters:
        return _never
    return re.compile("|".join(f"(?:{filter_regex(f)})" for f in filters), re.DOTALL).fullmatch


def covers(acl_filter: tuple[str, ...], topic_filter: tuple[str, ...]) -> bool:
    """Whether every topic `topic_filter` can match is matched by `acl_filter` (levels)."""
    if topic_filter[0].startswith("$") and acl_filter[0] in ("+", "#"):
        return False
    for index, level in enumerate(acl_filter):
        if level == "#":
            return True
        if index >= len(topic_filter):
            return False
        wanted = topic_filter[index]
        if wanted == "#" or (level != "+" and (wanted == "+" or level != wanted)):
            return False
    return len(topic_filter) == len(acl_filter)


def is_sys(topic: str) -> bool:
    return topic == "$SYS" or topic.startswith("$SYS/")


class ClientPermissions:
    """What one client may do, compiled from the entries that apply to it (access.Permissions)."""

    __slots__ = (
        "_deny_read",
        "_deny_write",
        "_nomatch",
        "_read",
        "_sub_denies",
        "_sub_grants",
        "_write",
        "superuser",
    )

    def __init__(
        self, entries: Iterable[Entry], username: str | None, clientid: str, *, nomatch: bool, superuser: bool = False
    ) -> None:
        self.superuser = superuser
        self._nomatch = nomatch
        filled = [(entry, f) for entry in entries if (f := fill(entry, username, clientid)) is not None]

        def pick(access: int, allow: bool) -> tuple[str, ...]:
            return tuple(dict.fromkeys(f for e, f in filled if e.allow is allow and e.access & access))

        self._read = _union(pick(READ, True))
        self._write = _union(pick(WRITE, True))
        self._deny_read = _union(pick(READ, False))
        self._deny_write = _union(pick(WRITE, False))
        self._sub_grants = [tuple(f.split("/")) for f in pick(READ, True)]
        self._sub_denies = [tuple(f.split("/")) for f in pick(READ, False)]

    def _decide(self, topic: str, deny: Matcher, grant: Matcher) -> bool:
        if self.superuser:
            return True
        if deny(topic) is not None:
            return False
        if grant(topic) is not None:
            return True
        return self._nomatch and not is_sys(topic)

    def may_publish(self, topic: str) -> bool:
        return self._decide(topic, self._deny_write, self._write)

    def may_read(self, topic: str) -> bool:
        return self._decide(topic, self._deny_read, self._read)

    def may_subscribe(self, topic_filter: str) -> bool:
        if self.superuser:
            return True
        wanted = tuple(topic_filter.split("/"))
        if any(covers(deny, wanted) for deny in self._sub_denies):
            return False
        if any(covers(grant, wanted) for grant in self._sub_grants):
            return True
        return self._nomatch and not is_sys(topic_filter)


def permissions(
    entries: Sequence[Entry], username: str | None, clientid: str, *, nomatch: bool, superuser: bool = False
) -> ClientPermissions:
    return ClientPermissions(entries, username, clientid, nomatch=nomatch, superuser=superuser)
