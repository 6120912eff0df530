"""The broker-wide bound on queued bytes (queuedbytes.QueuedBytes): which queue loses a message when
all sessions together hold more than broker.max_queued_bytes, checked against a brute force
oracle (the largest queue at the moment of each drop) over random enqueues, sends and ends."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bridge.brokers.embedded.durable.journal import position
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.queuedbytes import QueuedBytes
from bridge.brokers.embedded.sessions import MESSAGE_OVERHEAD, Outgoing, SessionState
from bridge.brokers.embedded.stream import EventStream

# A session's own bounds out of the way: only the broker-wide one drops here.
LIMITS = Limits(max_offline_messages=0, max_offline_bytes=1 << 40)


async def _never_posted(event: object) -> None:
    raise AssertionError(f"queueing posted an event: {event!r}")


class Fleet:
    """Sessions sharing one QueuedBytes, as a Broker holds them (no connections, no event streams)."""

    def __init__(self, bound: int) -> None:
        self.states: dict[str, SessionState] = {}
        self.refused: Counter[str] = Counter()
        self.queued = QueuedBytes(bound, self.states)
        self.serial = 0

    def session(self, clientid: str) -> SessionState:
        stream = EventStream(_never_posted, clientid)  # queueing never posts an event
        state = SessionState(clientid, expiry=60, username=None, stream=stream, limits=LIMITS, refused=self.refused)
        state._queued = self.queued  # as Broker passes it (queued=...)
        self.states[clientid] = state
        return state

    def message(self, payload_len: int, seq: int = 0) -> Outgoing:
        self.serial += 1
        return Outgoing(f"m{self.serial:08d}", "t", b"x" * payload_len, 1, False, "pub", ("t",), seq=seq)

    def check(self) -> None:
        assert self.queued.total == sum(s.outbox_bytes for s in self.states.values())
        assert self.queued.total <= self.queued.bound
        for state in self.states.values():
            assert state.outbox_bytes == sum(m.size for m in state.outbox)


def size_of(payload_len: int) -> int:
    return 1 + payload_len + MESSAGE_OVERHEAD


def test_under_the_bound_nothing_is_dropped_and_no_heap_is_kept() -> None:
    fleet = Fleet(bound=10_000)
    a, b = fleet.session("a"), fleet.session("b")
    for _ in range(10):
        a.enqueue(fleet.message(300))
        b.enqueue(fleet.message(100))
    assert fleet.queued.total == 10 * size_of(300) + 10 * size_of(100) <= 10_000
    assert not fleet.queued.live and fleet.refused["queued_bytes"] == 0
    fleet.check()


def test_over_the_bound_the_largest_queue_loses_its_oldest_and_it_is_counted() -> None:
    fleet = Fleet(bound=5_000)
    big, small = fleet.session("big"), fleet.session("small")
    for _ in range(3):
        small.enqueue(fleet.message(100))
    firsts = [fleet.message(500) for _ in range(7)]
    for message in firsts:
        big.enqueue(message)  # 3 x 301 + 7 x 701 = 5810 > 5000: big loses its two oldest
    assert fleet.refused["queued_bytes"] == 2 == big.dropped == fleet.queued.dropped
    assert list(big.outbox) == firsts[2:] and len(small.outbox) == 3 and small.dropped == 0
    fleet.check()
    # the small queue's enqueue goes over too, and the big one still pays
    small.enqueue(fleet.message(700))
    assert big.dropped == 3 and small.dropped == 0 and list(big.outbox) == firsts[3:]
    fleet.check()


def test_the_new_message_itself_goes_when_its_queue_is_the_only_one() -> None:
    """The bound holds even against one message: the broker-wide bound may empty a queue
    (a session's own bounds always keep the newest)."""
    fleet = Fleet(bound=1_000)
    alone = fleet.session("alone")
    alone.enqueue(fleet.message(2_000))
    assert not alone.outbox and alone.dropped == 1 and fleet.queued.total == 0


@pytest.mark.parametrize("seed", range(6))
def test_every_drop_is_from_a_largest_queue_over_random_traffic(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    fleet = Fleet(bound=rng.choice([20_000, 60_000, 100_000]))
    original = SessionState.drop_oldest
    victims: list[tuple[int, int]] = []

    def drop_oldest(state: SessionState, reason: str) -> None:
        if reason == "queued_bytes":
            victims.append((state.outbox_bytes, max(s.outbox_bytes for s in fleet.states.values())))
        original(state, reason)

    monkeypatch.setattr(SessionState, "drop_oldest", drop_oldest)
    builds = []
    build = QueuedBytes._build
    monkeypatch.setattr(QueuedBytes, "_build", lambda queued: builds.append(1) or build(queued))
    names = [f"c{i}" for i in range(rng.choice([5, 50, 300]))]
    for name in names:
        fleet.session(name)
    for step in range(6_000):
        # phases of filling and of draining, so the heap is let go and built again
        roll = rng.random() if step // 1000 % 2 == 0 else 0.8 + rng.random() / 5
        name = rng.choice(names)
        state = fleet.states.get(name)
        if state is None:
            if roll < 0.05:
                fleet.session(name)  # the client is back with a new session
            continue
        if roll < 0.8:
            state.enqueue(fleet.message(rng.choice([10, 100, 1000, rng.randrange(3000)])))
        elif roll < 0.97:
            if state.outbox:
                state.pop()  # sent to its client
        elif roll < 0.99:
            state.discard()  # the session ended
            del fleet.states[state.clientid]
        fleet.check()
    assert victims, "the traffic never went over the bound"
    assert len(builds) >= 2, "the heap was never let go and built again"
    assert all(size == largest for size, largest in victims)
    assert fleet.refused["queued_bytes"] == len(victims) == fleet.queued.dropped


def test_the_heap_is_compacted_and_let_go_under_half_the_bound() -> None:
    fleet = Fleet(bound=100_000)
    states = [fleet.session(f"s{i}") for i in range(20)]
    for i in range(20_000):
        states[i % 20].enqueue(fleet.message(200))
        heap = fleet.queued._heap
        assert heap is None or len(heap) <= 2 * fleet.queued._current + 1024
    assert fleet.queued.live
    fleet.check()
    while fleet.queued.total >= fleet.queued.bound // 2:
        for state in states:
            if state.outbox:
                state.pop()
    states[0].enqueue(fleet.message(1))  # the next enqueue sees the total under half the bound
    assert not fleet.queued.live
    assert all(state.heap_mark == 0 for state in states)
    fleet.check()


class Touches:
    """A durable journal that records which sessions it was told about."""

    def __init__(self) -> None:
        self.touched: list[str] = []

    def touch(self, state: SessionState, *, whole: bool = False) -> None:
        self.touched.append(state.clientid)


def test_a_durable_session_dropping_for_the_bound_moves_its_position_past_the_dropped() -> None:
    """As a session's own bounds do: the journal is told, and the position it stores (the first
    queued logged message) no longer covers the dropped messages, so a restart does not bring
    them back."""
    fleet = Fleet(bound=3_000)
    journal = Touches()
    durable = fleet.session("durable")
    durable.journal = journal
    for seq in range(1, 6):
        durable.enqueue(fleet.message(500, seq=seq))  # 701 bytes each: the fifth goes over 3000
    assert durable.dropped == 1 and [m.seq for m in durable.outbox] == [2, 3, 4, 5]
    assert journal.touched == ["durable"]
    assert position(durable, head=5) == 1
