"""What `hookbridge migrate-emqx44` finds before it changes anything, shared by the five databases.

Every migration (actions/<db>/emqx44.py) first reads every message id EMQX left (stored messages,
retained messages, offsets) through an `IdSurvey`: it counts, per table or key set, how many
ids of each form it found (bridge/emqx_msgid.py tells the forms apart) and keeps every value that
is no id at all. A value that cannot be converted stops the migration before its first write,
naming where it is and what it holds (`MigrationRefused`), so nothing is half-migrated and no row
is left behind unread. `--dry-run` prints the same counts and changes nothing.

After a table or key set is rewritten, `check_kept` compares its count with the count before:
a migration that would end with fewer rows than it started with stops instead of finishing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bridge.backend import PermanentError
from bridge.emqx_msgid import IdForm, UnconvertibleId, convert

_NAMED = 20  # values named in a refusal; the count says how many more


class MigrationRefused(PermanentError):
    """Data the migration cannot convert (or would lose): nothing was changed."""


@dataclass
class IdSurvey:
    forms: dict[str, Counter[IdForm]] = field(default_factory=dict)
    unconvertible: list[str] = field(default_factory=list)

    def note(self, table: str) -> None:
        """`table` exists (its line is printed even if it holds no id)."""
        self.forms.setdefault(table, Counter())

    def convert(self, table: str, where: str, value: Any) -> str | None:
        """hookbridge's id for `value` found in `table` at `where` (a key, row or document); None
        when it is no id, which is remembered and refused by `refuse_unconvertible`."""
        counts = self.forms.setdefault(table, Counter())
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        if not isinstance(text, str):
            self.unconvertible.append(f"{table} {where}: {value!r} (not text)")
            return None
        try:
            form, new = convert(text)
        except UnconvertibleId as exc:
            self.unconvertible.append(f"{table} {where}: {text!r} ({exc})")
            return None
        counts[form] += 1
        return new

    def refuse_unconvertible(self) -> None:
        if not self.unconvertible:
            return
        more = len(self.unconvertible) - _NAMED
        named = "\n  ".join(self.unconvertible[:_NAMED]) + (f"\n  ... and {more} more" if more > 0 else "")
        raise MigrationRefused(
            f"{len(self.unconvertible)} value(s) cannot be converted (no message id in any form EMQX"
            f" wrote, or a row without its key); nothing was changed. Correct or remove them, then run"
            f" again:\n  {named}"
        )

    def lines(self) -> list[str]:
        """Per table: how many ids of each form (the `--dry-run` report)."""
        out = []
        for table, counts in sorted(self.forms.items()):
            found = ", ".join(f"{n} {form.value}" for form, n in sorted(counts.items(), key=lambda i: i[0].name))
            out.append(f"{table}: {found or 'no message ids'}")
        return out


def check_kept(table: str, before: int, after: int) -> None:
    """Stop a migration that would leave `table` with fewer rows than it had."""
    if after < before:
        raise MigrationRefused(f"{table}: {after} rows after the copy, {before} before; the copy is not put in place")
