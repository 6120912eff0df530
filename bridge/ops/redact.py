"""Secrets out of everything the bridge prints: log lines, /healthz, /metrics, error messages.

A secret is redacted where it is printed as a value, never by searching for its text anywhere:
with the password `hookbridge`, the node name `hookbridge@127.0.0.1` and the program's name must
stay readable. Redacted are:

- the password part of any URL's user info (`redis://user:PW@host` -> `redis://user:***@host`),
  known or not: whatever stands there is a password;
- the value of a `password=` / `password: ` pair, as in libpq DSNs and driver messages (also
  `passwd`, `pwd`, `secret`, `api_key`, `token`, and names ending in them, like `PGPASSWORD`);
- a configured secret (the values of the secret settings) standing as a whole value: right after
  `=` or `:`, or between quotes, as drivers echo them (`password 'PW' is wrong`);
- a log argument that is exactly a configured secret (`log.info("with %s", password)`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "***"

# scheme://user:password@ -- the password runs to the last `@` before the path, so a password
# that itself holds an unescaped `@` is masked whole. Every repetition is bounded: log lines
# carry client-chosen text (topics, client ids), and an unbounded one could take quadratic time.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s/@:]{0,256}):(?P<secret>[^\s/]{0,512})@")
_NAMED_VALUE = re.compile(
    # the name's end is enough (`PGPASSWORD`, `api_secret`); the value follows as
    # `key=value`, `key = value`, `"key": "value"`, `key:value`; not `key: words` (a message)
    r"(?P<head>(?i:password|passwd|pwd|secret|api_key|token)[\"']?(?:\s{0,8}=\s{0,8}|:\s{0,8}(?=[\"'])|:))"
    r"(?P<secret>\"[^\"]{0,512}\"|'[^']{0,512}'|[^\s,;&)}\]]{1,512})"
)
# What may stand right before and after a secret printed as a value.
_VALUE_BEFORE = r"(?:(?<=[=:'\"])|(?<==\s))"
_VALUE_AFTER = r"(?=['\"@\s,;&/)}\]]|$)"


def _mask_named(match: re.Match[str]) -> str:
    value = match["secret"]
    quote = value[0] if value[0] in "'\"" else ""
    return f"{match['head']}{quote}{MASK}{quote}"


class Redactor:
    """Masks secrets printed as values (see the module docstring); shared by logs and HTTP."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._known: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        """Learn more configured secrets (a reload can bring a new pool's password)."""
        self._secrets.update(s for s in secrets if s)
        if self._secrets:
            # Longest first, so a secret that contains another is masked whole.
            alternatives = "|".join(re.escape(s) for s in sorted(self._secrets, key=len, reverse=True))
            self._known = re.compile(f"{_VALUE_BEFORE}(?:{alternatives}){_VALUE_AFTER}")

    def is_secret(self, value: object) -> bool:
        return isinstance(value, str) and value in self._secrets

    def text(self, text: str) -> str:
        text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{MASK}@", text)
        text = _NAMED_VALUE.sub(_mask_named, text)
        if self._known is not None:
            text = self._known.sub(MASK, text)
        return text

    def value(self, value: Any) -> Any:
        """The same for every string inside a JSON-like value (the /healthz document)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value
