"""``server.limits``: the bounds HTTP and MCP share. One key's long questions cannot take every slot; a slot comes
back when its work ends, also after a timeout; the event loop is never the one doing the work."""

from __future__ import annotations

import asyncio
import threading

import pytest

from graphrag_pipeline.lib.core.config import ServerConfig
from graphrag_pipeline.server.limits import AnswerSlots, Busy, TimedOut, check_question


def test_one_key_cannot_take_every_slot_and_slots_come_back():
    slots = AnswerSlots(ServerConfig(max_concurrent_requests=3, max_concurrent_requests_per_key=2,
                                     request_timeout_seconds=30), "test")
    release = threading.Event()

    async def scenario():
        held = [asyncio.create_task(slots.run("greedy", release.wait)) for _ in range(2)]
        await asyncio.sleep(0.05)
        with pytest.raises(Busy, match="this key has 2 requests running"):
            await slots.run("greedy", lambda: "third")
        assert await slots.run("other", lambda: "answered") == "answered"  # another key still gets a slot
        release.set()
        await asyncio.gather(*held)
        assert await slots.run("greedy", lambda: "again") == "again"

    asyncio.run(scenario())
    slots.close()


def test_a_timeout_answers_while_the_work_goes_on_and_its_slot_returns_when_it_ends():
    slots = AnswerSlots(ServerConfig(max_concurrent_requests=1, request_timeout_seconds=0.05), "test")
    release = threading.Event()

    async def scenario():
        with pytest.raises(TimedOut, match="longer than 0.05 s"):
            await slots.run("key", release.wait)
        with pytest.raises(Busy):  # the timed-out work still runs, holding the only slot
            await slots.run("key", lambda: None)
        release.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            try:
                return await slots.run("key", lambda: "freed")
            except Busy:
                continue

    assert asyncio.run(scenario()) == "freed"
    slots.close()


@pytest.mark.parametrize(("text", "problem"), [("x" * 2001, "at most 2000"), ("\u00a0 ", "blank")])
def test_questions_are_bounded_and_not_blank(text, problem):
    with pytest.raises(ValueError, match=problem):
        check_question(text, ServerConfig())
    check_question("which services depend on payments-api?", ServerConfig())
