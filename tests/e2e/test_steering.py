"""Issue 24, steering compaction: each item against a real daemon over stdio (both backends).

Overrides per model, ``triggerTokens``, pins, the ``## Kept verbatim`` block, a custom prompt
(recorded by a real HTTP server on 127.0.0.1), ``upTo``, diagnostics and undo.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from client_writer import CLIENT_WRITER, HeldWriter
from sidecar_client import Client, ConnectionClosed, RpcError
from wire import put_message, put_part, stored

from tests.summarizers.httpserver import Reply, ScriptedServer

from .conftest import SocketDaemon, Spawner

SONNET = {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}  # 200k, usable 168k
# A turn's history large enough (~20k tokens) that compacting it can help whatever the turn
# reported: the daemon refuses a compaction that cannot shrink an overflow enough.
BIG = " " + "w" * 80_000


def tokens(n: int) -> dict[str, Any]:
    return {"input": n, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}


async def turn(
    c: Client,
    sid: str,
    text: str,
    *,
    model: dict[str, str] = SONNET,
    used: int = 5_000,
    tool: str | None = None,
    output: str | None = None,
    agent: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """One user message and its finished answer (optionally with a completed tool call);
    returns (user, assistant, tool part)."""
    u: dict[str, Any] = {"role": "user", "sessionID": sid, "model": model}
    if agent is not None:
        u["agent"] = agent
    user = await put_message(c, u)
    await put_part(c, {"type": "text", "sessionID": sid, "messageID": user["id"], "text": text})
    a: dict[str, Any] = {"role": "assistant", "sessionID": sid, "parentID": user["id"], **model}
    if agent is not None:
        a["agent"] = agent
    reply = await put_message(c, a)
    part = None
    if tool is not None:
        part = await put_part(
            c,
            {
                "type": "tool",
                "sessionID": sid,
                "messageID": reply["id"],
                "callID": f"call-{reply['id']}",
                "tool": tool,
                "state": {
                    "status": "completed",
                    "input": {},
                    "output": output or "",
                    "title": tool,
                    "metadata": {},
                    "time": {"start": 1, "end": 2},
                },
            },
        )
    await put_part(
        c,
        {
            "type": "text",
            "sessionID": sid,
            "messageID": reply["id"],
            "text": f"did: {text[:40]} " + "d" * 4_000,  # room for a summary to save
        },
    )
    reply.update(finish="stop", tokens=tokens(used))
    return user, await put_message(c, reply), part


async def settle(c: Client, sid: str) -> None:
    await c.request("session/idle", {"sessionID": sid})


def compacted_for(c: Client, sid: str) -> list[dict[str, Any]]:
    return [e for e in c.notifications("session/compacted") if e["sessionID"] == sid]


async def context_ids(c: Client, sid: str) -> list[str]:
    ctx = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    return [m["info"]["id"] for m in ctx["messages"]]


async def summary_text(c: Client, sid: str, summary_id: str) -> str:
    page = await stored(c, sid)
    msg = next(m for m in page.messages if m.info["id"] == summary_id)
    return "\n".join(p["text"] for p in msg.parts if p["type"] == "text")


# -- 1. overrides --------------------------------------------------------------------------------


async def test_an_override_compacts_one_model_at_half_and_not_another(spawner: Spawner) -> None:
    c = await spawner(
        initialization_options={
            "models": {"other/m": {"context": 200_000, "output": 32_000}},
            "compaction": {
                "overrides": [{"match": {"model": "anthropic/*"}, "compaction": {"trigger": 0.5}}]
            },
        }
    )
    a = (await c.create_session()).id
    b = (await c.create_session()).id
    await turn(c, a, "big turn" + BIG, used=100_000)  # 100k of 168k usable: over half
    await turn(c, b, "big turn" + BIG, model={"providerID": "other", "modelID": "m"}, used=100_000)
    await settle(c, a)
    await settle(c, b)
    assert len(compacted_for(c, a)) == 1 and compacted_for(c, a)[0]["auto"] is True
    assert compacted_for(c, b) == []


async def test_an_override_matches_the_agent_of_the_turn(spawner: Spawner) -> None:
    c = await spawner(
        initialization_options={
            "compaction": {
                "overrides": [{"match": {"agent": "plan"}, "compaction": {"auto": False}}]
            }
        }
    )
    planned = (await c.create_session()).id
    built = (await c.create_session()).id
    await turn(c, planned, "over" + BIG, used=180_000, agent="plan")
    await turn(c, built, "over" + BIG, used=180_000, agent="build")
    await settle(c, planned)
    await settle(c, built)
    assert compacted_for(c, planned) == []
    assert len(compacted_for(c, built)) == 1


async def test_a_bad_override_is_refused_naming_it(spawner: Spawner) -> None:
    c = await spawner()
    with pytest.raises(RpcError) as err:
        await c.request(
            "config/update",
            {"config": {"compaction": {"overrides": [{"compaction": {"trigger": 7}}]}}},
        )
    assert err.value.code == -32602 and "overrides[0]" in err.value.message
    with pytest.raises(RpcError) as err:
        await c.request(
            "config/update",
            {"config": {"compaction": {"overrides": [{"summarizer": {"apiKeyEnv": "HOME"}}]}}},
        )
    assert err.value.code == -32602 and "overrides[0].summarizer.apiKeyEnv" in err.value.message
    with pytest.raises(RpcError) as err:
        await c.request("config/update", {"config": {"compaction": {"promptFile": "/etc/passwd"}}})
    assert err.value.code == -32602 and "compaction.promptFile" in err.value.message


async def test_config_get_hides_an_overrides_header_values(spawner: Spawner) -> None:
    c = await spawner(
        initialization_options={
            "compaction": {"overrides": [{"summarizer": {"headers": {"X-Key": "s3cret"}}}]}
        }
    )
    shown = await c.request("config/get", {})
    assert shown["compaction"]["overrides"][0]["summarizer"]["headers"] == {"X-Key": "<redacted>"}


# -- 2. triggerTokens ----------------------------------------------------------------------------


async def test_trigger_tokens_compacts_a_1m_model_at_150k(spawner: Spawner) -> None:
    big = {"providerID": "big", "modelID": "m1"}
    c = await spawner(
        initialization_options={
            "models": {"big/m1": {"context": 1_000_000, "output": 32_000}},
            "compaction": {"triggerTokens": 150_000},
        }
    )
    below = (await c.create_session()).id
    above = (await c.create_session()).id
    await turn(c, below, "t", model=big, used=149_999)
    await turn(c, above, "t" + BIG, model=big, used=150_000)
    await settle(c, below)
    await settle(c, above)
    assert compacted_for(c, below) == []
    assert len(compacted_for(c, above)) == 1
    over = await c.request(
        "session/overflow",
        {"tokens": tokens(150_000), "model": {"limit": {"context": 1_000_000, "output": 32_000}}},
    )
    assert over["overflow"] is True and over["usable"] > 900_000


# -- 3 and 4. pins and the kept block ------------------------------------------------------------


async def test_a_pinned_part_is_never_pruned_and_kept_verbatim_across_two_compactions(
    spawner: Spawner,
) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    pinned_output = "PINNED-OUTPUT " + "p" * 8_000  # ~2k tokens, within keep.maxTokens
    _, first, pinned = await turn(c, sid, "read the spec", tool="read", output=pinned_output)
    assert pinned is not None
    await c.request(
        "part/pin",
        {"sessionID": sid, "messageID": first["id"], "partID": pinned["id"], "pinned": True},
    )
    others = []
    for i in range(6):  # 6 x 60k chars = ~90k tokens of outputs: prune clears the oldest
        _, _, p = await turn(c, sid, f"step {i}", tool="bash", output=f"out{i} " + "x" * 60_000)
        others.append(p)
    await turn(c, sid, "check")
    await settle(c, sid)
    pruned = [e for e in c.notifications("session/pruned") if e["sessionID"] == sid]
    assert pruned and others[0]["id"] in pruned[0]["partIDs"]
    assert pinned["id"] not in {pid for e in pruned for pid in e["partIDs"]}
    assert await c.request("session/pins", {"sessionID": sid}) == {
        "pins": [{"messageID": first["id"], "partID": pinned["id"]}]
    }
    texts = []
    for n in range(2):
        result = await c.request("session/compact", {"sessionID": sid})
        assert result["status"] == "continue"
        texts.append(await summary_text(c, sid, result["summaryMessageID"]))
        await turn(c, sid, f"after compaction {n}")
    for text in texts:
        assert "## Kept verbatim" in text
        kept = text[text.index("## Kept verbatim") :]
        assert pinned_output in kept  # copied exactly, both times (rebuilt, not re-summarized)
        assert kept.count("PINNED-OUTPUT") == 1
        if "## Artifact ledger" in text:
            assert text.index("## Kept verbatim") < text.index("## Artifact ledger")
    page = await stored(c, sid)
    part = next(p for m in page.messages for p in m.parts if p["id"] == pinned["id"])
    assert "compacted" not in part["state"]["time"]


async def test_pins_survive_a_restart_are_copied_by_a_fork_and_go_with_their_part(
    spawner: Spawner,
) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    user, reply, _ = await turn(c, sid, "pin me", tool="read", output="data")
    await c.request("part/pin", {"sessionID": sid, "messageID": reply["id"], "pinned": True})
    pins = (await c.request("session/pins", {"sessionID": sid}))["pins"]
    assert len(pins) == 2 and {p["messageID"] for p in pins} == {reply["id"]}
    await c.close()
    again = await spawner()
    assert (await again.request("session/pins", {"sessionID": sid}))["pins"] == pins
    fork = await again.request("session/fork", {"sessionID": sid})
    forked = (await again.request("session/pins", {"sessionID": fork["id"]}))["pins"]
    assert len(forked) == 2 and not {p["partID"] for p in forked} & {p["partID"] for p in pins}
    await again.request(
        "part/remove", {"sessionID": sid, "messageID": reply["id"], "partID": pins[0]["partID"]}
    )
    assert (await again.request("session/pins", {"sessionID": sid}))["pins"] == pins[1:]
    await again.request(
        "part/pin",
        {"sessionID": sid, "messageID": reply["id"], "partID": pins[1]["partID"], "pinned": False},
    )
    assert (await again.request("session/pins", {"sessionID": sid}))["pins"] == []
    with pytest.raises(RpcError) as err:
        await again.request(
            "part/pin", {"sessionID": sid, "messageID": user["id"], "partID": "prt_nope"}
        )
    assert err.value.code == -32602 and "partID" in err.value.message


async def test_the_latest_todo_output_and_the_first_request_are_kept(spawner: Spawner) -> None:
    c = await spawner(
        initialization_options={
            "compaction": {"keep": {"firstRequest": True, "todoTools": ["todowrite"]}}
        }
    )
    sid = (await c.create_session()).id
    await turn(c, sid, "FIRST REQUEST: build the parser")
    await turn(c, sid, "plan", tool="todowrite", output="[ ] old todo list")
    await turn(c, sid, "more", tool="todowrite", output="[x] parse\n[ ] NEWEST todo list")
    await turn(c, sid, "go on")
    result = await c.request("session/compact", {"sessionID": sid})
    text = await summary_text(c, sid, result["summaryMessageID"])
    kept = text[text.index("## Kept verbatim") :]
    assert "### First request\nFIRST REQUEST: build the parser" in kept
    assert "### Todo list (todowrite)\n[x] parse\n[ ] NEWEST todo list" in kept
    assert "old todo list" not in kept
    assert kept.index("First request") < kept.index("Todo list")


async def test_the_kept_block_is_bounded_shortening_the_oldest_pin_first(spawner: Spawner) -> None:
    c = await spawner(initialization_options={"compaction": {"keep": {"maxTokens": 600}}})
    sid = (await c.create_session()).id
    await turn(c, sid, "OLDPIN " + "o" * 4_000)
    await turn(c, sid, "newer")
    old_user = (await stored(c, sid)).messages[0]
    await c.request("part/pin", {"sessionID": sid, "messageID": old_user.info["id"]})
    new_user = (await stored(c, sid)).messages[2]
    await c.request("part/pin", {"sessionID": sid, "messageID": new_user.info["id"]})
    result = await c.request("session/compact", {"sessionID": sid})
    text = await summary_text(c, sid, result["summaryMessageID"])
    kept = text[text.index("## Kept verbatim") :]
    kept = kept.split("## Artifact ledger")[0]
    assert "newer" in kept  # the newest pin whole
    assert "shortened to fit compaction.keep.maxTokens" in kept
    assert len(kept) // 4 <= 600 + 10


async def test_default_config_adds_no_kept_block(spawner: Spawner) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    await turn(c, sid, "plain", tool="todowrite", output="[ ] todo")
    result = await c.request("session/compact", {"sessionID": sid})
    assert "## Kept verbatim" not in await summary_text(c, sid, result["summaryMessageID"])


# -- 5. a custom prompt, over real HTTP ----------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def provider() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as server:
        yield server


def _openai_reply(text: str) -> Reply:
    return Reply(
        body={
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        }
    )


async def test_a_custom_prompt_and_system_reach_a_cheaper_summary_model(
    spawner: Spawner, provider: ScriptedServer, tmp_path: Path
) -> None:
    (tmp_path / "prompt.txt").write_text("MY OWN PROMPT: list the open tasks first.")
    config = {
        "compaction": {
            "promptFile": "prompt.txt",
            "overrides": [
                {
                    "match": {"model": "anthropic/*"},
                    "compaction": {"system": "MY SYSTEM TEXT"},
                    "summarizer": {
                        "provider": "openai",
                        "model": "cheap-model",
                        "baseURL": f"{provider.url}/v1",
                        "apiKeyEnv": "CHEAP_KEY",
                        "maxRetries": 0,
                    },
                }
            ],
        }
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    c = await spawner(
        extra_args=["--config", str(tmp_path / "config.json")], env={"CHEAP_KEY": "sk-cheap"}
    )
    sid = (await c.create_session()).id
    await turn(c, sid, "write the lexer")
    provider.script(_openai_reply("the summary"))
    result = await c.request("session/compact", {"sessionID": sid})
    assert result["status"] == "continue"
    assert len(provider.requests) == 1
    sent = provider.requests[0].json()
    assert sent["model"] == "cheap-model"
    assert sent["messages"][-1] == {
        "role": "user",
        "content": "MY OWN PROMPT: list the open tasks first.",
    }
    assert sent["messages"][0]["role"] == "system"
    assert sent["messages"][0]["content"].startswith("MY SYSTEM TEXT")
    assert "## Goal" not in sent["messages"][0]["content"]
    records = (await c.request("session/compactions", {"sessionID": sid}))["compactions"]
    assert records[0]["writer"] == "openai/cheap-model"


async def test_a_hooks_prompt_still_wins(spawner: Spawner) -> None:
    c = await spawner(
        capabilities={"compactingHook": True, "summarizer": True},
        initialization_options={
            "summarizer": {"provider": "client"},
            "compaction": {"prompt": "CONFIG PROMPT"},
        },
    )
    seen: list[Any] = []

    async def hook(params: Any) -> dict[str, Any]:
        return {"prompt": "HOOK PROMPT"}

    async def write(params: Any) -> dict[str, Any]:
        seen.append(params)
        return {"text": "summary"}

    c.on_request("compaction/compacting", hook)
    c.on_request("summarizer/complete", write)
    sid = (await c.create_session()).id
    await turn(c, sid, "x")
    await c.request("session/compact", {"sessionID": sid})
    assert "HOOK PROMPT" in json.dumps(seen[0]["messages"][-1])
    assert "CONFIG PROMPT" not in json.dumps(seen[0])


async def test_an_unreadable_prompt_file_is_named_at_start(
    spawner: Spawner, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"compaction": {"systemFile": "nope.md"}}))
    with pytest.raises(ConnectionClosed) as err:
        await spawner(extra_args=["--config", str(tmp_path / "config.json")])
    assert "compaction.systemFile: cannot read" in str(err.value)
    assert "nope.md" in str(err.value) and "Traceback" not in str(err.value)


# -- 6. upTo -------------------------------------------------------------------------------------


async def test_up_to_keeps_the_later_messages_byte_for_byte(spawner: Spawner) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    await turn(c, sid, "one")
    _, cut, _ = await turn(c, sid, "two")
    await turn(c, sid, "three", tool="read", output="file body")
    await turn(c, sid, "four")
    before = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    at = next(i for i, m in enumerate(before["messages"]) if m["info"]["id"] == cut["id"])
    later = before["messages"][at + 1 :]
    result = await c.request("session/compact", {"sessionID": sid, "upTo": cut["id"]})
    after = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    assert after["messages"][1]["info"]["id"] == result["summaryMessageID"]
    assert json.dumps(after["messages"][2:]) == json.dumps(later)
    text = await summary_text(c, sid, result["summaryMessageID"])
    assert "three" not in text and "four" not in text


async def test_up_to_that_keeps_too_much_is_refused_saying_by_how_much(spawner: Spawner) -> None:
    tiny = {"providerID": "tiny", "modelID": "m"}
    c = await spawner(
        initialization_options={"models": {"tiny/m": {"context": 9_000, "output": 1_000}}}
    )
    sid = (await c.create_session()).id
    _, cut, _ = await turn(c, sid, "one", model=tiny)
    await turn(c, sid, "two " + "z" * 40_000, model=tiny)
    before = await stored(c, sid)
    with pytest.raises(RpcError) as err:
        await c.request("session/compact", {"sessionID": sid, "upTo": cut["id"]})
    assert err.value.code == -32602
    assert "does not fit" in err.value.message and "over by" in err.value.message
    assert (await stored(c, sid)) == before  # nothing stored


# -- 7. diagnostics ------------------------------------------------------------------------------


async def test_diagnostics_equal_what_the_window_measured(spawner: Spawner) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    await c.request("session/subscribe", {"sessionID": sid})
    for i in range(3):
        await turn(c, sid, f"turn {i} " + "w" * 4_000)
    before = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    result = await c.request("session/compact", {"sessionID": sid})
    after = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    records = (await c.request("session/compactions", {"sessionID": sid}))["compactions"]
    assert len(records) == 1
    r = records[0]
    assert r["messageID"] == result["summaryMessageID"]
    assert r["tokensBefore"] == before["estimatedTokens"]
    assert r["tokensAfter"] == after["estimatedTokens"]
    assert r["messagesSummarized"] == len(before["messages"])
    assert r["replacedIDs"] == [m["info"]["id"] for m in before["messages"]]
    assert r["writer"] == "extractive" and r["auto"] is False and r["partsPruned"] == 0
    assert 0 < r["summaryTokens"] < r["tokensAfter"] and r["durationMs"] >= 0
    event = await c.wait_for("session/compacted")
    fields = (
        "tokensBefore",
        "tokensAfter",
        "summaryTokens",
        "messagesSummarized",
        "partsPruned",
        "writer",
        "durationMs",
        "auto",
    )
    assert {k: event[k] for k in fields} == {k: r[k] for k in fields}


async def test_an_automatic_compaction_reports_the_window_and_the_turns_tokens(
    spawner: Spawner,
) -> None:
    """One before/after pair for every compaction: the window as ``session/context`` measures
    it; the turn's reported tokens that triggered it ride beside, as ``reportedTokens``."""
    c = await spawner()
    sid = (await c.create_session()).id
    await turn(c, sid, "small" + BIG, used=5_000)
    before = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    await c.request("session/subscribe", {"sessionID": sid})
    await turn(c, sid, "huge" + BIG, used=180_000)
    await settle(c, sid)
    r = (await c.request("session/compactions", {"sessionID": sid}))["compactions"][0]
    replaced = set(r["replacedIDs"])
    assert {m["info"]["id"] for m in before["messages"]} < replaced
    assert r["auto"] is True and r["reportedTokens"] == 180_000 and r["continueID"]
    assert before["estimatedTokens"] < r["tokensBefore"] < 180_000
    ctx = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    assert r["tokensAfter"] == ctx["estimatedTokens"]
    event = await c.wait_for("session/compacted")
    assert (event["tokensBefore"], event["tokensAfter"], event["reportedTokens"]) == (
        r["tokensBefore"],
        r["tokensAfter"],
        180_000,
    )


# -- 8. undo -------------------------------------------------------------------------------------


async def test_uncompact_gives_back_the_previous_window_message_for_message(
    spawner: Spawner,
) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    await c.request("session/subscribe", {"sessionID": sid})
    for i in range(3):
        await turn(c, sid, f"turn {i}")
    window0 = await context_ids(c, sid)
    first = await c.request("session/compact", {"sessionID": sid})
    await turn(c, sid, "after the first")
    window1 = await context_ids(c, sid)
    await turn(c, sid, "huge" + BIG, used=180_000)  # an automatic one: marker, summary, continue
    await settle(c, sid)
    records = (await c.request("session/compactions", {"sessionID": sid}))["compactions"]
    assert len(records) == 2
    newest = records[1]
    undone = await c.request("session/uncompact", {"sessionID": sid})
    assert undone == {"removed": [newest["continueID"], newest["messageID"], newest["markerID"]]}
    removed = [e["messageID"] for e in c.notifications("message/removed") if e["sessionID"] == sid]
    assert removed == undone["removed"]
    huge = await context_ids(c, sid)
    assert huge[: len(window1)] == window1 and len(huge) == len(window1) + 2
    # Naming the first undoes it and everything after it: the window before any compaction.
    await c.request("session/uncompact", {"sessionID": sid, "messageID": first["summaryMessageID"]})
    assert (await context_ids(c, sid))[: len(window0)] == window0
    assert (await c.request("session/compactions", {"sessionID": sid}))["compactions"] == []
    with pytest.raises(RpcError) as err:
        await c.request("session/uncompact", {"sessionID": sid})
    assert err.value.code == -32602


async def test_uncompact_restore_pruned_gives_back_the_outputs(spawner: Spawner) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    outputs = []
    for i in range(6):
        _, _, p = await turn(c, sid, f"step {i}", tool="bash", output=f"OUT{i} " + "x" * 60_000)
        outputs.append(p)
    await turn(c, sid, "check")
    await settle(c, sid)
    pruned = {pid for e in c.notifications("session/pruned") for pid in e["partIDs"]}
    assert outputs[0]["id"] in pruned
    await c.request("session/compact", {"sessionID": sid})
    r = (await c.request("session/compactions", {"sessionID": sid}))["compactions"][0]
    assert set(r["prunedPartIDs"]) == pruned and r["partsPruned"] == len(pruned)
    await c.request("session/uncompact", {"sessionID": sid, "restorePruned": True})
    page = await stored(c, sid)
    parts = {p["id"]: p for m in page.messages for p in m.parts}
    for pid in pruned:
        assert "compacted" not in parts[pid]["state"]["time"]
    ctx = await c.request("session/context", {"sessionID": sid, "format": "openai", "fit": False})
    assert "OUT0 xxxx" in json.dumps(ctx["messages"])


async def test_uncompact_is_refused_while_compacting(unix_daemon: SocketDaemon) -> None:
    writer = await unix_daemon.connect(**CLIENT_WRITER)
    other = await unix_daemon.connect()
    held = HeldWriter()
    writer.on_request("summarizer/complete", held)
    sid = (await writer.create_session()).id
    await turn(writer, sid, "x")
    running = asyncio.ensure_future(writer.request("session/compact", {"sessionID": sid}))
    await asyncio.wait_for(held.asked.wait(), 30)
    with pytest.raises(RpcError) as err:
        await other.request("session/uncompact", {"sessionID": sid})
    assert err.value.code == -32044
    held.release.set()
    result = await running
    assert result["status"] == "continue"
    undone = await other.request("session/uncompact", {"sessionID": sid})
    assert undone["removed"] == [result["summaryMessageID"], undone["removed"][1]]


# -- the Python client's typed methods -----------------------------------------------------------


async def test_the_python_client_steers_compaction(spawner: Spawner) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    _, first, _ = await turn(c, sid, "one" + BIG, tool="read", output="file")
    await turn(c, sid, "two")
    await c.pin(sid, first["id"])
    pins = await c.pins(sid)
    assert [p.message_id for p in pins] == [first["id"], first["id"]]
    result = await c.compact(sid, up_to=first["id"])
    assert result.status == "continue"
    records = await c.compactions(sid)
    assert [r.message_id for r in records] == [result.summary_message_id]
    assert records[0].messages_summarized == 2
    removed = await c.uncompact(sid, restore_pruned=True)
    assert removed == [records[0].message_id, records[0].marker_id]
    await c.pin(sid, first["id"], pins[0].part_id, pinned=False)
    assert [p.part_id for p in await c.pins(sid)] == [pins[1].part_id]
