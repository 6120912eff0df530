"""The embedded broker's topic trees find exactly what `bridge.topics.matches` finds.

`matches` is the rule (one filter, one topic); the trees answer the same question for a whole
fleet at once. Hypothesis builds filters and topics from a small alphabet (so they collide),
with `$` first levels, empty levels and `a/#` against `a`, and compares the answers.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.router import Message, Router
from bridge.brokers.embedded.sessions import SessionState, Subscription
from bridge.brokers.embedded.stream import EventStream
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


def test_retained_tree_keeps_the_sum_of_sizes_as_values_come_and_go() -> None:
    """`payload_bytes` ($SYS store/messages/bytes) is kept as topics are set, replaced and
    removed, never walked for: it equals the sum over what the tree holds after each step."""
    tree: RetainedTree[bytes] = RetainedTree(len)
    tree["a"] = b"12345"
    tree["a/b"] = b"12"
    assert tree.payload_bytes == 7
    tree["a"] = b"1"  # replaced: the old size goes
    assert tree.payload_bytes == 3
    assert tree.pop("a/b") == b"12" and tree.pop("absent") is None
    assert tree.payload_bytes == 1 == sum(map(len, tree.values()))
    unsized: RetainedTree[bytes] = RetainedTree()
    unsized["x"] = b"abc"
    assert unsized.payload_bytes == 0


# -- the router on the trees: what route() and retained_for() answer, against a model -------------

_sessions = st.sampled_from(["s1", "s2", "s3"])
_groups = st.sampled_from(["", "g", "h"])  # "": not shared


def _state(clientid: str) -> SessionState:
    # Offline sessions: QoS 1 messages are queued in the outbox, where the test reads them.
    stream = EventStream(_NoSink(), clientid)
    return SessionState(clientid, expiry=3600, username=None, stream=stream, limits=Limits(), refused=Counter())


class _NoSink:
    async def __call__(self, event: object) -> None:
        raise AssertionError("no event is posted by routing")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), _sessions, _groups, _filters()), max_size=25),
    st.lists(_topics, min_size=1, max_size=8),
)
def test_the_router_gives_each_session_one_copy_per_matching_subscription_set_and_each_group_one(ops, topics):
    """Subscribe and unsubscribe at random (overlapping filters of one session, shared groups,
    resubscribing), then route: a session gets one copy per message naming every filter of its
    own that matches; a group with a matching member gets the message exactly once."""
    router = Router()
    states = {clientid: _state(clientid) for clientid in ("s1", "s2", "s3")}
    model: dict[str, set[str]] = {clientid: set() for clientid in states}  # full filters per session
    for number, (add, clientid, group, topic_filter) in enumerate(ops):
        full = f"$share/{group}/{topic_filter}" if group else topic_filter
        if add:
            router.subscribe(states[clientid], Subscription(full, 1, f"{number:04d}"))
            model[clientid].add(full)
        else:
            assert router.unsubscribe(states[clientid], full) == (full in model[clientid])
            model[clientid].discard(full)
    for number, topic in enumerate(topics):
        before = {clientid: len(state.outbox) for clientid, state in states.items()}
        router.route(Message(f"9{number:03d}", topic, b"x", 1, False, "publisher"))
        new = {clientid: list(state.outbox)[before[clientid] :] for clientid, state in states.items()}
        for clientid in states:
            own = [f for f in model[clientid] if not f.startswith("$share/") and matches(f, topic)]
            copies = [out for out in new[clientid] if not any(f.startswith("$share/") for f in out.filters)]
            assert len(copies) == (1 if own else 0), (clientid, topic)
            if copies:
                assert sorted(copies[0].filters) == sorted(own)
        shared = {
            (group, topic_filter)
            for subscriptions in model.values()
            for full in subscriptions
            if full.startswith("$share/")
            for group, topic_filter in [full.split("/", 2)[1:]]
            if matches(topic_filter, topic)
        }
        for group, topic_filter in shared:
            full = f"$share/{group}/{topic_filter}"
            got = sum(full in out.filters for outs in new.values() for out in outs)
            assert got == 1, (full, topic)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_topics, st.sampled_from([b"", b"v"]), st.sampled_from([0.0, 5.0, 50.0])), max_size=25),
    st.lists(_filters(), min_size=1, max_size=6),
)
def test_retained_set_clear_and_expiry_through_the_router(publishes, filters):
    """Retain (a payload), clear (an empty one) and expiry (a deadline before `now`): a filter
    gets, oldest first, the live retained messages of the topics it matches."""
    router = Router()
    model: dict[str, tuple[str, float]] = {}
    for number, (topic, payload, expires) in enumerate(publishes):
        msgid = f"{number:04d}"
        router.store_retained(Message(msgid, topic, payload, 1, True, "p", expires=expires))
        if payload:
            model[topic] = (msgid, expires)
        else:
            model.pop(topic, None)
    now = 10.0  # deadlines of 5.0 have passed, 50.0 not; 0.0 is never
    for topic_filter in filters:
        expected = sorted(
            (msgid, topic)
            for topic, (msgid, expires) in model.items()
            if matches(topic_filter, topic) and not (expires and expires <= now)
        )
        got = [(r.msgid, r.topic) for r in router.retained_for(topic_filter, now)]
        assert got == expected, topic_filter


class _CountedReads:
    """Permissions that count the delivery checks made of them (what a shared pick costs)."""

    superuser = False

    def __init__(self, readable: bool = True) -> None:
        self.readable = readable
        self.reads = 0

    def may_publish(self, topic: str) -> bool:
        return True

    def may_subscribe(self, topic_filter: str) -> bool:
        return True

    def may_read(self, topic: str) -> bool:
        self.reads += 1
        return self.readable


def test_a_shared_group_serves_its_members_in_turn_with_a_few_checks_a_message() -> None:
    """1,000 offline members (QoS 1: queued) of one group, every third one denied by its ACL: each
    message goes to the next member that may read it, in turn, none twice before every allowed one
    had one; the checks a message costs stay a few, not one per member."""
    router = Router()
    states = [_state(f"w{n:04d}") for n in range(1000)]
    permissions = [_CountedReads(readable=n % 3 != 0) for n in range(1000)]
    for state, allowed in zip(states, permissions, strict=True):
        state.permissions = allowed
        router.subscribe(state, Subscription("$share/workers/jobs/#", 1, "0000"))
    allowed_count = sum(p.readable for p in permissions)
    for number in range(2 * allowed_count):
        router.route(Message(f"9{number:05d}", "jobs/x", b"x", 1, False, "publisher"))
    got = [len(state.outbox) for state in states]
    assert got == [0 if n % 3 == 0 else 2 for n in range(1000)]  # the denied ones none, the others two each
    # a message: the picked member's check, a denied member's now and then, the queue's own check
    # when it takes the message; not one per member (1,000 a message before)
    checks = sum(p.reads for p in permissions)
    assert checks <= 3 * (2 * allowed_count)
    router.route(Message("999999", "jobs/x", b"x", 0, False, "publisher"))
    assert sum(len(state.outbox) for state in states) == 2 * allowed_count  # QoS 0 is never queued offline
