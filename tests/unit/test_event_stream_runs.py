"""A client's event stream hands a run of PUBLISH events to the sink as one entry with one kept
future (bridge/brokers/embedded/stream.py, post_run): what that future promises, and that the
run keeps its place among the client's other events."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from bridge.brokers.embedded.stream import EventStream
from bridge.brokers.eventloop import running_loop
from bridge.events import Event, MessagePublish


def _publish(n: int) -> MessagePublish:
    return MessagePublish(
        msgid=f"{n:032x}",
        clientid="c",
        username=None,
        topic=f"t/{n}",
        qos=1,
        payload=b"%d" % n,
        retain=False,
        node="n",
        peername="p",
        timestamp=0.0,
    )


class CallbackSink:
    """A sink with the dispatcher's callback form: `dispatch(event, on_committed)`. Events whose
    topic is in `unmatched` match no rule; those in `at_once` report their commit from inside
    the call; the others wait in `waiting` until the test commits them."""

    def __init__(self, unmatched: tuple[str, ...] = (), at_once: tuple[str, ...] = (), fail: str = "") -> None:
        self.seen: list[Event] = []
        self.waiting: dict[str, Callable[[], None]] = {}
        self.unmatched, self.at_once, self.fail = unmatched, at_once, fail

    async def __call__(self, event: Event) -> asyncio.Future[None] | None:
        raise AssertionError("the stream uses the callback form when the sink has one")

    async def dispatch(self, event: Event, on_committed: Callable[[], None] | None) -> bool:
        self.seen.append(event)
        topic = getattr(event, "topic", "")
        if topic == self.fail:
            raise RuntimeError("the sink failed")
        if topic in self.unmatched:
            return False
        if on_committed is not None:
            if topic in self.at_once:
                on_committed()
            else:
                self.waiting[topic] = on_committed
        return True


async def _taken(stream: EventStream, events: list[Event]) -> asyncio.Future[None] | None:
    return await stream.post_run(events)


async def test_a_run_is_kept_once_every_event_a_rule_took_is_committed() -> None:
    sink = CallbackSink(unmatched=("t/1",))
    stream = EventStream(sink, "c")  # type: ignore[arg-type]
    kept = await _taken(stream, [_publish(0), _publish(1), _publish(2)])
    assert kept is not None and [e.topic for e in sink.seen] == ["t/0", "t/1", "t/2"]  # type: ignore[attr-defined]
    sink.waiting.pop("t/2")()
    await asyncio.sleep(0)
    assert not kept.done()  # t/0 is not committed yet
    sink.waiting.pop("t/0")()
    await asyncio.sleep(0)
    assert kept.done() and not kept.cancelled()


async def test_commits_reported_while_the_run_is_handed_over_do_not_end_it_early() -> None:
    sink = CallbackSink(at_once=("t/0",))
    stream = EventStream(sink, "c")  # type: ignore[arg-type]
    kept = await _taken(stream, [_publish(0), _publish(1)])
    assert kept is not None and not kept.done()  # t/0 committed inside its call, t/1 waits
    sink.waiting.pop("t/1")()
    assert kept.done()


async def test_a_run_no_rule_took_has_nothing_to_wait_for() -> None:
    sink = CallbackSink(unmatched=("t/0", "t/1"))
    assert await _taken(EventStream(sink, "c"), [_publish(0), _publish(1)]) is None  # type: ignore[arg-type]


async def test_a_sink_failing_on_one_event_leaves_the_whole_run_unkept_and_the_rest_handed_over() -> None:
    sink = CallbackSink(fail="t/1")
    kept = await _taken(EventStream(sink, "c"), [_publish(0), _publish(1), _publish(2)])  # type: ignore[arg-type]
    assert kept is not None and kept.cancelled()  # none of the run is acknowledged
    assert [e.topic for e in sink.seen] == ["t/0", "t/1", "t/2"]  # type: ignore[attr-defined]


async def test_a_sink_without_the_callback_form_settles_the_run_by_its_futures() -> None:
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[None]] = []

    async def sink(event: Event) -> asyncio.Future[None]:
        futures.append(loop.create_future())
        return futures[-1]

    stream = EventStream(sink, "c")
    kept = await _taken(stream, [_publish(0), _publish(1)])
    assert kept is not None
    futures[0].set_result(None)
    await asyncio.sleep(0)
    assert not kept.done()
    futures[1].cancel()  # that message was not kept
    await asyncio.sleep(0)
    assert kept.cancelled()


async def test_a_run_keeps_its_place_among_the_clients_other_events() -> None:
    sink = CallbackSink(at_once=tuple(f"t/{n}" for n in range(5)))
    stream = EventStream(sink, "c")  # type: ignore[arg-type]
    first = stream.post(_publish(0), wait=True)
    run = stream.post_run([_publish(1), _publish(2), _publish(3)])
    stream.post(_publish(4))  # a receipt: nobody waits for it
    await stream.drain()
    assert first is not None and run.done() and first.done()
    assert [e.topic for e in sink.seen] == ["t/0", "t/1", "t/2", "t/3", "t/4"]  # type: ignore[attr-defined]


def test_running_loop_is_the_loop_running_now_each_time_a_new_one_runs() -> None:
    loops = [asyncio.new_event_loop() for _ in range(2)]

    async def which() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
        return running_loop(), asyncio.get_running_loop()

    for loop in loops:
        got, running = loop.run_until_complete(which())
        assert got is running is loop
        loop.close()
    with pytest.raises(RuntimeError):
        running_loop()  # no loop runs here now
