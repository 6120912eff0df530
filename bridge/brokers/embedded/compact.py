"""`shrink_if_sparse`: give back a dict's table once most of its entries are gone.

CPython never makes a dict's table smaller when entries are deleted, only when it grows: after a
fleet of 250,000 sessions leaves, the session table, the topic trees' level dicts and a popular
filter's subscriber dict each keep the table sized for the whole fleet (megabytes each) for as
long as one entry stays. Called after a delete, this copies the entries into a table of the right
size once the table is more than SPARSE times what they need; the copy costs one step per
remaining entry and happens again only after the dict shrank SPARSE times more, so deleting n
entries costs O(n) in all.

In place (`clear`, then `update` back): the dict stays the same object, so whoever holds it
(a tree node, a queue bound, the journal) keeps a valid reference. The dict's own class methods
are bypassed (`dict.clear(table)`), so a subclass that keeps an index beside its entries
(sessiontable.py) is not told of a change that leaves its keys as they were.
"""

from __future__ import annotations

import sys
from typing import Any

SPARSE = 8  # rebuild once the table is this many times what its entries need
_BYTES_PER_ENTRY = 40  # a fresh table holds 26-38 bytes per entry (CPython 3.11)
_SMALL = 4096  # a table this small is left alone: rebuilding it would save nothing


def shrink_if_sparse(table: dict[Any, Any]) -> None:
    size = sys.getsizeof(table)
    if size > _SMALL and size > SPARSE * _BYTES_PER_ENTRY * len(table):
        entries = list(dict.items(table))
        dict.clear(table)
        dict.update(table, entries)
