"""Issue 31, 3c: the frontend's fixed overhead (system prompt, tool schemas) counts in the
read-time fit: given as ``overheadTokens``, or learned from each finished step's reported
usage minus the estimate of the window served for it; kept across a restart.

A real daemon over stdio on each backend; the model is small (usable 20,000).
"""

from __future__ import annotations

from typing import Any

import pytest
from sidecar_client import RpcError
from wire import put_message, put_part

from .conftest import Spawner
from .test_open_turn import MODEL, MODELS, NO_USAGE, Agent


def reported(input: int, cache_read: int = 0) -> dict[str, Any]:
    cache = {"read": cache_read, "write": 0}
    return {"input": input, "output": 300, "reasoning": 0, "cache": cache}


async def test_given_overhead_counts_in_the_fit(spawner: Spawner) -> None:
    c = await spawner(initialization_options={"models": MODELS})
    plain = (await c.create_session()).id
    heavy = (await c.create_session()).id
    for sid in (plain, heavy):
        agent = Agent(c, sid)
        for _ in range(4):
            await agent.closed_turn(3_500)
    ctx = await c.request("session/context", {"sessionID": plain})
    assert 12_000 < ctx["estimatedTokens"] < 20_000
    assert ctx["overheadTokens"] == 0 and ctx["overheadSource"] == "none"
    assert not c.notifications("session/compacted")
    # The same window with 9,300 tokens of system prompt and tools does not fit: compacted.
    # (The client library's wrapper passes it.)
    fitted = await c.context(heavy, overhead_tokens=9_300)
    assert fitted.overhead_tokens == 9_300 and fitted.overhead_source == "given"
    assert fitted.estimated_tokens + 9_300 <= 20_000 and fitted.overflow is False
    (event,) = c.notifications("session/compacted")
    assert event["sessionID"] == heavy


async def test_the_overhead_is_learned_from_reported_usage_and_survives_a_restart(
    spawner: Spawner,
) -> None:
    agent = await Agent.start(spawner)
    c, sid = agent.c, agent.sid

    async def step(overhead: int | None, output: int = 200) -> dict[str, Any]:
        """A user message, the read that serves the step, and the step reporting what the
        provider counted: the served window plus ``overhead`` (None: no usage reported)."""
        u = await agent.user(f"question {agent.n}")
        ctx = await c.request("session/context", {"sessionID": sid})
        served = ctx["estimatedTokens"]
        tokens = NO_USAGE if overhead is None else reported(served + overhead - 1_000, 1_000)
        await agent.step(u, finish="stop", output=output, tokens=tokens, text="ok")
        return ctx

    first = await step(None)
    assert first["overheadSource"] == "none"
    await step(9_000)
    ctx = await step(9_200)
    assert (ctx["overheadTokens"], ctx["overheadSource"]) == (9_000, "learned")
    await step(30_000)  # one odd step does not move the median far
    ctx = await c.request("session/context", {"sessionID": sid})
    assert (ctx["overheadTokens"], ctx["overheadSource"]) == (9_200, "learned")
    # A given value wins over the learned one.
    given = await c.request("session/context", {"sessionID": sid, "overheadTokens": 100})
    assert (given["overheadTokens"], given["overheadSource"]) == (100, "given")
    # The learned value is stored with the session's limits: a new daemon starts from it.
    await c.request("session/idle", {"sessionID": sid})
    await c.close()
    c = await spawner(initialization_options={"models": MODELS})
    agent.c = c
    ctx = await c.request("session/context", {"sessionID": sid})
    assert (ctx["overheadTokens"], ctx["overheadSource"]) == (9_200, "learned")
    # It counts in the fit: a window of ~12,000 estimated tokens plus the overhead is over.
    assert not c.notifications("session/compacted")
    await step(9_200, output=12_000)
    ctx = await c.request("session/context", {"sessionID": sid})
    assert ctx["estimatedTokens"] + ctx["overheadTokens"] <= 20_000
    assert c.notifications("session/compacted")


async def test_the_turn_end_overflow_check_is_unchanged_by_the_overhead(
    spawner: Spawner,
) -> None:
    """Reported tokens already include the overhead: the turn-end check adds nothing."""
    agent = await Agent.start(spawner)
    c, sid = agent.c, agent.sid
    for _ in range(3):
        u = await agent.user("q")
        await c.request("session/context", {"sessionID": sid, "overheadTokens": 9_000})
        await agent.step(u, finish="stop", output=1_000, tokens=reported(15_000), text="ok")
    await c.request("session/idle", {"sessionID": sid})
    overflow = await c.request("session/overflow", {"sessionID": sid})
    assert overflow["overflow"] is False and overflow["count"] == 15_300
    assert not c.notifications("session/compacted")


@pytest.mark.parametrize("value", [-1, "many", 1.5])
async def test_a_bad_overhead_is_refused_naming_the_field(spawner: Spawner, value: Any) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    with pytest.raises(RpcError) as err:
        await c.request("session/context", {"sessionID": sid, "overheadTokens": value})
    assert err.value.code == -32602 and "overheadTokens" in err.value.message


async def test_a_session_of_an_unknown_model_reports_the_given_overhead(
    spawner: Spawner,
) -> None:
    """No limits known (no fit at all): the reply still says what overhead it took."""
    c = await spawner()
    sid = (await c.create_session()).id
    u = await put_message(c, {"role": "user", "sessionID": sid, "model": MODEL})
    await put_part(c, {"type": "text", "sessionID": sid, "messageID": u["id"], "text": "hi"})
    ctx = await c.request("session/context", {"sessionID": sid, "overheadTokens": 5})
    assert (ctx["overheadTokens"], ctx["overheadSource"]) == (5, "given")
