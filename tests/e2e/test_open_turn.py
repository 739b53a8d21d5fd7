"""Issue 31, 3b: a compaction made while the session's latest turn is open keeps that turn
(its user message, the steps, their tool calls and results) verbatim after the summary.

A real daemon over stdio on each backend. The model is small (usable 20,000) and reports no
usage, so only the read-time fit compacts, except where a test reports an overflow itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sidecar_client import Client
from wire import put_message, put_part, read_call, stored

from .conftest import Spawner

MODEL = {"providerID": "local", "modelID": "tiny"}
MODELS = {"local/tiny": {"context": 24_000, "output": 4_000}}  # usable 20,000
NO_USAGE = {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}


def usage(n: int) -> dict[str, Any]:
    return {"input": n, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}


class Agent:
    """A frontend mid-session: closed turns, then a turn whose steps end in tool calls."""

    def __init__(self, c: Client, sid: str) -> None:
        self.c, self.sid, self.n = c, sid, 0

    @classmethod
    async def start(cls, spawner: Spawner, **compaction: Any) -> Agent:
        """A new daemon (the small model, ``compaction`` settings) and a session on it."""
        options: dict[str, Any] = {"models": MODELS}
        if compaction:
            options["compaction"] = compaction
        c = await spawner(initialization_options=options)
        return cls(c, (await c.create_session()).id)

    async def user(self, text: str) -> str:
        u = await put_message(self.c, {"role": "user", "sessionID": self.sid, "model": MODEL})
        await put_part(
            self.c, {"type": "text", "sessionID": self.sid, "messageID": u["id"], "text": text}
        )
        return str(u["id"])

    async def step(
        self,
        parent: str,
        *,
        finish: str | None,
        output: int = 0,
        tokens: dict[str, Any] = NO_USAGE,
        text: str = "",
    ) -> str:
        """One assistant step: a completed tool call with ``output`` tokens of output (when
        ``output``), some text, and ``finish`` (None: the step is still running)."""
        self.n += 1
        a: dict[str, Any] = {"role": "assistant", "sessionID": self.sid, "parentID": parent}
        a.update(MODEL)
        a = await put_message(self.c, a)
        if output:
            body = f"<{self.n}>" + "o" * (4 * output)
            part = read_call(self.sid, a["id"], f"f{self.n}.py", body, title="read", metadata={})
            await put_part(self.c, part)
        if text:
            await put_part(
                self.c, {"type": "text", "sessionID": self.sid, "messageID": a["id"], "text": text}
            )
        if finish is not None:
            a.update(finish=finish, tokens=tokens)
            await put_message(self.c, a)
        return str(a["id"])

    async def closed_turn(self, size: int, tokens: dict[str, Any] = NO_USAGE) -> None:
        u = await self.user(f"turn {self.n}")
        await self.step(u, finish="stop", output=size, tokens=tokens, text="done")


def window_ids(ctx: dict[str, Any]) -> list[str]:
    return [m["info"]["id"] for m in ctx["messages"]]


def marker_tail(ctx: dict[str, Any]) -> str | None:
    """The ``tailStartID`` of the compaction part heading the window."""
    head = ctx["messages"][0]
    part = next(p for p in head["parts"] if p["type"] == "compaction")
    tail: str | None = part.get("tailStartID")
    return tail


async def test_a_read_that_compacts_mid_turn_keeps_the_open_turn(spawner: Spawner) -> None:
    agent = await Agent.start(spawner)
    c, sid = agent.c, agent.sid
    for _ in range(5):
        await agent.closed_turn(4_000)
    u = await agent.user("Now read big.py and fix it")
    a1 = await agent.step(u, finish="tool-calls", output=2_000)
    a2 = await agent.step(u, finish=None)  # the step being made: stored before the read
    raw = await c.request("session/context", {"sessionID": sid, "fit": False})
    assert raw["estimatedTokens"] > 20_000
    ctx = await c.request("session/context", {"sessionID": sid})
    assert ctx["overflow"] is False and ctx["estimatedTokens"] <= 20_000
    (event,) = c.notifications("session/compacted")
    ids = window_ids(ctx)
    # marker, summary, the open turn verbatim, continue
    assert ids[2:5] == [u, a1, a2], ids
    assert marker_tail(ctx) == u
    assert f"<{agent.n - 1}>" in json.dumps(ctx["messages"][3])  # the tool result, verbatim
    assert event["openTurn"] == "kept"
    (record,) = (await c.request("session/compactions", {"sessionID": sid}))["compactions"]
    assert record["openTurn"] == "kept"
    assert u not in record["replacedIDs"] and a1 not in record["replacedIDs"]
    # The stored history says what the window is: the marker's tail points at the turn.
    page = await stored(c, sid)
    markers = [m for m in page.messages if any(p["type"] == "compaction" for p in m.parts)]
    assert [p.get("tailStartID") for p in markers[0].parts] == [u]


async def test_collapse_keeps_the_whole_open_turn(spawner: Spawner) -> None:
    """Collapse's own breakpoint falls inside the turn (the turn is most of the window): the
    tail is moved back to the turn's user message."""
    agent = await Agent.start(spawner, method="collapse", summaryShare=10)
    c, sid = agent.c, agent.sid
    for _ in range(3):
        await agent.closed_turn(2_500)  # with the turn below: over the usable 20,000
    u = await agent.user("Read both modules")
    # Most of the window, within the room the summary leaves it (the collapse budget, 17,000,
    # less the summary's 2,000 and its task's 1,000).
    a1 = await agent.step(u, finish="tool-calls", output=6_800)
    a2 = await agent.step(u, finish="tool-calls", output=6_800)
    ctx = await c.request("session/context", {"sessionID": sid})
    assert c.notifications("session/compacted")
    ids = window_ids(ctx)
    assert marker_tail(ctx) == u
    assert ids[2:5] == [u, a1, a2], ids
    assert ctx["overflow"] is False


async def test_a_turn_end_overflow_after_tool_calls_keeps_opencode_behaviour_by_default(
    spawner: Spawner,
) -> None:
    agent = await Agent.start(spawner)
    c, sid = agent.c, agent.sid
    for _ in range(3):
        await agent.closed_turn(3_000)
    u = await agent.user("Read it")
    await agent.step(u, finish="tool-calls", output=1_000, tokens=usage(21_000))
    await c.request("session/idle", {"sessionID": sid})
    (event,) = c.notifications("session/compacted")
    assert "openTurn" not in event
    ctx = await c.request("session/context", {"sessionID": sid})
    assert marker_tail(ctx) is None
    assert len(ctx["messages"]) == 3  # marker, summary, continue: OpenCode 1.1.53's window


async def test_keep_open_turn_applies_the_rule_to_the_turn_end_overflow(spawner: Spawner) -> None:
    agent = await Agent.start(spawner, keepOpenTurn=True)
    c, sid = agent.c, agent.sid
    for _ in range(3):
        await agent.closed_turn(3_000)
    u = await agent.user("Read it")
    a1 = await agent.step(u, finish="tool-calls", output=1_000, tokens=usage(21_000))
    await c.request("session/idle", {"sessionID": sid})
    (event,) = c.notifications("session/compacted")
    assert event["openTurn"] == "kept"
    ctx = await c.request("session/context", {"sessionID": sid})
    assert marker_tail(ctx) == u
    assert window_ids(ctx)[2:4] == [u, a1]
    # A turn that ended (finish "stop") keeps nothing, whatever the setting.
    d = (await c.create_session()).id
    other = Agent(c, d)
    for _ in range(3):
        await other.closed_turn(3_000)
    await other.closed_turn(1_000, tokens=usage(21_000))
    await c.request("session/idle", {"sessionID": d})
    ctx = await c.request("session/context", {"sessionID": d})
    assert marker_tail(ctx) is None and len(ctx["messages"]) == 3


async def test_an_open_turn_that_does_not_fit_keeps_its_newest_part_and_says_so(
    spawner: Spawner,
) -> None:
    agent = await Agent.start(spawner)
    c, sid = agent.c, agent.sid
    await agent.closed_turn(3_000)
    u = await agent.user("Read all of it")
    a1 = await agent.step(u, finish="tool-calls", output=9_000)
    a2 = await agent.step(u, finish="tool-calls", output=9_000)
    a3 = await agent.step(u, finish=None)
    ctx = await c.request("session/context", {"sessionID": sid})
    (event,) = c.notifications("session/compacted")
    assert event["openTurn"] == "cut"
    ids = window_ids(ctx)
    assert marker_tail(ctx) == a2
    assert ids[2:4] == [a2, a3] and u not in ids and a1 not in ids
    assert f"<{agent.n - 1}>" in json.dumps(ctx["messages"][2])  # the newest result, verbatim
    (record,) = (await c.request("session/compactions", {"sessionID": sid}))["compactions"]
    assert record["openTurn"] == "cut"


@pytest.mark.parametrize("keep", [True, False])
async def test_a_prepared_summary_keeps_the_open_turn(spawner: Spawner, keep: bool) -> None:
    """``compaction.prepare``: the summary prepared at the step that ended in tool calls is
    committed by the read when it left the open turn out (``keepOpenTurn``); one that covers
    the turn is not used, and the compaction keeps the turn all the same."""
    agent = await Agent.start(spawner, prepare=0.3, keepOpenTurn=keep)
    c, sid = agent.c, agent.sid
    for _ in range(5):
        await agent.closed_turn(4_000, tokens=usage(1_000))
    u = await agent.user("Now read big.py")
    # 8,000 of 20,000 reported: over prepare (6,000), under the overflow.
    a1 = await agent.step(u, finish="tool-calls", output=2_000, tokens=usage(8_000))
    a2 = await agent.step(u, finish=None)
    ctx = await c.request("session/context", {"sessionID": sid})
    (event,) = c.notifications("session/compacted")
    assert event["prepared"] is keep
    assert event["openTurn"] == "kept"
    assert marker_tail(ctx) == u
    assert window_ids(ctx)[2:5] == [u, a1, a2]
