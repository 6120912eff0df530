"""auth/checks.py: slow password checks take turns by source address, and each address's queue is
bounded (docs/security.md#what-each-limit-bounds). The checks here block on events the test
sets, so the order is decided by the scheduler alone, not by timing."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bridge.brokers.embedded.auth.checks import FairChecks, TooManyChecks


async def test_another_address_goes_next_not_after_the_queue() -> None:
    checks = FairChecks(workers=1, per_address=20)
    order: list[str] = []
    gate = threading.Event()

    def check(name: str) -> bool:
        gate.wait(10)
        order.append(name)
        return name == "good"

    flood = [asyncio.create_task(checks.run("10.0.0.1", check, f"bad{i}")) for i in range(10)]
    await asyncio.sleep(0)  # the first bad check is running, nine wait
    good = asyncio.create_task(checks.run("10.0.0.2", check, "good"))
    await asyncio.sleep(0)
    gate.set()
    assert await good is True
    assert not any(await asyncio.gather(*flood))
    assert order[:2] == ["bad0", "good"]  # after the check already running, before the other nine
    assert checks.done == 11 and checks.pending("10.0.0.1") == 0
    checks.close()


async def test_an_address_past_its_share_is_refused_at_once() -> None:
    checks = FairChecks(workers=1, per_address=3)
    release = threading.Event()
    held = [asyncio.create_task(checks.run("10.0.0.1", release.wait, 10)) for _ in range(3)]
    await asyncio.sleep(0)
    with pytest.raises(TooManyChecks, match=r"3 password checks from 10\.0\.0\.1 already waiting"):
        await checks.run("10.0.0.1", release.wait, 10)
    other = asyncio.create_task(checks.run("10.0.0.2", release.wait, 10))  # another address is taken
    await asyncio.sleep(0)
    release.set()
    assert all(await asyncio.gather(*held, other))
    assert await checks.run("10.0.0.1", lambda: True)  # room again once they are done
    checks.close()


async def test_a_check_given_up_while_waiting_is_skipped() -> None:
    checks = FairChecks(workers=1, per_address=5)
    release = threading.Event()
    running = asyncio.create_task(checks.run("a", release.wait, 10))
    await asyncio.sleep(0)
    ran: list[int] = []
    waiting = asyncio.create_task(checks.run("a", lambda: ran.append(1) or True))
    await asyncio.sleep(0)
    waiting.cancel()  # the client went away
    release.set()
    assert await running
    assert await checks.run("a", lambda: True)
    assert ran == [] and checks.pending("a") == 0
    checks.close()
