"""`GET /api/v1/retained?filter=...` pages: the right topics, in topic order, at the cost of what
a page returns (bridge/brokers/embedded/filterseek.py, bridge/api/routes.py `_retained_source`).

The finding: a filter whose first level is a wildcard (`+/42/meter/#`) read every
retained topic to answer a page. The work is counted as the topics the page's source looks at,
never timed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.api import paging
from bridge.api.routes import _retained_source
from bridge.brokers.embedded.router import Message, Router
from bridge.msgid import MsgIdGenerator
from bridge.topics import matches

IDS = MsgIdGenerator()


def router_with(topics: list[str]) -> Router:
    router = Router()
    for topic in topics:
        router.store_retained(Message(IDS.next(), topic, b"v", 0, True, ""), durable=False)
    return router


class Counted:
    """A page source that counts the topics it looks at (the work of a request)."""

    def __init__(self, router: Router, topic_filter: str) -> None:
        self.source = _retained_source(router, topic_filter, 0.0)
        self.looked = 0

    def __call__(self, position: str | None) -> Iterator[tuple[str, Any]]:
        for pair in self.source(position):
            self.looked += 1
            yield pair


async def walk(router: Router, topic_filter: str, limit: int) -> list[str]:
    """Every page of the filter, cursor to cursor: the topics in the order the pages gave them."""
    found: list[str] = []
    cursor: str | None = None
    while True:
        items, cursor = await paging.page(_retained_source(router, topic_filter, 0.0), cursor, limit)
        found.extend(item["topic"] for item in items)
        if cursor is None:
            return found


# Levels chosen to meet every edge of the ordering: characters before and after '/' ('-', '.',
# '0'), a level that is a prefix of another (`a`, `a-b`, `ab`), empty levels, `$` topics.
LEVEL = st.sampled_from(["a", "a-b", "ab", "a.", "b", "0", "42", "420", "4", "", "$SYS", "$x", "meter", "z"])
TOPIC = st.lists(LEVEL, min_size=1, max_size=4).map("/".join).filter(lambda t: t != "")
FILTER_LEVEL = st.sampled_from(["a", "a-b", "ab", "0", "42", "4", "", "$SYS", "meter", "+"])


@st.composite
def topic_filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(FILTER_LEVEL, min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


@settings(max_examples=300, deadline=None)
@given(topics=st.lists(TOPIC, max_size=40, unique=True), topic_filter=topic_filters(), limit=st.integers(1, 5))
async def test_pages_give_exactly_the_matching_topics_in_topic_order(
    topics: list[str], topic_filter: str, limit: int
) -> None:
    router = router_with(topics)
    expected = sorted(t for t in topics if matches(topic_filter, t))
    assert await walk(router, topic_filter, limit) == expected


async def test_a_leading_wildcard_filter_looks_at_what_the_page_returns_not_the_store() -> None:
    """20,000 topics `site/<nn>/meter/<n>` (200 per site) and 50 `$SYS` ones: a page of 10 of
    `+/42/meter/#` looks at a few dozen topics, not the 20,050 (main before this change read every one)."""
    topics = [f"site/{n % 100:02d}/meter/{n:06d}" for n in range(20_000)]
    topics += [f"$SYS/broker/value/{n}" for n in range(50)]
    topics += [f"zone{n}/42/x" for n in range(100)]  # after `site`: branches ruled out at level 3
    random.Random(7).shuffle(topics)
    router = router_with(topics)
    matching = sorted(t for t in topics if matches("+/42/meter/#", t))
    assert len(matching) == 200

    counted = Counted(router, "+/42/meter/#")
    items, cursor = await paging.page(counted, None, 10)
    assert [item["topic"] for item in items] == matching[:10]
    assert counted.looked <= 30, counted.looked

    counted = Counted(router, "+/42/meter/#")  # the next page, from the cursor
    items, cursor = await paging.page(counted, cursor, 10)
    assert [item["topic"] for item in items] == matching[10:20]
    assert counted.looked <= 30, counted.looked

    counted = Counted(router, "+/42/meter/#")  # the last page: the rest of the store is jumped over
    items, cursor = await paging.page(counted, matching[-2], 10)
    assert [item["topic"] for item in items] == matching[-1:]
    assert cursor is None
    assert counted.looked <= 200, counted.looked  # one look per `zone<n>` branch and a few more


async def test_hash_skips_the_dollar_topics_without_reading_them() -> None:
    topics = [f"$SYS/broker/value/{n:05d}" for n in range(5_000)] + [f"a/{n}" for n in range(20)]
    router = router_with(topics)
    counted = Counted(router, "#")
    items, _cursor = await paging.page(counted, None, 10)
    assert [item["topic"] for item in items] == sorted(f"a/{n}" for n in range(20))[:10]
    assert counted.looked <= 13, counted.looked


async def test_a_filter_matching_nothing_answers_an_empty_page_cheaply() -> None:
    topics = [f"dev/{n:05d}/state" for n in range(10_000)]
    router = router_with(topics)
    counted = Counted(router, "+/+/config")
    items, cursor = await paging.page(counted, None, 10)
    assert items == [] and cursor is None
    # every `dev/<n>/` branch is a branch the filter rules out: one look each, no more
    assert counted.looked <= 10_001, counted.looked
    counted = Counted(router, "dev/+/state/#")
    items, _cursor = await paging.page(counted, None, 10)
    assert len(items) == 10 and counted.looked <= 12, counted.looked
