"""`broker.auth.password_file`: users in Mosquitto's password file format.

One `username:hash` line per user, as `mosquitto_passwd` writes them:
`$7$<iterations>$<salt>$<hash>` (PBKDF2-HMAC-SHA512, its default since Mosquitto 2.0) or
`$6$<salt>$<hash>` (one SHA-512 of password + salt, `mosquitto_passwd -H sha512`); salt and hash
in base64. Blank lines and `#` comments are skipped. Plain-text passwords are refused: a file
Mosquitto would not take (`mosquitto_passwd -U` hashes them).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bridge.brokers.embedded.auth.pbkdf2 import pbkdf2_hmac
from bridge.errors import HookbridgeError

# mosquitto_passwd writes 101 iterations (well under a millisecond); a file with many more is
# checked in a worker thread.
_SLOW_ITERATIONS = 10_000

# Runs a slow check off the event loop: asyncio.to_thread, or the broker's fair share of its
# hashing threads (auth/checks.py).
Runner = Callable[..., Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class FileHash:
    iterations: int  # 0: `$6$`, one SHA-512 round
    salt: bytes
    digest: bytes

    def matches(self, password: bytes) -> bool:
        if self.iterations:
            made = pbkdf2_hmac("sha512", password, self.salt, self.iterations, len(self.digest))
        else:
            made = hashlib.sha512(password + self.salt).digest()
        return hmac.compare_digest(made, self.digest)


class PasswordFileError(HookbridgeError, ValueError):
    """Every bad line of a password file, as `path:line:col: message` lines."""


def parse_hash(text: str) -> FileHash:
    """One line's hash part; raises ValueError saying what is wrong (never echoing the hash)."""
    fields = text.split("$")
    try:
        if len(fields) == 5 and fields[:2] == ["", "7"]:
            if not fields[2].isdigit() or not 1 <= int(fields[2]) <= 10_000_000:
                raise ValueError("the $7$ iteration count is not a number from 1 to 10000000")
            return FileHash(int(fields[2]), _b64(fields[3]), _b64(fields[4]))
        if len(fields) == 4 and fields[:2] == ["", "6"]:
            digest = _b64(fields[3])
            if len(digest) != hashlib.sha512().digest_size:
                raise ValueError("the $6$ hash is not 64 bytes")
            return FileHash(0, _b64(fields[2]), digest)
    except binascii.Error:
        raise ValueError("the salt or hash is not base64") from None
    if not text.startswith("$"):
        raise ValueError("the password is not hashed (run `mosquitto_passwd -U` on the file)")
    raise ValueError("not a $7$ (PBKDF2-SHA512) or $6$ (SHA-512) hash as mosquitto_passwd writes them")


def _b64(text: str) -> bytes:
    value = base64.b64decode(text, validate=True)
    if not value:
        raise binascii.Error("empty")
    return value


def parse_password_file(path: str, text: str) -> dict[str, FileHash]:
    """The users of a password file; raises PasswordFileError listing every bad line."""
    users: dict[str, FileHash] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        username, colon, hashed = line.partition(":")
        if not colon or not username:
            problems.append(f"{path}:{number}:1: not a `username:hash` line")
            continue
        try:
            entry = parse_hash(hashed.strip())
        except ValueError as exc:
            problems.append(f"{path}:{number}:{len(username) + 2}: user {username!r}: {exc}")
            continue
        if username in users:
            problems.append(f"{path}:{number}:1: user {username!r} appears twice")
            continue
        users[username] = entry
    if problems:
        raise PasswordFileError("\n".join(problems))
    return users


def load_password_file(path: str) -> dict[str, FileHash]:
    """Read and parse; raises PasswordFileError (unreadable, not UTF-8, bad lines)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PasswordFileError(f"{path}:1:1: cannot read the password file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PasswordFileError(f"{path}:1:1: the password file is not UTF-8: {exc.reason}") from None
    return parse_password_file(path, text)


class PasswordFile:
    """The users of one file, replaced whole by `reload` (SIGHUP) only when the new file is good."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.users = load_password_file(path)

    def reload(self) -> None:
        """Read the file again; on any problem the users loaded before stay (PasswordFileError)."""
        self.users = load_password_file(self.path)

    def __contains__(self, username: str) -> bool:
        return username in self.users

    async def check(self, username: str, password: bytes | None, run: Runner = asyncio.to_thread) -> bool:
        entry = self.users.get(username)
        if entry is None or password is None:
            return False
        if entry.iterations >= _SLOW_ITERATIONS:  # a CONNECT must not stall the broker
            return await run(entry.matches, password)
        return entry.matches(password)
