"""``history/search`` bounds, literal queries, recall's own traffic left out, and outputs too
large for PostgreSQL's text-search vector: a real daemon over stdio, on each backend."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sidecar_client import Client, RpcError
from wire import put_message, put_part

from .builders import assistant_message, text_part, user_message
from .test_history import search, tool_part


async def refused(client: Client, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as caught:
        await client.request("history/search", params)
    assert caught.value.code == -32602, caught.value
    return caught.value


# -- 32.2: every search input is bounded, never an internal error -------------------------------


async def test_query_over_the_limits_is_refused_naming_it(shared: Client) -> None:
    session = await shared.create_session()
    sid = session.id
    err = await refused(shared, {"sessionID": sid, "query": "x" * 1001})
    assert "history.maxQueryChars" in str(err) and "1000" in str(err)
    err = await refused(shared, {"sessionID": sid, "query": " ".join(["fix"] * 33)})
    assert "history.maxQueryTerms" in str(err) and "32" in str(err)
    # At the limits: answered.
    assert await search(shared, sid, "x" * 1000) == []
    assert await search(shared, sid, " ".join(f"w{i}" for i in range(32))) == []


@pytest.mark.parametrize(
    "query",
    [
        "NEAR(" * 5000,
        "fix OR " * 5000,
        "fix " * 5000,
        "x" * (10 * 1024 * 1024),
        '"' * 5000,
        "fix* AND -bug NOT (a OR b) " * 400,
    ],
)
async def test_the_hostile_queries_are_refused_at_once(shared: Client, query: str) -> None:
    session = await shared.create_session()
    err = await refused(shared, {"sessionID": session.id, "query": query})
    assert "history.maxQuery" in str(err)
    err = await refused(shared, {"sessionID": "*", "query": query})
    assert "history.maxQuery" in str(err)


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\u2028"[:0] + "\x9f"])
async def test_control_characters_are_invalid_params(shared: Client, char: str) -> None:
    session = await shared.create_session()
    err = await refused(shared, {"sessionID": session.id, "query": f"fi{char}x"})
    assert "$.query" in str(err)


async def test_kinds_is_bounded_and_checked(shared: Client) -> None:
    session = await shared.create_session()
    err = await refused(
        shared, {"sessionID": session.id, "query": "x", "kinds": ["text"] * 100_000}
    )
    assert "$.kinds" in str(err)
    err = await refused(shared, {"sessionID": session.id, "query": "x", "kinds": ["bogus"]})
    assert "$.kinds" in str(err)


@pytest.mark.parametrize(
    "query",
    [
        "NEAR(fix bug)",
        "fix OR bug",
        "fix AND bug",
        "fix NOT bug",
        "fix*",
        "-fix",
        "^fix",
        "body: fix",
        "sid : 00",
        '"unterminated',
        "(fix",
        "fix & bug | !fix <-> bug",
        "fix:*",
        "{fix}",
        "NEAR(" * 200,
        "%_\\",
    ],
)
async def test_fts_syntax_is_taken_literally(shared: Client, query: str) -> None:
    session = await shared.create_session()
    sid = session.id
    m = await put_message(shared, user_message(sid))
    only_bug = await put_part(shared, text_part(sid, m["id"], "a bug only"))
    literal = await put_part(shared, text_part(sid, m["id"], f"we wrote {query} here"))
    a = await put_message(shared, assistant_message(sid, m["id"], finish="stop"))
    await put_part(shared, text_part(sid, a["id"], "done"))
    hits = await search(shared, sid, query)
    ids = [h["partID"] for h in hits]
    assert only_bug["id"] not in ids
    if any(ch.isalnum() for ch in query):
        assert ids == [literal["id"]], (query, hits)


# -- 31.3e: recall's own traffic and the open turn are left out ---------------------------------

RECALL_TOOLS = [
    "history_search",
    "history_expand",
    "compaction-sidecar_history_search",
    "mcp__compaction-sidecar__history_expand",
    "History_Search",
]


async def recall_session(client: Client) -> tuple[str, dict[str, str]]:
    """A finished turn with zebra in a user text, a bash output and every recall tool's call
    and output; then an open turn asking about zebra."""
    session = await client.create_session()
    sid = session.id
    u1 = await put_message(client, user_message(sid))
    said = await put_part(client, text_part(sid, u1["id"], "the zebra config broke"))
    a1 = await put_message(client, assistant_message(sid, u1["id"], finish="tool-calls"))
    bash = await put_part(client, tool_part(sid, a1["id"], "bash", "grep zebra", "zebra: 1"))
    ids = {"said": said["id"], "bash": bash["id"]}
    for i, name in enumerate(RECALL_TOOLS):
        part = tool_part(sid, a1["id"], name, "zebra", f"hit: the zebra config broke #{i}")
        part["callID"] = f"call_{i}"
        part["state"]["input"] = {"query": "zebra"}
        ids[name] = (await put_part(client, part))["id"]
    a2 = await put_message(client, assistant_message(sid, u1["id"], finish="stop"))
    ids["a2"] = a2["id"]
    await put_part(client, text_part(sid, a2["id"], "fixed it"))
    u2 = await put_message(client, user_message(sid))
    ids["u2"] = u2["id"]
    ids["asked"] = (await put_part(client, text_part(sid, u2["id"], "what was zebra?")))["id"]
    a3 = await put_message(client, assistant_message(sid, u2["id"], finish="tool-calls"))
    ids["a3"] = a3["id"]
    call = tool_part(sid, a3["id"], "history_search", "zebra", "searching zebra")
    call["callID"] = "call_open"
    ids["open_call"] = (await put_part(client, call))["id"]
    thinking = {"sessionID": sid, "messageID": a3["id"], "type": "reasoning", "text": "zebra?"}
    ids["open_thought"] = (await put_part(client, thinking))["id"]
    return sid, ids


async def test_recall_traffic_and_the_open_turn_are_left_out(shared: Client) -> None:
    sid, ids = await recall_session(shared)
    found = {h["partID"] for h in await search(shared, sid, "zebra")}
    assert found == {ids["said"], ids["bash"]}
    star = {h["partID"] for h in await search(shared, "*", "zebra", limit=200)}
    assert ids["said"] in star and ids["bash"] in star
    assert not star & {ids[n] for n in (*RECALL_TOOLS, "asked", "open_call", "open_thought")}
    every = {h["partID"] for h in await search(shared, sid, "zebra", includeRecall=True)}
    assert every == {
        ids[n] for n in ("said", "bash", *RECALL_TOOLS, "asked", "open_call", "open_thought")
    }


async def test_a_finished_turn_is_searchable_again(shared: Client) -> None:
    sid, ids = await recall_session(shared)
    await put_message(shared, assistant_message(sid, ids["u2"], id=ids["a3"], finish="tool-calls"))
    a4 = await put_message(shared, assistant_message(sid, ids["u2"], finish="stop"))
    await put_part(shared, text_part(sid, a4["id"], "it was the config"))
    found = {h["partID"] for h in await search(shared, sid, "zebra")}
    # The turn is over: its user message and reasoning are history; its recall call is not.
    assert found == {ids["said"], ids["bash"], ids["asked"], ids["open_thought"]}


async def test_an_errored_step_ends_the_turn(shared: Client) -> None:
    sid, ids = await recall_session(shared)
    error = {"name": "APIError", "data": {"message": "boom"}}
    await put_message(
        shared, assistant_message(sid, ids["u2"], id=ids["a3"], finish=None, error=error)
    )
    found = {h["partID"] for h in await search(shared, sid, "zebra")}
    assert found == {ids["said"], ids["bash"], ids["asked"], ids["open_thought"]}


# -- 32.11: outputs larger than PostgreSQL's text-search vector ----------------------------------


#: Text whose every word is new: a tsvector's worst cases (plain words; hyphenated compounds,
#: which the parser indexes whole and by each piece; URLs, indexed as url, host and path;
#: one-character words of three-byte letters).
SHAPES = {
    "words": lambda i: f"w{i:x}q",
    "compounds": lambda i: f"a{i:x}-b{i:x}-c{i:x}",
    "urls": lambda i: f"http://h{i:x}.io/p{i:x}",
    "letters": lambda i: chr(0x4E00 + i % 20000) + chr(0xAC00 + i // 20000),
}


@pytest.mark.parametrize(
    ("megabytes", "shape"),
    [(1, "words"), (2, "words"), (16, "words"), (1, "compounds"), (1, "urls"), (1, "letters")],
)
async def test_a_large_output_is_stored_served_and_searchable(
    shared: Client, megabytes: int, shape: str
) -> None:
    await large_output_case(shared, megabytes, shape)


async def large_output_case(client: Client, megabytes: int, shape: str = "words") -> None:
    session = await client.create_session()
    sid = session.id
    u = await put_message(client, user_message(sid))
    a = await put_message(client, assistant_message(sid, u["id"], finish="stop"))
    # Distinct words throughout (the worst case for a tsvector), the first ones findable.
    word = SHAPES[shape]
    words = " ".join(word(i) for i in range(megabytes * 1024 * 1024 // 8))
    output = f"firstwords{megabytes}mb begin here\n" + words
    output = output[: megabytes * 1024 * 1024]
    part = await put_part(client, tool_part(sid, a["id"], "bash", "cat big.log", output))
    got = await client.request(
        "history/expand",
        {"sessionID": sid, "messageID": a["id"], "partID": part["id"], "maxChars": 1_000_000},
    )
    assert got["content"].startswith("tool: bash") and output[:1000] in got["content"]
    assert got["total"] > len(output)
    page = await client.request("session/messages", {"sessionID": sid})
    stored = [p for m in page["messages"] for p in m["parts"] if p["id"] == part["id"]]
    assert stored[0]["state"]["output"] == output
    hits = await search(client, sid, f"firstwords{megabytes}mb begin")
    assert [h["partID"] for h in hits] == [part["id"]]
    # The index holds its first 65,536 characters (PROTOCOL.md, "Large parts").
    assert await search(client, sid, output.split()[-2]) == []


async def test_a_64_mb_output_with_the_frame_limit_raised(spawner: Any) -> None:
    """64 MB is the default frame limit (``server.maxFrameBytes``): raised here so the part
    fits in one ``part/update`` and its replies."""
    big = 160 * 1024 * 1024
    client = await spawner.configured(
        {"server": {"maxFrameBytes": big, "maxOutgoingBytes": big, "maxReplyBytes": big}}
    )
    client.default_timeout = 600  # 8 million distinct words to index on a loaded machine
    await large_output_case(client, 64)


async def test_a_lone_surrogate_escape_is_answered_under_its_id(shared: Client) -> None:
    """JSON's grammar allows ``"\\ud800"``; the decoder refuses it. The reply still carries
    the request's id (found by the search fuzzer: it went out with ``id: null``)."""
    call = shared.reserve_call(timeout=30)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": call.id,
            "method": "history/search",
            "params": {"sessionID": "*", "query": "fix \ud800 bug"},
        }
    ).encode()
    assert b"\\ud800" in body
    nulls = len(shared.unsolicited_errors())
    shared.send_frame(body)
    with pytest.raises(RpcError) as caught:
        await call
    assert caught.value.code == -32700
    assert len(shared.unsolicited_errors()) == nulls


async def test_the_bounds_are_the_daemons_own(shared: Client) -> None:
    """A client cannot raise what a search may cost everyone else."""
    with pytest.raises(RpcError) as caught:
        await shared.request("config/update", {"config": {"history": {"maxQueryChars": 10**6}}})
    assert caught.value.code == -32602 and "history.maxQueryChars" in str(caught.value)


async def test_the_daemon_config_sets_the_bounds(spawner: Any) -> None:
    client = await spawner.configured({"history": {"maxQueryChars": 10, "maxQueryTerms": 2}})
    sid = (await client.create_session()).id
    err = await refused(client, {"sessionID": sid, "query": "x" * 11})
    assert "history.maxQueryChars (10)" in str(err)
    err = await refused(client, {"sessionID": sid, "query": "a b c"})
    assert "history.maxQueryTerms (2)" in str(err)
    assert await search(client, sid, "a b") == []
