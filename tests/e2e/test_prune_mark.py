"""Issue 31, item 3d: a re-sent part keeps its prune mark.

A mirror that restarts re-sends the parts it knows, as its agent stored them: without the
``state.time.compacted`` the daemon set when it pruned them. That write must not bring the
pruned output back into the window; only a changed output (the part really changed) or
``session/uncompact`` with ``restorePruned`` clears the mark.
"""

from __future__ import annotations

import copy
from typing import Any

from sidecar_client import Client
from wire import put_message, put_part, stored

from .conftest import Spawner

CLEARED = "[Old tool result content cleared]"
# Low prune thresholds: each output is 1,000 tokens, so outputs older than the newest two
# turns (and past 1,200 protected tokens) are pruned.
CONFIG = {"compaction": {"pruneProtect": 1200, "pruneMinimum": 300}}
MODEL = {"providerID": "test", "modelID": "test-model"}


def _output(turn: int, tag: str = "") -> str:
    return f"{tag}out{turn}:" + "o" * 4000


async def _turn(client: Client, sid: str, turn: int) -> dict[str, Any]:
    """One finished turn whose step read a file; returns its tool part as written."""
    created = 1_700_000_000_000 + 1000 * turn
    user, assistant = f"msg_{turn:03d}a", f"msg_{turn:03d}b"
    await put_message(
        client,
        {
            "id": user,
            "sessionID": sid,
            "role": "user",
            "time": {"created": created},
            "agent": "build",
            "model": MODEL,
        },
    )
    await put_part(
        client,
        {
            "id": f"prt_{turn:03d}a",
            "sessionID": sid,
            "messageID": user,
            "type": "text",
            "text": f"turn {turn}",
        },
    )
    info = {
        "id": assistant,
        "sessionID": sid,
        "role": "assistant",
        "time": {"created": created + 1, "completed": created + 2},
        "parentID": user,
        "modelID": MODEL["modelID"],
        "providerID": MODEL["providerID"],
        "mode": "build",
        "agent": "build",
        "path": {"cwd": "/", "root": "/"},
        "cost": 0,
        "tokens": {"input": 100, "output": 10, "reasoning": 0, "cache": {"read": 0, "write": 0}},
        "finish": "stop",
    }
    await put_message(client, info)
    tool = {
        "id": f"prt_{turn:03d}b",
        "sessionID": sid,
        "messageID": assistant,
        "type": "tool",
        "callID": f"call_{turn}",
        "tool": "read",
        "state": {
            "status": "completed",
            "input": {"filePath": f"/f{turn}"},
            "output": _output(turn),
            "title": f"f{turn}",
            "metadata": {},
            "time": {"start": created + 1, "end": created + 2},
        },
    }
    await put_part(client, tool)
    return tool


async def _tool_results(client: Client, sid: str) -> dict[str, str]:
    """The window's tool results by call id (``session/context``, openai)."""
    ctx = await client.request("session/context", {"sessionID": sid, "format": "openai"})
    return {m["tool_call_id"]: m["content"] for m in ctx["messages"] if m["role"] == "tool"}


async def _stored_part(client: Client, sid: str, part_id: str) -> dict[str, Any]:
    page = await stored(client, sid)
    return next(p for m in page.messages for p in m.parts if p["id"] == part_id)


async def test_a_resent_part_keeps_its_prune_mark(spawner: Spawner) -> None:
    client = await spawner.configured(CONFIG)
    sid = (await client.create_session()).id
    tools = [await _turn(client, sid, t) for t in range(1, 6)]
    await client.idle(sid)
    await client.prune(sid)
    first = tools[0]
    mark = (await _stored_part(client, sid, first["id"]))["state"]["time"]["compacted"]
    assert mark
    assert (await _tool_results(client, sid))["call_1"] == CLEARED

    # The mirror re-sends the part as it has it, without the mark: it stays pruned, in the
    # reply, in the store and in the window (served from the window cache and read afresh).
    echoed = await put_part(client, first)
    assert echoed["state"]["time"]["compacted"] == mark
    assert (await _stored_part(client, sid, first["id"]))["state"]["time"]["compacted"] == mark
    assert (await _tool_results(client, sid))["call_1"] == CLEARED
    fresh = await spawner.configured(CONFIG)
    assert (await _tool_results(fresh, sid))["call_1"] == CLEARED
    await fresh.close()

    # ``session/uncompact`` with ``restorePruned`` still clears it, and a re-send after that
    # does not bring the old mark back.
    await client.compact(sid, model=MODEL)
    [record] = await client.compactions(sid)
    assert first["id"] in record.pruned_part_ids
    await client.uncompact(sid, restore_pruned=True)
    assert (await _tool_results(client, sid))["call_1"] == _output(1)
    echoed = await put_part(client, first)
    assert "compacted" not in echoed["state"]["time"]
    assert (await _tool_results(client, sid))["call_1"] == _output(1)

    # Pruned again; a changed output is a new output: no longer pruned, re-sent or not.
    await client.prune(sid)
    assert (await _tool_results(client, sid))["call_1"] == CLEARED
    changed = copy.deepcopy(first)
    changed["state"]["output"] = _output(1, "new ")
    for _ in range(2):
        echoed = await put_part(client, changed)
        assert "compacted" not in echoed["state"]["time"]
        assert (await _tool_results(client, sid))["call_1"] == _output(1, "new ")
    # The history index has the output as stored.
    found = await client.request("history/search", {"sessionID": sid, "query": "new"})
    assert [h["partID"] for h in found["hits"]] == [first["id"]]


async def test_a_resent_part_with_its_own_mark_is_stored_as_sent(spawner: Spawner) -> None:
    """A part that carries ``time.compacted`` (the agent pruned it itself) is the client's
    word, as before; a part that is not a completed tool output has no mark to keep."""
    client = await spawner.configured(CONFIG)
    sid = (await client.create_session()).id
    tools = [await _turn(client, sid, t) for t in range(1, 6)]
    await client.prune(sid)
    own = copy.deepcopy(tools[0])
    own["state"]["time"]["compacted"] = 42
    assert (await put_part(client, own))["state"]["time"]["compacted"] == 42
    running = copy.deepcopy(tools[0])
    running["state"] = {"status": "running", "input": {}, "time": {"start": 1}}
    assert (await put_part(client, running))["state"] == running["state"]
