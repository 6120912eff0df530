"""The embedded broker's topic trees find exactly what `bridge.topics.matches` finds.

`matches` is the rule (one filter, one topic); the trees answer the same question for a whole
fleet at once. Hypothesis builds filters and topics from a small alphabet (so they collide),
with `$` first levels, empty levels and `a/#` against `a`, and compares the answers.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.brokers.embedded.topictree import FilterTree, RetainedTree
from bridge.topics import matches

_names = st.sampled_from(["a", "b", "$SYS", "$x", "", "dev", "1"])
_topics = st.lists(_names, min_size=1, max_size=5).map("/".join)


@st.composite
def _filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.one_of(_names, st.just("+")), min_size=1, max_size=5))
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


@settings(max_examples=150, deadline=None)
@given(st.sets(_filters(), max_size=20), st.lists(_topics, max_size=10), st.data())
def test_a_filter_tree_finds_every_matching_filter_and_no_other(filters, topics, data):
    tree: FilterTree[str] = FilterTree()
    for topic_filter in filters:
        assert tree.setdefault(topic_filter, topic_filter) == topic_filter
    # Removing some (the tree prunes its nodes) must leave the others found.
    removed = data.draw(st.sets(st.sampled_from(sorted(filters)))) if filters else set()
    for topic_filter in removed:
        assert tree.pop(topic_filter) == topic_filter
        assert tree.pop(topic_filter) is None
    kept = filters - removed
    assert len(tree) == len(kept)
    for topic in topics:
        found = tree.matching(topic)
        assert sorted(found) == sorted(f for f in kept if matches(f, topic)), topic


@settings(max_examples=150, deadline=None)
@given(st.sets(_topics, max_size=20), st.lists(_filters(), max_size=10), st.data())
def test_a_retained_tree_finds_every_topic_a_filter_matches_and_no_other(topics, filters, data):
    tree: RetainedTree[str] = RetainedTree()
    for topic in topics:
        tree[topic] = topic
    removed = data.draw(st.sets(st.sampled_from(sorted(topics)))) if topics else set()
    for topic in removed:
        assert tree.pop(topic) == topic
        assert tree.get(topic) is None
    kept = topics - removed
    assert len(tree) == len(kept) and sorted(tree.values()) == sorted(kept)
    for topic in kept:
        assert tree.get(topic) == topic
        assert tree.matching(topic) == [topic]  # a filter without wildcards is the topic itself
    for topic_filter in filters:
        assert sorted(tree.matching(topic_filter)) == sorted(t for t in kept if matches(topic_filter, t)), topic_filter


def test_emptied_trees_hold_no_nodes():
    """Nodes left without a value or children are pruned: a fleet that churns leaves nothing."""
    filters: FilterTree[int] = FilterTree()
    retained: RetainedTree[int] = RetainedTree()
    for n in range(1000):
        filters.setdefault(f"dev/{n}/cmd/#", n)
        retained[f"dev/{n}/state"] = n
    for n in range(1000):
        filters.pop(f"dev/{n}/cmd/#")
        retained.pop(f"dev/{n}/state")
    assert filters._root.children is None and retained._root.children is None
    assert len(filters) == 0 and not retained


def test_a_walk_costs_what_matches_not_the_fleet():
    """15,000 devices' filters: a publish to one device visits a handful of nodes.

    Counted, not timed: the walk touches the nodes of its topic's levels; `matches` against
    every filter would call it 15,000 times."""
    tree: FilterTree[int] = FilterTree()
    for n in range(15_000):
        tree.setdefault(f"dev/{n}/cmd/#", n)
    tree.setdefault("dev/+/state", -1)
    assert tree.matching("dev/1234/cmd/reboot") == [1234]
    assert tree.matching("dev/77/state") == [-1]
    assert tree.matching("other/77/cmd") == []
    retained: RetainedTree[int] = RetainedTree()
    for n in range(15_000):
        retained[f"r/{n}/a"] = n
        retained[f"r/{n}/b"] = n
    assert sorted(retained.matching("r/42/#")) == [42, 42]
    assert len(retained.matching("r/+/a")) == 15_000
