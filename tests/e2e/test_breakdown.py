"""``session/breakdown`` against a real daemon over stdio (both backends): what fills the window.

The categories must add up to what ``session/context`` reports plus the frontend's overhead, the
largest items must be the largest parts, pins and pruned outputs count apart, and the limits are
the model's.
"""

from __future__ import annotations

from typing import Any

from sidecar_client import Client
from wire import put_message, put_part

from .conftest import Spawner
from .test_steering import SONNET, settle, tokens, turn


def by_name(result: dict[str, Any]) -> dict[str, int]:
    return {c["name"]: c["tokens"] for c in result["categories"]}


async def tool_turn(c: Client, sid: str, text: str, output: str, used: int = 5_000) -> str:
    """A turn whose answer read a file (``output``); returns the tool part's id."""
    _, _, part = await turn(c, sid, text, tool="read", output=output, used=used)
    assert part is not None
    return str(part["id"])


async def test_the_categories_add_up_to_the_served_window(spawner: Spawner) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    big = await tool_turn(c, sid, "read the big file", "B" * 40_000)
    small = await tool_turn(c, sid, "read the small file", "s" * 2_000)
    await settle(c, sid)
    ctx = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    got = await c.request("session/breakdown", {"sessionID": sid})
    cats = by_name(got)
    assert sum(cats.values()) == ctx["estimatedTokens"] + got["overheadTokens"]
    assert got["estimatedTokens"] == ctx["estimatedTokens"]
    assert got["totalTokens"] == ctx["estimatedTokens"]
    assert got["overheadSource"] == "none" and cats["overhead"] == 0
    assert cats["toolOutputs"] >= 10_000 + 500 and cats["userText"] > 0
    assert cats["assistantText"] > 0 and cats["toolOutputsPruned"] == 0
    # The model's limits (Sonnet: 200k context, 32k output reserved).
    assert got["modelLimitsKnown"] is True
    assert got["context"] == 200_000 and got["reservedOutput"] == 32_000
    assert got["usableInput"] == 168_000
    assert got["free"] == got["usableInput"] - got["totalTokens"]
    assert got["trigger"] == 168_000 and got["prepareAt"] is None
    shares = {c["name"]: c["share"] for c in got["categories"]}
    assert shares["toolOutputs"] == round(cats["toolOutputs"] / 168_000, 4)
    # The largest items: the big output first, then the next largest, in order.
    largest = got["largest"]
    assert largest[0]["partID"] == big and largest[0]["tool"] == "read"
    assert largest[0]["kind"] == "toolOutputs"
    assert [i["tokens"] for i in largest] == sorted((i["tokens"] for i in largest), reverse=True)
    assert small in [i["partID"] for i in largest]
    assert len(largest) <= 10


async def test_given_overhead_counts_and_the_largest_ten_are_the_largest(
    spawner: Spawner,
) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    # Each above the answers (~1k tokens), all within the 40k a prune protects.
    sizes = [4_400 + 400 * i for i in range(12)]
    ids = [await tool_turn(c, sid, f"read file {i}", "x" * n) for i, n in enumerate(sizes)]
    await settle(c, sid)
    got = await c.request("session/breakdown", {"sessionID": sid, "overheadTokens": 9_300})
    assert got["overheadTokens"] == 9_300 and got["overheadSource"] == "given"
    assert by_name(got)["overhead"] == 9_300
    assert got["totalTokens"] == got["estimatedTokens"] + 9_300
    assert got["free"] == 168_000 - got["totalTokens"]
    assert [i["partID"] for i in got["largest"]] == list(reversed(ids))[:10]


async def test_pinned_and_pruned_parts_count_apart(spawner: Spawner) -> None:
    c = await spawner(initialization_options={"compaction": {"prunedStub": "informative"}})
    sid = (await c.create_session()).id
    old = await tool_turn(c, sid, "read the old file", "o" * 200_000)
    pinned = await tool_turn(c, sid, "read the spec", "p" * 8_000)
    pin = {"sessionID": sid, "messageID": await _message_of(c, sid, pinned), "partID": pinned}
    await c.request("part/pin", pin)
    for i in range(3):  # later turns push the old output past the prune window
        await tool_turn(c, sid, f"read more {i}", "m" * 100_000)
    await c.request("session/prune", {"sessionID": sid})
    await settle(c, sid)
    assert await _compacted(c, sid, old)
    got = await c.request("session/breakdown", {"sessionID": sid})
    cats = by_name(got)
    ctx = await c.request("session/context", {"sessionID": sid, "format": "openai"})
    assert sum(cats.values()) == ctx["estimatedTokens"]
    assert cats["pinned"] >= 2_000 and cats["toolOutputsPruned"] > 0
    kinds = {i["partID"]: i["kind"] for i in got["largest"]}
    assert kinds[pinned] == "pinned"
    assert kinds.get(old) in (None, "toolOutputsPruned")  # its stub, not its 50k tokens


async def test_a_summary_and_its_kept_block_count_apart(spawner: Spawner) -> None:
    c = await spawner(
        initialization_options={"compaction": {"prepare": 0.7, "keep": {"firstRequest": True}}}
    )
    sid = (await c.create_session()).id
    await turn(c, sid, "the task: make the parser fast" + " " + "w" * 80_000, used=5_000)
    await turn(c, sid, "go on" + " " + "w" * 80_000, used=170_000)  # over 168k usable
    await settle(c, sid)
    got = await c.request("session/breakdown", {"sessionID": sid})
    cats = by_name(got)
    assert cats["summary"] > 0 and cats["keptVerbatim"] > 0
    assert got["prepareAt"] == 117_600  # 0.7 x 168,000


async def test_an_unknown_model_has_no_limits(spawner: Spawner) -> None:
    c = await spawner()
    sid = (await c.create_session()).id
    user = await put_message(c, {"role": "user", "sessionID": sid})
    await put_part(c, {"type": "text", "sessionID": sid, "messageID": user["id"], "text": "hi"})
    got = await c.request("session/breakdown", {"sessionID": sid})
    assert got["modelLimitsKnown"] is False and got["usableInput"] is None
    assert all(cat["share"] is None for cat in got["categories"])
    assert sum(by_name(got).values()) == got["estimatedTokens"]


async def _compacted(c: Client, sid: str, part_id: str) -> bool:
    ctx = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    part = next(p for m in ctx["messages"] for p in m["parts"] if p["id"] == part_id)
    return bool(part["state"]["time"].get("compacted"))


async def _message_of(c: Client, sid: str, part_id: str) -> str:
    ctx = await c.request("session/context", {"sessionID": sid, "format": "parts"})
    for m in ctx["messages"]:
        if any(p["id"] == part_id for p in m["parts"]):
            return str(m["info"]["id"])
    raise AssertionError(part_id)


async def test_a_learned_overhead_is_in_the_breakdown(spawner: Spawner) -> None:
    """Issue 31 3c's learned overhead is the breakdown's ``overhead`` too, and what
    ``session/context`` counted for the same window."""
    c = await spawner()
    sid = (await c.create_session()).id
    for i in range(3):
        user = await put_message(c, {"role": "user", "sessionID": sid, "model": SONNET})
        await put_part(
            c, {"type": "text", "sessionID": sid, "messageID": user["id"], "text": f"q{i}"}
        )
        ctx = await c.request("session/context", {"sessionID": sid})
        served = ctx["estimatedTokens"]
        a = {"role": "assistant", "sessionID": sid, "parentID": user["id"], **SONNET}
        reply = await put_message(c, a)
        text = {"type": "text", "sessionID": sid, "messageID": reply["id"], "text": "ok"}
        await put_part(c, text)
        reply.update(finish="stop", tokens=tokens(served + 9_300))
        await put_message(c, reply)
    await settle(c, sid)
    got = await c.request("session/breakdown", {"sessionID": sid})
    ctx = await c.request("session/context", {"sessionID": sid})
    assert (got["overheadTokens"], got["overheadSource"]) == (9_300, "learned")
    assert (ctx["overheadTokens"], ctx["overheadSource"]) == (9_300, "learned")
    assert by_name(got)["overhead"] == 9_300
    assert got["totalTokens"] == ctx["estimatedTokens"] + 9_300
