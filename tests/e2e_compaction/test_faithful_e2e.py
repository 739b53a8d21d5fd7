"""Issue 10 end to end: read-your-writes, windows that fit, one timeline, determinism.

A real daemon over stdio, driven by the Python client. No test waits on time: reads are
pipelined or sent after the writes they depend on, and the daemon's own ordering does the rest.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

import pytest
from sidecar_client import Client
from wire import put_message, put_part, read_call

from .conftest import Spawn

MODEL = {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}  # 200k, usable 168k
SMALL_MODEL = {"providerID": "local", "modelID": "tiny"}
SMALL_LIMIT = {"context": 24_000, "output": 4_000}  # usable 20,000
NO_USAGE = {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}
T2023 = 1_672_531_200_000  # 2023-01-01T00:00:00Z


def usage(n: int) -> dict[str, Any]:
    return {"input": n, "output": 200, "reasoning": 0, "cache": {"read": 0, "write": 0}}


class Writer:
    """A frontend that writes its own ids and (optionally) its own clock."""

    def __init__(self, c: Client, sid: str, model: Mapping[str, str], clock: int | None) -> None:
        self.c, self.sid, self.model, self.clock, self.n = c, sid, model, clock, 0

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_z{self.n:06d}"  # sorts after the daemon's ids at equal times

    def _time(self) -> dict[str, int]:
        if self.clock is None:
            return {}
        self.clock += 1_000
        return {"created": self.clock}

    async def turn(
        self, text: str, *, tokens: dict[str, Any], output: str | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A user message and a finished assistant step, all but the finishing write."""
        user = await put_message(
            self.c,
            {
                "id": self._id("msg"),
                "role": "user",
                "sessionID": self.sid,
                "time": self._time(),
                "model": dict(self.model),
            },
        )
        await put_part(
            self.c,
            {
                "id": self._id("prt"),
                "type": "text",
                "sessionID": self.sid,
                "messageID": user["id"],
                "text": text,
            },
        )
        a = await put_message(
            self.c,
            {
                "id": self._id("msg"),
                "role": "assistant",
                "sessionID": self.sid,
                "parentID": user["id"],
                "time": self._time(),
                **self.model,
            },
        )
        if output is not None:
            part = read_call(self.sid, a["id"], f"f{self.n}.py", output)
            await put_part(self.c, {"id": self._id("prt"), **part})
        await put_part(
            self.c,
            {
                "id": self._id("prt"),
                "type": "text",
                "sessionID": self.sid,
                "messageID": a["id"],
                "text": f"Done with {text}.",
            },
        )
        a.update(finish="stop", tokens=tokens)
        return user, a

    async def finished_turn(
        self, text: str, *, tokens: dict[str, Any], output: str | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``turn`` and then its finishing write."""
        user, a = await self.turn(text, tokens=tokens, output=output)
        await put_message(self.c, a)
        return user, a


async def test_pipelined_context_behind_an_overflowing_write_is_compacted(start: Spawn) -> None:
    c = await start()
    sid = (await c.create_session()).id
    w = Writer(c, sid, MODEL, None)
    _, a = await w.finished_turn("Refactor src/app.py", tokens=usage(5_000), output="x" * 4_000)
    _, a = await w.turn("Now add tests", tokens=usage(180_000))
    write = c.call("message/update", {"message": a})
    read = c.call("session/context", {"sessionID": sid, "format": "openai"})
    over = c.call("session/overflow", {"sessionID": sid})
    await write
    ctx = await read
    assert ctx["messages"][0] == {"role": "user", "content": "What did we do so far?"}
    assert ctx["messages"][-1] == {"role": "user", "content": "Continue if you have next steps"}
    assert (await over)["overflow"] is False  # measured on the compacted session
    # wait:false is a quick look: allowed to be stale, but it answers.
    quick = await c.request("session/context", {"sessionID": sid, "wait": False})
    assert quick["boundaryMessageID"] is not None


async def test_replay_without_usage_never_serves_a_window_over_the_limit(start: Spawn) -> None:
    c = await start(initialization_options={"models": {"local/tiny": SMALL_LIMIT}})
    sid = (await c.create_session()).id
    w = Writer(c, sid, SMALL_MODEL, None)
    usable = 20_000
    sizes: list[int] = []
    for i in range(12):
        # ~6k tokens of tool output a turn, and the server never reports usage.
        await w.finished_turn(f"step {i}", tokens=NO_USAGE, output=f"{i} " * 12_000)
        ctx = await c.request("session/context", {"sessionID": sid, "format": "openai"})
        assert ctx["estimatedTokens"] <= usable, (i, ctx["estimatedTokens"])
        assert ctx["overflow"] is False
        sizes.append(ctx["estimatedTokens"])
    assert c.notifications("session/compacted"), "fitting compacted through the automatic path"


async def test_auto_compaction_off_truncates_one_huge_output_else_says_overflow(
    start: Spawn,
) -> None:
    c = await start(
        initialization_options={
            "models": {"local/tiny": SMALL_LIMIT},
            "compaction": {"auto": False, "prune": False},
        }
    )
    sid = (await c.create_session()).id
    w = Writer(c, sid, SMALL_MODEL, None)
    # One output alone larger than the window: cut in the rendering only, stored data intact.
    await w.finished_turn("huge", tokens=NO_USAGE, output="y" * 200_000)
    ctx = await c.request("session/context", {"sessionID": sid, "format": "openai"})
    assert ctx["estimatedTokens"] <= 20_000 and ctx["overflow"] is False
    assert "[Tool output truncated to fit the context window" in json.dumps(ctx["messages"])
    parts = await c.request("session/context", {"sessionID": sid})
    assert len(parts["truncatedPartIDs"]) == 1
    stored = await c.request("session/messages", {"sessionID": sid})
    outputs = [
        p["state"]["output"] for m in stored["messages"] for p in m["parts"] if p["type"] == "tool"
    ]
    assert outputs == ["y" * 200_000]
    raw = await c.request("session/context", {"sessionID": sid, "fit": False})
    assert raw["estimatedTokens"] > 20_000 and raw["truncatedPartIDs"] == []
    # Many ordinary outputs: nothing to cut, no compaction allowed: said, not served silently.
    for i in range(40):
        await w.finished_turn(f"step {i}", tokens=NO_USAGE, output=f"{i} " * 700)
    ctx = await c.request("session/context", {"sessionID": sid})
    assert ctx["overflow"] is True and ctx["usable"] == 20_000
    assert not c.notifications("session/compacted")


async def test_2023_timestamps_compact_three_times_and_keep_every_later_message(
    start: Spawn,
) -> None:
    c = await start()
    sid = (await c.create_session()).id
    w = Writer(c, sid, MODEL, T2023)
    later: list[str] = []
    for i in range(12):
        over = i % 4 == 3
        user, a = await w.finished_turn(
            f"step {i}", tokens=usage(180_000 if over else 5_000), output="z" * 2_000
        )
        later += [user["id"], a["id"]]
        if over:
            later = []  # compacted away: the summary stands for them
        ctx = await c.context(sid)
        ids = [m["info"]["id"] for m in ctx.messages]
        assert all(x in ids for x in later), (i, later, ids)
    assert len(c.notifications("session/compacted")) == 3
    stored = await c.request("session/messages", {"sessionID": sid})
    times = [m["info"]["time"]["created"] for m in stored["messages"]]
    assert times == sorted(times) and max(times) < T2023 + 10**8  # never the daemon's 2026 clock
    assert not [m for m in c.notifications("window/logMessage") if "behind" in str(m)]


async def test_a_message_without_a_time_sorts_after_the_compaction_it_follows(
    start: Spawn,
) -> None:
    """A frontend whose clock ran ahead of the daemon's (so the compaction was stamped after
    its messages, ahead of the daemon's clock), then a message written without
    ``time.created``: the daemon's time for it never sorts before what the compaction added."""
    c = await start()
    sid = (await c.create_session()).id
    w = Writer(c, sid, MODEL, time.time_ns() // 1_000_000 + 600_000)  # ten minutes ahead
    await w.finished_turn("step", tokens=usage(180_000), output="z" * 2_000)
    await c.request("session/idle", {"sessionID": sid})
    assert len(c.notifications("session/compacted")) == 1
    late = await put_message(c, {"role": "user", "sessionID": sid, "model": dict(MODEL)})
    stored = await c.request("session/messages", {"sessionID": sid})
    assert stored["messages"][-1]["info"]["id"] == late["id"]
    ctx = await c.context(sid)
    assert ctx.messages[-1]["info"]["id"] == late["id"]


async def test_a_write_behind_the_boundary_is_reported(start: Spawn) -> None:
    c = await start()
    sid = (await c.create_session()).id
    w = Writer(c, sid, MODEL, T2023)
    _, a = await w.finished_turn("step", tokens=usage(180_000), output="z" * 2_000)
    await c.context(sid)
    # Same millisecond as the compacted turn, after it by id: before the daemon's marker.
    late = {
        "id": "msg_zzz_late",
        "role": "user",
        "sessionID": sid,
        "time": {"created": a["time"]["created"]},
        "model": MODEL,
    }
    await put_message(c, late)
    log = await c.wait_for("window/logMessage", predicate=lambda p: "msg_zzz_late" in p["message"])
    assert "behind the compaction boundary" in log["message"]


def _canonical(messages: list[dict[str, Any]]) -> bytes:
    """The stored session with the daemon's own ids replaced by their order of appearance."""
    text = json.dumps(messages, sort_keys=True)
    names: dict[str, str] = {}
    for found in re.findall(r"(?:msg|prt|ses)_[0-9A-Za-z]+", text):
        if "_z" not in found:
            names.setdefault(found, f"ID{len(names)}")
    return re.sub(
        r"(?:msg|prt|ses)_[0-9A-Za-z]+", lambda m: names.get(m.group(0), m.group(0)), text
    ).encode()


async def _replay(c: Client) -> bytes:
    sid = (await c.create_session()).id
    w = Writer(c, sid, MODEL, T2023)
    for i in range(14):
        tokens = usage(180_000 if i == 9 else 20_000)
        _, a = await w.turn(f"step {i}", tokens=tokens, output=f"{i}" * 48_000)
        # The finishing write and the next turn's first writes race the automatic work.
        await put_message(c, a)
    await c.request("session/idle", {"sessionID": sid})
    page = await c.request("session/messages", {"sessionID": sid})
    return _canonical(page["messages"])


@pytest.mark.parametrize("method", ["standard", "collapse"])
async def test_same_replay_twice_gives_identical_stored_sessions(start: Spawn, method: str) -> None:
    options = {"compaction": {"method": method}}
    first = await _replay(await start(initialization_options=options))
    second = await _replay(await start(initialization_options=options))
    assert b'"compacted"' in first and b'"summary": true' in first
    if method == "collapse":
        assert b'"tailStartID"' in first
    assert first == second
