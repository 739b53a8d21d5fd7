"""Compaction end to end: the real daemon over stdio, driven by the Python client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from client_writer import CLIENT_WRITER
from sidecar_client import Client, RpcError
from wire import put_message, put_part, stored

from .conftest import Spawn

MODEL = {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}  # 200k, usable 168k
OVER = {"input": 180_000, "output": 500, "reasoning": 0, "cache": {"read": 0, "write": 0}}
SMALL = {"input": 5_000, "output": 500, "reasoning": 0, "cache": {"read": 0, "write": 0}}


async def _turn(
    c: Client, sid: str, text: str, *, tokens: dict[str, Any], tool_output: str | None = None
) -> dict[str, Any]:
    user = await put_message(c, {"role": "user", "sessionID": sid, "model": MODEL})
    await put_part(c, {"type": "text", "sessionID": sid, "messageID": user["id"], "text": text})
    a = await put_message(
        c, {"role": "assistant", "sessionID": sid, "parentID": user["id"], **_model()}
    )
    if tool_output is not None:
        await put_part(
            c,
            {
                "type": "tool",
                "sessionID": sid,
                "messageID": a["id"],
                "callID": f"call-{a['id']}",
                "tool": "edit",
                "state": {
                    "status": "completed",
                    "input": {"filePath": "src/app.py"},
                    "output": tool_output,
                    "time": {"start": 1, "end": 2},
                },
            },
        )
    await put_part(
        c, {"type": "text", "sessionID": sid, "messageID": a["id"], "text": "Done. " * 300}
    )
    a.update(finish="stop", tokens=tokens)
    return await put_message(c, a)


def _model() -> dict[str, str]:
    return {"providerID": MODEL["providerID"], "modelID": MODEL["modelID"]}


async def test_overflow_compacts_automatically(start: Spawn) -> None:
    c = await start()
    sid = (await c.create_session()).id
    await _turn(c, sid, "Refactor src/app.py", tokens=SMALL, tool_output="x" * 2000)
    last = await _turn(c, sid, "Now add tests", tokens=OVER)
    event = await c.wait_for("session/compacted", timeout=30)
    assert event["sessionID"] == sid and event["auto"] is True
    ctx = await c.context(sid, "openai")
    assert ctx.messages[0] == {"role": "user", "content": "What did we do so far?"}
    assert ctx.messages[1]["role"] == "assistant" and "src/app.py" in ctx.messages[1]["content"]
    assert ctx.messages[-1] == {"role": "user", "content": "Continue if you have next steps"}
    assert all(last["id"] not in str(m) for m in ctx.messages)
    statuses = [s["status"] for s in c.notifications("session/status")]
    assert statuses[-2:] == ["compacting", "idle"]
    progress = [p["value"]["kind"] for p in c.notifications("$/progress")]
    assert progress[0] == "begin" and progress[-1] == "end"
    overflow = await c.request("session/overflow", {"sessionID": sid})
    assert overflow["overflow"] is False  # the last finished non-summary turn is gone


async def test_manual_compact_with_work_done_token(start: Spawn) -> None:
    c = await start()
    sid = (await c.create_session()).id
    await _turn(c, sid, "Write the parser", tokens=SMALL, tool_output="y" * 3000)
    result = await c.request(
        "session/compact", {"sessionID": sid, "workDoneToken": "tok-1", "instructions": "Be brief"}
    )
    assert result["status"] == "continue" and result["summaryMessageID"]
    event = await c.wait_for("session/compacted")
    # OpenCode's fields and the writer; the diagnostics beside them are issue 24's
    # (tests/e2e/test_steering.py).
    fields = {k: event[k] for k in ("sessionID", "messageID", "auto", "writer")}
    assert fields == {
        "sessionID": sid,
        "messageID": result["summaryMessageID"],
        "auto": False,
        "writer": "extractive",
    }
    tokens = {p["token"] for p in c.notifications("$/progress")}
    assert tokens == {"tok-1"}
    ctx = await c.context(sid, "anthropic")
    assert ctx.messages[0]["content"][0]["text"] == "What did we do so far?"
    assert len(ctx.messages) == 2  # marker + summary; a manual compaction adds no "continue"


async def test_compact_unknown_session_names_it(start: Spawn) -> None:
    c = await start()
    with pytest.raises(RpcError) as err:
        await c.request("session/compact", {"sessionID": "ses_missing"})
    assert err.value.code == -32040 and "ses_missing" in err.value.message


async def test_compacting_hook_adds_context(start: Spawn) -> None:
    c = await start(capabilities={"compactingHook": True})
    seen: list[Any] = []

    async def hook(params: Any) -> dict[str, Any]:
        seen.append(params)
        return {"context": ["Team rule: keep the public API stable"]}

    c.on_request("compaction/compacting", hook)
    sid = (await c.create_session()).id
    await _turn(c, sid, "Rename the module", tokens=SMALL, tool_output="z" * 3000)
    result = await c.request("session/compact", {"sessionID": sid})
    assert seen == [{"sessionID": sid}]
    page = await stored(c, sid)
    summary = next(m for m in page.messages if m.info["id"] == result["summaryMessageID"])
    assert [p["type"] for p in summary.parts] == ["step-start", "text", "step-finish"]
    assert "keep the public API stable" in summary.parts[1]["text"]


async def test_disable_autocompact_env(start: Spawn) -> None:
    c = await start(env={"OPENCODE_DISABLE_AUTOCOMPACT": "1"})
    cfg = await c.request("config/get", {})
    assert cfg["compaction"]["auto"] is False
    sid = (await c.create_session()).id
    await _turn(c, sid, "go", tokens=OVER)
    await c.request("session/idle", {"sessionID": sid})
    assert c.notifications("session/compacted") == []
    # A manual compaction still works.
    assert (await c.request("session/compact", {"sessionID": sid}))["status"] == "continue"


async def _big_history(c: Client, sid: str) -> None:
    for i in range(4):
        await _turn(c, sid, f"step {i}", tokens=SMALL, tool_output="o" * 100_000)
        # Each turn's prune sees the session as it is when it runs; wait for it, so that the
        # next turn's messages are not already there (as they would be in a fast frontend).
        await c.request("session/idle", {"sessionID": sid})


async def test_turn_end_prunes_and_disable_prune_env(start: Spawn) -> None:
    c = await start()
    sid = (await c.create_session()).id
    await _big_history(c, sid)
    await _turn(c, sid, "last", tokens=SMALL)
    await c.request("session/idle", {"sessionID": sid})
    # Each finished turn prunes what fell behind the two newest turns and 40k protected
    # tokens: after turn 4 the oldest 25k output; after "last" the next one.
    pruned = c.notifications("session/pruned")
    assert [p["tokensSaved"] for p in pruned] == [25_000, 25_000]
    ids = [i for p in pruned for i in p["partIDs"]]
    assert len(ids) == 2 and all(isinstance(p["compacted"], int) for p in pruned)
    # session/pruned stands for the pruned parts' part/updated: none carries a cleared output.
    marked = [
        p["part"]["id"]
        for p in c.notifications("part/updated")
        if p["part"].get("state", {}).get("time", {}).get("compacted")
    ]
    assert marked == []
    marks = [p for m in (await stored(c, sid)).messages for p in m.parts if p["id"] in ids]
    assert [p["state"]["time"]["compacted"] for p in marks] == [e["compacted"] for e in pruned]
    ctx = await c.context(sid, "openai")
    cleared = [m for m in ctx.messages if m.get("content") == "[Old tool result content cleared]"]
    assert len(cleared) == 2

    d = await start(env={"OPENCODE_DISABLE_PRUNE": "true"})
    sid2 = (await d.create_session()).id
    await _big_history(d, sid2)
    await _turn(d, sid2, "last", tokens=SMALL)
    await d.request("session/idle", {"sessionID": sid2})
    assert d.notifications("session/pruned") == []
    assert (await d.request("session/prune", {"sessionID": sid2})) == {
        "partIDs": [],
        "tokensSaved": 0,
    }


async def test_client_summarizer_and_cancel(start: Spawn) -> None:
    c = await start(**CLIENT_WRITER)
    gate = asyncio.Event()
    started = asyncio.Event()
    calls: list[Any] = []

    async def complete(params: Any) -> dict[str, Any]:
        calls.append(params)
        started.set()
        if len(calls) == 1:
            await gate.wait()  # the first call hangs until cancelled
        return {"text": "Summary by the editor's own model: src/app.py was refactored."}

    c.on_request("summarizer/complete", complete)
    sid = (await c.create_session()).id
    await _turn(c, sid, "Refactor", tokens=SMALL, tool_output="q" * 4000)
    before = len((await stored(c, sid)).messages)
    call = c.call("session/compact", {"sessionID": sid})
    await asyncio.wait_for(started.wait(), 10)
    call.cancel()
    await c.wait_for("session/status", lambda s: s["status"] == "idle", timeout=10)
    assert len((await stored(c, sid)).messages) == before  # nothing half-written remains
    assert await c.request("session/context", {"sessionID": sid}) is not None
    result = await c.request("session/compact", {"sessionID": sid})
    assert result["status"] == "continue"
    first = calls[0]
    assert first["maxTokens"] > 0 and first["system"].startswith("You are a helpful")
    assert first["messages"][-1]["role"] == "user"
    assert "Provide a detailed prompt" in first["messages"][-1]["content"]
    page = await stored(c, sid)
    summary = next(m for m in page.messages if m.info["id"] == result["summaryMessageID"])
    assert summary.parts[1]["text"].startswith("Summary by the editor's own model")


async def test_header_secrets_are_not_echoed_by_config(start: Spawn) -> None:
    c = await start()
    secret = "Bearer sk-very-secret-value"
    cfg = await c.request(
        "config/update", {"config": {"summarizer": {"headers": {"Authorization": secret}}}}
    )
    assert cfg["summarizer"]["headers"] == {"Authorization": "<redacted>"}
    assert secret not in str(await c.request("config/get", {}))
    assert secret not in c.stderr()


async def test_unknown_model_is_reported_once_by_log_message(start: Spawn) -> None:
    c = await start()
    sid = (await c.create_session()).id
    for _ in range(2):
        user = await put_message(c, {"role": "user", "sessionID": sid})
        a = await put_message(
            c,
            {
                "role": "assistant",
                "sessionID": sid,
                "parentID": user["id"],
                "providerID": "acme",
                "modelID": "mystery-9",
            },
        )
        a.update(finish="stop", tokens={**OVER, "input": 5_000_000})
        await put_message(c, a)
        await c.request("session/idle", {"sessionID": sid})
    logs = c.notifications("window/logMessage")
    assert len(logs) == 1 and "acme/mystery-9" in logs[0]["message"]
    assert c.notifications("session/compacted") == []
    overflow = await c.request("session/overflow", {"sessionID": sid})
    assert overflow["known"] is False and overflow["overflow"] is False
