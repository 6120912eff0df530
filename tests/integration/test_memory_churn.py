"""Memory after churn: 1,000,000 subscriptions (250,000 sessions of 4) made and removed,
300,000 retained messages set and cleared three times, in a real bridge's embedded broker.

What the code keeps is asserted: once most entries are gone, no dict of the broker's session
table, topic trees or subscriber lists keeps a table sized for the fleet (compact.py; CPython
never shrinks a dict on delete), and the trees and sorted indexes hold nothing once everything is
gone. What the process keeps is measured and printed (`-s`), never asserted: the resident size
after each step, and after asking glibc to hand back its free pages (malloc_trim), which tells
what Python's and the C allocator's free lists keep from what objects still hold
(docs/benchmarks.md#memory-after-churn).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.app import Bridge
from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.compact import SPARSE
from support.bridges import core
from tests.integration.test_api_at_size import (  # the same fleet, put in the same way
    FILTERS,
    SESSIONS,
    add_session,
    bridge,
    clientid,
    remove_session,
    set_retained,
)

__all__ = ["bridge"]  # the fixture, used by name

pytestmark = pytest.mark.slow

RETAINED = 300_000
KEEP_EVERY = 100  # 1% of the fleet stays through the partial removals


def rss_mib() -> float:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def trimmed_rss_mib() -> float:
    """The resident size once glibc gave back the free pages it can (what it kept until then)."""
    with contextlib.suppress(OSError):  # not glibc: the figure is the same as before
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mib()


def dicts_of(broker: Broker) -> list[dict[Any, Any]]:
    """Every dict the broker keeps per session, subscription or retained topic."""
    found: list[dict[Any, Any]] = [broker.states, broker.active]
    router: Any = broker.router
    stack = [router._subscribers._root, router._shared._root, router.retained._root]
    while stack:
        node = stack.pop()
        if node.children:
            found.append(node.children)
            stack.extend(node.children.values())
        value = node.value
        if isinstance(value, dict):  # subscribers by client id, or shared groups by name
            found.append(value)
            found.extend(group.members for group in value.values() if hasattr(group, "members"))
    return found


def sparse(broker: Broker) -> list[tuple[int, int]]:
    """(entries, table bytes) of each dict whose table is far larger than its entries need."""
    return [
        (len(d), sys.getsizeof(d))
        for d in dicts_of(broker)
        if sys.getsizeof(d) > 4096 and sys.getsizeof(d) > 2 * SPARSE * 40 * len(d)
    ]


def empty_trees(broker: Broker) -> bool:
    router: Any = broker.router
    roots = (router._subscribers._root, router._shared._root, router.retained._root)
    return all(root.children is None for root in roots) and len(router.retained.topics) == 0


async def test_what_the_broker_keeps_after_churn(bridge: Bridge) -> None:
    broker = core(bridge)
    assert empty_trees(broker)  # broker.sys_interval = 0 in this bridge: no $SYS status either
    figures = [("start", rss_mib(), trimmed_rss_mib())]

    def measure(step: str) -> None:
        figures.append((step, rss_mib(), trimmed_rss_mib()))

    names = [clientid(n) for n in range(SESSIONS)]
    for name in names:
        add_session(broker, name)
    assert sum(len(broker.states[name].subscriptions) for name in names) == SESSIONS * len(FILTERS)
    measure(f"{SESSIONS * len(FILTERS):,} subscriptions")

    for n, name in enumerate(names):  # every subscription removed but 1% of the sessions'
        if n % KEEP_EVERY:
            state = broker.states[name]
            for topic_filter in list(state.subscriptions):
                broker.router.unsubscribe(state, topic_filter)
    assert sparse(broker) == []
    measure("unsubscribed (1% kept)")

    for n, name in enumerate(names):
        if n % KEEP_EVERY:
            remove_session(broker, name)
    assert sparse(broker) == []
    measure("sessions gone (1% kept)")

    for n, name in enumerate(names):
        if not n % KEEP_EVERY:
            remove_session(broker, name)
    assert len(broker.states) == 0 and len(broker.session_ids) == 0 and empty_trees(broker)
    assert sys.getsizeof(broker.states) <= 4096
    measure("every session gone")

    topics = [f"site/{n % 100:02d}/meter/{n:07d}" for n in range(RETAINED)]
    for cycle in range(1, 4):
        for topic in topics:
            set_retained(broker, topic)
        measure(f"{RETAINED:,} retained, cycle {cycle}")
        for n, topic in enumerate(topics):
            if n % KEEP_EVERY:
                set_retained(broker, topic, b"")
        assert sparse(broker) == []
        for n, topic in enumerate(topics):
            if not n % KEEP_EVERY:
                set_retained(broker, topic, b"")
        assert empty_trees(broker)
        measure(f"retained cleared, cycle {cycle}")

    print()
    for step, rss, trimmed in figures:
        print(f"{step:32} RSS {rss:7.0f} MiB, after malloc_trim {trimmed:7.0f} MiB")
