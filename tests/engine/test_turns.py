"""The turn clock (``engine/turns.py``): a turn ends when told, or once quiet."""

from __future__ import annotations

import asyncio

from sidecar.engine.turns import Turns


async def test_a_turn_ends_when_told_and_is_forgotten() -> None:
    turns = Turns()
    turn = turns.of("s")
    assert turns.of("s") is turn and turns.sessions() == ["s"]
    turns.touch("s")
    turns.end("s")
    await asyncio.wait_for(turn.ended, 1)
    assert turns.sessions() == []
    assert turns.of("s") is not turn  # the next work waits for a new turn
    turns.cancel_all()


async def test_touch_and_end_of_a_session_without_a_turn_do_nothing() -> None:
    turns = Turns()
    turns.touch("none")
    turns.end("none")
    assert turns.sessions() == []


async def test_a_touch_moves_the_quiet_end() -> None:
    turns = Turns()
    turn = turns.of("s")
    first = turn.last
    while asyncio.get_running_loop().time() == first:
        await asyncio.sleep(0)
    turns.touch("s")
    assert turn.last > first and not turn.ended.done()
    turns.cancel_all()
