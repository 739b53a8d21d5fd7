"""The daemon against a recorded run of the real OpenCode 1.1.53 (the oracle).

``tests/fixtures/opencode/oracle_1153.json`` is OpenCode's stored session and every request it
sent the model (see the README beside it). The frontend's own messages are replayed into a real
daemon, which must make the same decisions OpenCode made: compact at the same turns, prune the
same parts at the same turns, serve before each step the window OpenCode sent, and send the
same summary request. The model's summary answers are OpenCode's (a real HTTP server on
127.0.0.1 plays the provider), so the windows after a compaction can be compared too.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from daemon_env import isolated_env
from sidecar_client import Client, spawn
from wire import put_message, put_part

from sidecar.engine import ledger
from tests.summarizers.httpserver import Reply, ScriptedServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "opencode"
# oracle: forced overflow at turn 9, a manual compaction after turn 10, prunes at 7 and 9.
# natural: a 60k window, so the usage OpenCode saw overflows on its own at turn 5.
RUNS = ["oracle_1153", "natural_1153"]
CLEARED = "[Old tool result content cleared]"
CONTINUE = "Continue if you have next steps"
TRIMMED = re.compile(r"^<<(\d+) chars>>$")


def _chars(text: str) -> str:
    return text if text == CLEARED else f"<<{len(text)} chars>>"


def _norm(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A chat request's messages, comparable: system dropped, tool results by length, and
    the artifact ledger the daemon appends to every summary (issue 13, on top of OpenCode)
    left out."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if m["role"] == "system":
            continue
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(c.get("text", "") for c in content)
        if m["role"] == "tool":
            trimmed = content if TRIMMED.match(content) else _chars(content)
            out.append(("tool", m["tool_call_id"], trimmed))
            continue
        if m["role"] == "assistant":
            content = ledger.drop_block(content)
        calls = [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in m.get("tool_calls") or []
        ]
        out.append((m["role"], content, calls))
    return out


def _daemon_made(m: dict[str, Any]) -> bool:
    info, parts = m["info"], m["parts"]
    if info["role"] == "assistant":
        return bool(info.get("summary"))
    return any(p["type"] == "compaction" for p in parts) or any(
        p["type"] == "text" and p.get("synthetic") and p["text"] == CONTINUE for p in parts
    )


def _untrim(part: dict[str, Any]) -> dict[str, Any]:
    """The part as the frontend wrote it: the output back at its length, not yet pruned."""
    part = json.loads(json.dumps(part))
    if part["type"] == "tool":
        state = part["state"]
        found = TRIMMED.match(state.get("output", ""))
        if found:
            state["output"] = "x" * int(found.group(1))
        state.get("time", {}).pop("compacted", None)
    return part


def _stream(text: str) -> Reply:
    return Reply(
        events=[
            {"choices": [{"index": 0, "delta": {"content": text}}]},
            {"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 20}},
            "data: [DONE]\n\n",
        ]
    )


@pytest.fixture
async def provider() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


def _compactions(stored: list[dict[str, Any]]) -> list[tuple[int, bool]]:
    """(user turn, auto) of each compaction OpenCode made, from its stored session."""
    out: list[tuple[int, bool]] = []
    turn = 0
    for m in stored:
        marker = next((p for p in m["parts"] if p["type"] == "compaction"), None)
        if marker is not None:
            out.append((turn, marker["auto"]))
        elif m["info"]["role"] == "user" and not _daemon_made(m):
            turn += 1
    return out


@pytest.mark.parametrize("run", RUNS)
async def test_replayed_opencode_run_makes_the_same_decisions(
    tmp_path: Path, provider: ScriptedServer, run: str
) -> None:
    oracle = json.loads((FIXTURES / f"{run}.json").read_text())
    assert oracle["opencode"] == "1.1.53"
    stored: list[dict[str, Any]] = oracle["messages"]
    summaries = [m for m in stored if m["info"].get("summary") is True]
    texts = [next(p["text"] for p in m["parts"] if p["type"] == "text") for m in summaries]
    provider.script(*(_stream(t) for t in texts))
    config = {
        "models": {"fake/fake-model": oracle["limits"]},
        "summarizer": {"provider": "openai", "model": "fake-model", "baseURL": provider.url},
        # OpenCode's summary max_tokens: min(limit.output, 32000).
        "compaction": {"summaryMaxTokens": 32_000, "summaryShare": 0},
    }
    cfg_path = tmp_path / "config.json"
    cfg_path.write_text(json.dumps(config))
    c: Client = await spawn(
        tmp_path / "db.sqlite",
        extra_args=["--config", str(cfg_path)],
        env=isolated_env(tmp_path),
    )
    try:
        sid = (await c.create_session()).id
        mains = [r for r in oracle["requests"] if r["kind"] == "main"]
        summary_requests = [r for r in oracle["requests"] if r["kind"] == "summary"]
        turns = {t["turn"]: t["pruned"] for t in oracle["turns"]}
        user_turn = 0
        pruned_seen: set[str] = set()
        compacted_at: list[tuple[int, bool]] = []
        step = 0

        async def end_turn(turn: int) -> None:
            await c.request("session/idle", {"sessionID": sid})
            now = {p for e in c.notifications("session/pruned") for p in e["partIDs"]}
            assert sorted(now - pruned_seen) == sorted(turns[turn]), f"pruned in turn {turn}"
            pruned_seen.update(now)
            for e in c.notifications("session/compacted")[len(compacted_at) :]:
                compacted_at.append((turn, e["auto"]))

        for m in stored:
            if _daemon_made(m):
                continue
            info = {**m["info"], "sessionID": sid}
            if info["role"] == "user":
                if user_turn:
                    await end_turn(user_turn)
                user_turn += 1
                await put_message(c, info)
                for p in m["parts"]:
                    await put_part(c, {**_untrim(p), "sessionID": sid})
                continue
            # Before each step the daemon must serve the window OpenCode sent for it. OpenCode
            # 1.1.53 counts no overhead before a step (its requests went over the window, step 9
            # of the natural run by 9,000 tokens): the replay says so, or the daemon's fit would
            # count the overhead it learns from the reported usage and compact before it.
            params = {"sessionID": sid, "format": "openai", "overheadTokens": 0}
            ctx = await c.request("session/context", params)
            assert _norm(ctx["messages"]) == _norm(mains[step]["messages"]), (
                f"window before step {step} (request {mains[step]['n']})"
            )
            assert ctx["overflow"] is False
            step += 1
            opening = {k: v for k, v in info.items() if k not in ("finish", "tokens")}
            await put_message(c, opening)
            for p in m["parts"]:
                await put_part(c, {**_untrim(p), "sessionID": sid})
            await put_message(c, info)
        await end_turn(user_turn)
        if oracle["drive"]["summarize_at"] == [user_turn]:
            # drive.py --summarize-at N: a manual compaction after the last turn.
            result = await c.request(
                "session/compact",
                {"sessionID": sid, "model": {"providerID": "fake", "modelID": "fake-model"}},
            )
            assert result["status"] == "continue"
            await end_turn(user_turn)
        assert step == len(mains)
        assert compacted_at == _compactions(stored)
        assert compacted_at  # each run compacts

        # The summary requests: the same messages and max_tokens OpenCode sent. The writer is
        # asked for OpenCode's budget less what the ledger appended after it takes.
        page = await c.request("session/messages", {"sessionID": sid})
        ours_made = [m for m in page["messages"] if _daemon_made(m)]
        stored_summaries = [
            next(p["text"] for p in m["parts"] if p["type"] == "text")
            for m in ours_made
            if m["info"]["role"] == "assistant"
        ]
        sent = [r.json() for r in provider.requests]
        assert len(sent) == len(summary_requests) == len(compacted_at) == len(stored_summaries)
        for ours, theirs, text in zip(sent, summary_requests, stored_summaries, strict=True):
            assert _norm(ours["messages"]) == _norm(theirs["messages"]), f"summary {theirs['n']}"
            assert "```ledger" not in json.dumps(ours["messages"])  # the model sees no block
            expected = min(oracle["limits"]["output"], 32_000)  # OpenCode's figure
            assert theirs["max_tokens"] == expected
            stored_ledger = ledger.parse(text)
            assert stored_ledger is not None
            block = ledger.render(stored_ledger)
            assert ours["max_tokens"] == expected - ledger.tokens(block) - 1

        # Stored shapes OpenCode's readers accept.
        markers = [p for m in ours_made for p in m["parts"] if p["type"] == "compaction"]
        assert [p["auto"] for p in markers] == [auto for _, auto in compacted_at]  # false too
        for m in ours_made:
            if m["info"]["role"] == "assistant":
                info = m["info"]
                assert {"path", "cost", "tokens", "providerID", "modelID"} <= info.keys()
                assert info["mode"] == info["agent"] == "compaction" and info["finish"] == "stop"
                assert [p["type"] for p in m["parts"]] == ["step-start", "text", "step-finish"]
    finally:
        await c.close()
