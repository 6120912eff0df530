"""`SortedKeys`: strings kept in order, so that the API pages a million of them by cursor.

The broker finds sessions and retained messages by dict and tree; neither gives an order, and
sorting a fleet for each page of ten costs seconds at a million. This index keeps the same keys
sorted beside them: adding or removing one costs a binary search and a move inside one block
of at most 2 * BLOCK references (microseconds); reading the keys after a cursor costs a binary
search, then one step per key read.

The keys are held in blocks (sorted lists) with each block's last key in `_maxes`, the layout of
the sortedcontainers package's SortedList, which the project does not depend on at run time. A
block that shrinks below BLOCK / 4 is merged into its neighbour, so a fleet that comes and goes
leaves no trail of near-empty lists behind.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

BLOCK = 1000  # keys per block after a split; a block holds at most 2 * BLOCK


class SortedKeys:
    __slots__ = ("_blocks", "_len", "_maxes")

    def __init__(self) -> None:
        self._blocks: list[list[str]] = []
        self._maxes: list[str] = []  # the last key of each block
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __contains__(self, key: str) -> bool:
        i = bisect_left(self._maxes, key)
        if i == len(self._maxes):
            return False
        block = self._blocks[i]
        j = bisect_left(block, key)
        return j < len(block) and block[j] == key

    def add(self, key: str) -> None:
        """Add `key` (nothing when it is there already)."""
        maxes, blocks = self._maxes, self._blocks
        if not blocks:
            blocks.append([key])
            maxes.append(key)
            self._len = 1
            return
        i = bisect_left(maxes, key)
        if i == len(maxes):  # past every key: the last block's end
            i -= 1
            block = blocks[i]
            block.append(key)
            maxes[i] = key
        else:
            block = blocks[i]
            j = bisect_left(block, key)
            if block[j] == key:  # j < len(block): key <= this block's last
                return
            block.insert(j, key)
        self._len += 1
        if len(block) > 2 * BLOCK:
            blocks[i : i + 1] = [block[:BLOCK], block[BLOCK:]]
            maxes[i : i + 1] = [block[BLOCK - 1], block[-1]]

    def discard(self, key: str) -> None:
        """Remove `key` if it is there."""
        maxes, blocks = self._maxes, self._blocks
        i = bisect_left(maxes, key)
        if i == len(maxes):
            return
        block = blocks[i]
        j = bisect_left(block, key)
        if j == len(block) or block[j] != key:
            return
        del block[j]
        self._len -= 1
        if not block:
            del blocks[i], maxes[i]
            return
        maxes[i] = block[-1]
        if len(block) < BLOCK // 4 and len(blocks) > 1:
            # merge into a neighbour (the previous one, or the next for the first block)
            k = i - 1 if i > 0 else i
            merged = blocks[k] + blocks[k + 1]
            blocks[k : k + 2] = [merged]
            maxes[k : k + 2] = [merged[-1]]
            if len(merged) > 2 * BLOCK:
                blocks[k : k + 1] = [merged[:BLOCK], merged[BLOCK:]]
                maxes[k : k + 1] = [merged[BLOCK - 1], merged[-1]]

    def after(self, key: str | None, *, inclusive: bool = False) -> Iterator[str]:
        """The keys after `key` (and `key` itself when `inclusive`; all of them for None), in order.

        A generator over the live blocks: use it within one loop turn, with no change to the
        index meanwhile (a caller that pauses asks again from the last key it read)."""
        maxes, blocks = self._maxes, self._blocks
        if key is None:
            i, j = 0, 0
        else:
            search = bisect_left if inclusive else bisect_right
            i = search(maxes, key)
            if i == len(maxes):
                return
            j = search(blocks[i], key)
        while i < len(blocks):
            block = blocks[i]
            while j < len(block):
                yield block[j]
                j += 1
            i, j = i + 1, 0
