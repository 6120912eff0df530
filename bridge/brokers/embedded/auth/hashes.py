"""Password hashes of database-held users, as EMQX 4's auth plugins stored them.

`broker.auth.password_hash` names how the `password` field was made from the user's password
and its `salt` field: `plain`, `md5`, `sha`, `sha256`, `sha512` (lowercase hex digests),
`salt,<hash>` (the salt before the password) or `<hash>,salt` (after it),
`pbkdf2,<mac>,<iterations>,<dklen>` (PBKDF2-HMAC with the salt, hex) and `bcrypt` (the stored
bcrypt string; `salt,bcrypt` takes the bcrypt salt from the salt field instead).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import bcrypt

from bridge.brokers.embedded.auth.pbkdf2 import pbkdf2_hmac

DIGESTS = ("md5", "sha", "sha256", "sha512")
PBKDF2_MACS = ("md5", "sha", "sha224", "sha256", "sha384", "sha512")
_HASHLIB_NAME = {"sha": "sha1"}  # EMQX's `sha` is SHA-1

# Hashes that cost this much are computed off the event loop (bcrypt, a slow PBKDF2).
_SLOW_PBKDF2_ITERATIONS = 10_000


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """How a stored password was made (one `broker.auth.password_hash` value)."""

    name: str  # plain | md5 | sha | sha256 | sha512 | pbkdf2 | bcrypt
    salt: str = ""  # "" (no salt), "prefix" (salt,sha256) or "suffix" (sha256,salt)
    mac: str = "sha256"  # pbkdf2 only
    iterations: int = 1000
    dklen: int = 20

    def __str__(self) -> str:
        if self.name == "pbkdf2":
            return f"pbkdf2,{self.mac},{self.iterations},{self.dklen}"
        if self.salt == "prefix":
            return f"salt,{self.name}"
        return f"{self.name},salt" if self.salt == "suffix" else self.name

    @property
    def slow(self) -> bool:
        return self.name == "bcrypt" or (self.name == "pbkdf2" and self.iterations >= _SLOW_PBKDF2_ITERATIONS)

    def matches(self, password: bytes, stored: str, salt: str) -> bool:
        """Whether `password` (as the client sent it) gives the stored value."""
        if self.name == "bcrypt":
            return _bcrypt_matches(password, stored, salt if self.salt else "")
        return hmac.compare_digest(self.digest(password, salt).encode(), stored.encode())

    async def matches_async(
        self, password: bytes, stored: str, salt: str, run: Callable[..., Awaitable[bool]] = asyncio.to_thread
    ) -> bool:
        """`matches`, in a worker thread for the slow hashes (a CONNECT must not stall the broker):
        `run` is asyncio.to_thread or the broker's fair share of its hashing threads (checks.py)."""
        if self.slow:
            return await run(self.matches, password, stored, salt)
        return self.matches(password, stored, salt)

    def digest(self, password: bytes, salt: str) -> str:
        """The stored form of `password` (not for bcrypt, whose salt is random)."""
        salted = salt.encode()
        if self.name == "plain":
            return password.decode("utf-8", "replace")
        if self.name == "pbkdf2":
            mac = _HASHLIB_NAME.get(self.mac, self.mac)
            return pbkdf2_hmac(mac, password, salted, self.iterations, self.dklen).hex()
        if self.salt == "prefix":
            password = salted + password
        elif self.salt == "suffix":
            password = password + salted
        return hashlib.new(_HASHLIB_NAME.get(self.name, self.name), password).hexdigest()


def _bcrypt_matches(password: bytes, stored: str, salt: str) -> bool:
    try:
        if salt:  # salt,bcrypt: EMQX hashes with the salt field and compares
            made = bcrypt.hashpw(password, salt.encode())
            return hmac.compare_digest(made, stored.encode())
        return bcrypt.checkpw(password, stored.encode())
    except ValueError:  # not a bcrypt string, or a password over bcrypt's 72 bytes
        return False


def parse_password_hash(text: str) -> PasswordHash:
    """`broker.auth.password_hash`; raises ValueError naming what it takes."""
    parts = [part.strip() for part in text.strip().split(",")]
    if parts[0] == "pbkdf2":
        return _parse_pbkdf2(parts[1:])
    if len(parts) == 1 and parts[0] in ("plain", "bcrypt", *DIGESTS):
        return PasswordHash(parts[0])
    if len(parts) == 2 and parts[0] == "salt" and parts[1] in ("bcrypt", *DIGESTS):
        return PasswordHash(parts[1], salt="prefix")
    if len(parts) == 2 and parts[1] == "salt" and parts[0] in ("bcrypt", *DIGESTS):
        return PasswordHash(parts[0], salt="suffix")
    raise ValueError(
        f"unknown password hash {text.strip()!r}: takes plain, md5, sha, sha256, sha512, bcrypt, "
        "salt,<hash>, <hash>,salt or pbkdf2,<mac>,<iterations>,<dklen>"
    )


def _parse_pbkdf2(options: list[str]) -> PasswordHash:
    if not options:
        return PasswordHash("pbkdf2")
    if len(options) != 3:
        raise ValueError("pbkdf2 takes pbkdf2,<mac>,<iterations>,<dklen> (e.g. pbkdf2,sha256,1000,20)")
    mac, iterations, dklen = options
    if mac not in PBKDF2_MACS:
        raise ValueError(f"pbkdf2 mac {mac!r} is not one of {', '.join(PBKDF2_MACS)}")
    if not (iterations.isdigit() and 1 <= int(iterations) <= 10_000_000):
        raise ValueError(f"pbkdf2 iterations {iterations!r} is not a number from 1 to 10000000")
    if not (dklen.isdigit() and 1 <= int(dklen) <= 1024):
        raise ValueError(f"pbkdf2 dklen {dklen!r} is not a number from 1 to 1024")
    return PasswordHash("pbkdf2", mac=mac, iterations=int(iterations), dklen=int(dklen))
