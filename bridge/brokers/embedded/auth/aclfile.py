"""`broker.acl.file`: Mosquitto's `acl_file` format (mosquitto.conf(5)), parsed into `Entry` rows.

    # a comment (`#` as the first character of the line)
    topic read $SYS/#              # lines before any `user` line: anonymous clients
    user roger                     # the entries after it: clients logged in as roger
    topic foo/bar                  # no access word: readwrite
    topic deny foo/bar/secret      # deny is handled before any grant
    pattern write sensor/%u/%c/#   # every client, with its user name and client id filled in

The access word is optional unless the filter holds a space. `%c` and `%u` must each be a whole
level of a pattern (`sensor/%c`, not `sensor-%c`), as Mosquitto requires. Every problem is
reported at once as `path:line:col: message`; this module only reads, so `hookbridge check`
and a SIGHUP reload judge a file the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from bridge.accounts import READ, READWRITE, WRITE, Entry
from bridge.brokers.embedded.auth.acl import CLIENTID, USERNAME
from bridge.conf.errors import ConfError, ConfErrors, Position
from bridge.topics import filter_error

MAX_ERRORS = 20  # a file that is not an ACL file at all says so in a screenful
_WORD = re.compile(r"[A-Za-z_]{1,20}")
ACCESS = {"read": READ, "write": WRITE, "readwrite": READWRITE, "deny": READWRITE}


@dataclass(frozen=True, slots=True)
class AclFile:
    anonymous: tuple[Entry, ...] = ()
    users: dict[str, tuple[Entry, ...]] = field(default_factory=dict)
    patterns: tuple[Entry, ...] = ()  # apply to every client, wherever they stand in the file

    def entries_for(self, username: str | None) -> tuple[Entry, ...]:
        own = self.anonymous if username is None else self.users.get(username, ())
        return own + self.patterns


def _words(line: str) -> list[tuple[int, str]]:
    """(0-based column, word) of the space-separated words of a line."""
    words, start = [], None
    for index, char in enumerate(line + " "):
        if char in " \t":
            if start is not None:
                words.append((start, line[start:index]))
                start = None
        elif start is None:
            start = index
    return words


def _placeholder_problem(topic_filter: str) -> str | None:
    for level in topic_filter.split("/"):
        if (CLIENTID in level or USERNAME in level) and level not in (CLIENTID, USERNAME):
            return f"{level!r}: %c and %u must each be a whole level of the pattern (like a/%c/b)"
    return None


def parse_acl(path: str, text: str) -> AclFile:
    """The file's entries; raises ConfErrors with every problem."""
    errors: list[ConfError] = []
    anonymous: list[Entry] = []
    users: dict[str, list[Entry]] = {}
    patterns: list[Entry] = []
    section = anonymous
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        words = _words(line)
        if not words or words[0][1].startswith("#"):
            continue

        def error(col: int, message: str, line_no: int = number) -> None:
            errors.append(ConfError(Position(path, line_no, col + 1), message))

        col, keyword = words[0]
        if keyword == "user":
            name = line[words[1][0] :].strip() if len(words) > 1 else ""
            if not name:
                error(col, "`user` needs a user name")
                continue
            section = users.setdefault(name, [])
            continue
        if keyword not in ("topic", "pattern"):
            # quoted only when it looks like a word: a file named by mistake (a password file)
            # must not end up in the log line by line
            named = f"unknown keyword {keyword!r}" if _WORD.fullmatch(keyword) else "not an ACL line"
            error(col, f"{named} (use topic, pattern or user)")
            continue
        if len(words) < 2:
            error(len(line), f"`{keyword}` needs a topic filter")
            continue
        access_word = words[1][1]
        if access_word in ACCESS:
            if len(words) < 3:
                error(len(line), f"`{keyword} {access_word}` needs a topic filter")
                continue
            filter_col = words[2][0]
            topic_filter = line[filter_col:]
        else:
            filter_col, topic_filter = words[1]
            if len(words) > 2:
                error(
                    filter_col,
                    f"{access_word!r} is not an access (read, write, readwrite or deny); a filter with a "
                    f"space needs the access word first ({keyword} readwrite <filter>)",
                )
                continue
            access_word = "readwrite"
        problem = filter_error(topic_filter)
        if problem is None and keyword == "pattern":
            problem = _placeholder_problem(topic_filter)
        if problem is not None:
            error(filter_col, problem)
            continue
        entry = Entry(ACCESS[access_word], topic_filter, allow=access_word != "deny", substitute=keyword == "pattern")
        (patterns if keyword == "pattern" else section).append(entry)
    if len(errors) > MAX_ERRORS:
        hidden = len(errors) - MAX_ERRORS
        errors = [*errors[:MAX_ERRORS], ConfError(errors[MAX_ERRORS].where, f"{hidden} more problems not shown")]
    if errors:
        raise ConfErrors(errors)
    return AclFile(tuple(anonymous), {name: tuple(entries) for name, entries in users.items()}, tuple(patterns))


def load_acl(path: str | Path) -> AclFile:
    """Read and parse the file; raises ConfErrors (unreadable, not UTF-8, or its problems)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfErrors([ConfError(Position(str(path), 1, 1), f"cannot read ACL file: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfErrors([ConfError(Position(str(path), 1, 1), f"ACL file is not UTF-8: {exc.reason}")]) from None
    return parse_acl(str(path), text)
