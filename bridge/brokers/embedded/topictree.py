"""Topic trees: the subscriptions and the retained messages of the embedded broker, by level.

A fleet subscribes each device to its own filter (`dev/<id>/cmd/#`) and keeps a retained
message per topic. Comparing a topic with every filter (or a filter with every retained
topic) makes each publish or SUBSCRIBE cost in proportion to the fleet; walking the levels
makes it cost in proportion to the topic's levels and to what matches:

- `FilterTree` holds values under topic filters and answers "which filters match this
  topic" by following, at each level, the exact child, the `+` child and the `#` child;
- `RetainedTree` holds values under topic names and answers "which topics match this filter"
  by following the filter's levels (every child at `+`, the whole subtree at `#`).

Both apply MQTT's `$` rule (4.7.2): a filter whose first level is a wildcard does not match a
topic that starts with `$`. `a/#` matches `a` too (4.7.1.2). Nodes left empty are removed, so
the trees hold only what is subscribed or retained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from bridge.brokers.embedded.compact import shrink_if_sparse
from bridge.brokers.embedded.sortedkeys import SortedKeys

V = TypeVar("V")


class _Node(Generic[V]):
    # A node is created per distinct level path: `children` stays None on a leaf, so a
    # fleet's leaves (`dev/<id>/cmd/#`) cost one small object each, not one dict more.
    __slots__ = ("children", "value")

    def __init__(self) -> None:
        self.children: dict[str, _Node[V]] | None = None
        self.value: V | None = None


def _path(root: _Node[V], levels: list[str], create: bool) -> list[_Node[V]] | None:
    """The nodes from the root to `levels` (root first); None when absent and not created."""
    path = [root]
    node = root
    for level in levels:
        children = node.children
        child = children.get(level) if children is not None else None
        if child is None:
            if not create:
                return None
            child = _Node()
            if children is None:
                children = node.children = {}
            children[level] = child
        path.append(child)
        node = child
    return path


def _prune(path: list[_Node[V]], levels: list[str]) -> None:
    """Remove the empty nodes at the end of `path` (the nodes of `levels`, root first)."""
    for depth in range(len(levels), 0, -1):
        node = path[depth]
        if node.value is not None or node.children:
            return
        parent = path[depth - 1]
        assert parent.children is not None
        del parent.children[levels[depth - 1]]
        if not parent.children:
            parent.children = None
        else:
            shrink_if_sparse(parent.children)  # `dev/<id>` of a fleet that left: no fleet-sized table kept


class _Tree(Generic[V]):
    """Values by level path, counted; what both trees share (they differ in how they match)."""

    __slots__ = ("_count", "_root")

    def __init__(self) -> None:
        self._root: _Node[V] = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def get(self, key: str) -> V | None:
        path = _path(self._root, key.split("/"), create=False)
        return path[-1].value if path is not None else None

    def _node(self, key: str) -> _Node[V]:
        """The node of `key`, made if absent; counted once it holds a value (the caller sets it)."""
        path = _path(self._root, key.split("/"), create=True)
        assert path is not None
        if path[-1].value is None:
            self._count += 1
        return path[-1]

    def pop(self, key: str, default: V | None = None) -> V | None:
        levels = key.split("/")
        path = _path(self._root, levels, create=False)
        if path is None or path[-1].value is None:
            return default
        value = path[-1].value
        path[-1].value = None
        self._count -= 1
        _prune(path, levels)
        return value


class FilterTree(_Tree[V]):
    """Values (the subscribers of a filter) by topic filter."""

    __slots__ = ()

    def setdefault(self, topic_filter: str, default: V) -> V:
        node = self._node(topic_filter)
        if node.value is None:
            node.value = default
        return node.value

    def matching(self, topic: str) -> list[V]:
        """The values of every filter that matches `topic`; each once, in no set order."""
        found: list[V] = []
        if self._root.children is None:
            return found
        nodes = [self._root]
        first = True
        dollar = topic.startswith("$")
        for level in topic.split("/"):
            following: list[_Node[V]] = []
            for node in nodes:
                children = node.children
                if children is None:
                    continue
                exact = children.get(level)
                if exact is not None:
                    following.append(exact)
                if first and dollar:
                    continue  # `$SYS/...` is not matched by `+/...` or `#`
                if "#" in children:
                    value = children["#"].value
                    if value is not None:
                        found.append(value)
                plus = children.get("+")
                if plus is not None:
                    following.append(plus)
            if not following:
                return found
            nodes = following
            first = False
        for node in nodes:
            if node.value is not None:
                found.append(node.value)
            children = node.children
            if children is not None and "#" in children:  # `a/#` matches `a`
                value = children["#"].value
                if value is not None:
                    found.append(value)
        return found


class RetainedTree(_Tree[V]):
    """Values (retained messages) by topic name, found by filter; `topics` holds the same topic
    names in order (sortedkeys.py), for the API's pages; with `size`, the sum of their sizes is kept
    as they come and go (`payload_bytes`: read every `$SYS` interval, never walked)."""

    __slots__ = ("_size", "payload_bytes", "topics")

    def __init__(self, size: Callable[[V], int] | None = None) -> None:
        super().__init__()
        self._size = size
        self.payload_bytes = 0
        self.topics = SortedKeys()

    def __bool__(self) -> bool:
        return self._count > 0

    def __setitem__(self, topic: str, value: V) -> None:
        node = self._node(topic)
        if self._size is not None:
            if node.value is not None:
                self.payload_bytes -= self._size(node.value)
            self.payload_bytes += self._size(value)
        if node.value is None:
            self.topics.add(topic)
        node.value = value

    def pop(self, key: str, default: V | None = None) -> V | None:
        value = super().pop(key)
        if value is None:
            return default
        if self._size is not None:
            self.payload_bytes -= self._size(value)
        self.topics.discard(key)
        return value

    def values(self) -> Iterator[V]:
        yield from _subtree(self._root)

    def matching(self, topic_filter: str) -> list[V]:
        """The values of every topic `topic_filter` matches, in no set order."""
        found: list[V] = []
        levels = topic_filter.split("/")
        nodes = [self._root]
        for depth, level in enumerate(levels):
            if level == "#":
                for node in nodes:
                    if depth > 0 and node.value is not None:
                        found.append(node.value)  # `a/#` matches `a`
                    for name, child in (node.children or {}).items():
                        if depth == 0 and name.startswith("$"):
                            continue
                        found.extend(_subtree(child))
                return found
            following: list[_Node[V]] = []
            for node in nodes:
                children = node.children
                if children is None:
                    continue
                if level == "+":
                    for name, child in children.items():
                        if depth == 0 and name.startswith("$"):
                            continue
                        following.append(child)
                else:
                    exact = children.get(level)
                    if exact is not None:
                        following.append(exact)
            if not following:
                return found
            nodes = following
        found.extend(node.value for node in nodes if node.value is not None)
        return found


def _subtree(node: _Node[V]) -> Iterator[V]:
    """Every value at or below `node` (iteratively: a topic may have thousands of levels)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if current.value is not None:
            yield current.value
        if current.children:
            stack.extend(current.children.values())
