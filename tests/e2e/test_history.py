"""``history/search`` and ``history/expand`` against a real daemon, on each backend."""

from __future__ import annotations

from typing import Any

import pytest
from sidecar_client import Client, RpcError
from wire import put_message, put_part, stored

from .builders import assistant_message, text_part, user_message

PROSE = (
    "The failing check is test_parse_header: parseHeader chokes on folded lines in "
    "src/pkg/mod.py, and the import raised ModuleNotFoundError: No module named 'yaml'."
)


def tool_part(session_id: str, message_id: str, tool: str, command: str, output: str) -> Any:
    return {
        "sessionID": session_id,
        "messageID": message_id,
        "type": "tool",
        "callID": "call_" + tool,
        "tool": tool,
        "state": {
            "status": "completed",
            "input": {"command": command},
            "output": output,
            "title": command,
            "metadata": {},
            "time": {"start": 1, "end": 2},
        },
    }


async def search(client: Client, session_id: str, query: str, **extra: Any) -> list[Any]:
    result = await client.request(
        "history/search", {"sessionID": session_id, "query": query, **extra}
    )
    hits: list[Any] = result["hits"]
    return hits


async def seeded(client: Client) -> tuple[str, dict[str, str]]:
    session = await client.create_session()
    sid = session.id
    u1 = await put_message(client, user_message(sid))
    p_text = await put_part(client, text_part(sid, u1["id"], PROSE))
    a1 = await put_message(client, assistant_message(sid, u1["id"]))
    p_reason = await put_part(
        client,
        {"sessionID": sid, "messageID": a1["id"], "type": "reasoning", "text": "think zebra"},
    )
    p_tool = await put_part(
        client,
        tool_part(sid, a1["id"], "bash", "pytest -x tests/test_io.py", "E   AssertionError zebra"),
    )
    u2 = await put_message(client, user_message(sid))
    p_late = await put_part(client, text_part(sid, u2["id"], "later zebra note"))
    # Its turn is over (an open turn is left out of a search, ``test_history_bounds``).
    await put_message(client, assistant_message(sid, u2["id"], finish="stop"))
    ids = {
        "u1": u1["id"],
        "a1": a1["id"],
        "u2": u2["id"],
        "text": p_text["id"],
        "reasoning": p_reason["id"],
        "tool": p_tool["id"],
        "late": p_late["id"],
    }
    return sid, ids


@pytest.mark.parametrize(
    "query",
    [
        "test_parse_header",
        "parse_header",
        "parseHeader",
        "src/pkg/mod.py",
        "ModuleNotFoundError",
        "\"No module named 'yaml'\"",
        "folded lines",
    ],
)
async def test_code_terms_are_found_as_typed(shared: Client, query: str) -> None:
    sid, ids = await seeded(shared)
    hits = await search(shared, sid, query)
    assert [h["partID"] for h in hits] == [ids["text"]]
    hit = hits[0]
    assert hit["messageID"] == ids["u1"] and hit["role"] == "user" and hit["tool"] is None
    assert hit["sessionID"] == sid and hit["time"] > 0 and hit["score"] > 0
    assert "parse" in hit["snippet"].lower() or "module" in hit["snippet"].lower()


async def test_tool_input_and_output_are_searchable(shared: Client) -> None:
    sid, ids = await seeded(shared)
    for query in ("tests/test_io.py", "AssertionError", "pytest -x"):
        hits = await search(shared, sid, query)
        assert [h["partID"] for h in hits] == [ids["tool"]], query
        assert hits[0]["tool"] == "bash" and hits[0]["role"] == "assistant"


async def test_words_absent_and_phrase_order_match_nothing(shared: Client) -> None:
    sid, _ids = await seeded(shared)
    assert await search(shared, sid, "nonexistentword") == []
    assert await search(shared, sid, '"header parse"') == []


async def test_kinds_and_before_filter(shared: Client) -> None:
    sid, ids = await seeded(shared)
    every = {h["partID"] for h in await search(shared, sid, "zebra")}
    assert every == {ids["reasoning"], ids["tool"], ids["late"]}
    only_tool = await search(shared, sid, "zebra", kinds=["tool"])
    assert [h["partID"] for h in only_tool] == [ids["tool"]]
    thought = await search(shared, sid, "zebra", kinds=["reasoning", "text"])
    assert {h["partID"] for h in thought} == {ids["reasoning"], ids["late"]}
    earlier = await search(shared, sid, "zebra", before=ids["u2"])
    assert {h["partID"] for h in earlier} == {ids["reasoning"], ids["tool"]}
    assert await search(shared, sid, "zebra", before=ids["a1"]) == []
    assert len(await search(shared, sid, "zebra", limit=1)) == 1


async def test_star_searches_every_session(shared: Client) -> None:
    sid1, ids1 = await seeded(shared)
    sid2, ids2 = await seeded(shared)
    hits = await search(shared, "*", "test_parse_header", limit=200)
    found = {(h["sessionID"], h["partID"]) for h in hits}
    assert {(sid1, ids1["text"]), (sid2, ids2["text"])} <= found
    # One session's search never shows another's parts.
    assert [h["partID"] for h in await search(shared, sid1, "test_parse_header")] == [ids1["text"]]


async def test_acknowledged_write_is_searchable_at_once(shared: Client) -> None:
    session = await shared.create_session()
    message = await put_message(shared, user_message(session.id))
    await put_message(shared, assistant_message(session.id, message["id"], finish="stop"))
    for i in range(20):
        part = await put_part(shared, text_part(session.id, message["id"], f"marker{i}xyz"))
        hits = await search(shared, session.id, f"marker{i}xyz")
        assert [h["partID"] for h in hits] == [part["id"]]
    # An update replaces the indexed text.
    await put_part(shared, text_part(session.id, message["id"], "renamed", id=part["id"]))
    assert await search(shared, session.id, "marker19xyz") == []
    assert [h["partID"] for h in await search(shared, session.id, "renamed")] == [part["id"]]


async def test_deleting_removes_entries(shared: Client) -> None:
    sid, ids = await seeded(shared)
    await shared.request(
        "part/remove", {"sessionID": sid, "messageID": ids["a1"], "partID": ids["tool"]}
    )
    assert {h["partID"] for h in await search(shared, sid, "zebra")} == {
        ids["reasoning"],
        ids["late"],
    }
    await shared.request("message/remove", {"sessionID": sid, "messageID": ids["a1"]})
    assert [h["partID"] for h in await search(shared, sid, "zebra")] == [ids["late"]]
    await shared.request("session/delete", {"sessionID": sid})
    hits = await search(shared, "*", "zebra", limit=200)
    assert all(h["sessionID"] != sid for h in hits)


async def test_expand_pages_the_original_content(shared: Client) -> None:
    sid, ids = await seeded(shared)
    whole = await shared.request(
        "history/expand", {"sessionID": sid, "messageID": ids["u1"], "partID": ids["text"]}
    )
    assert whole["content"] == PROSE and whole["total"] == len(PROSE)
    assert whole["nextOffset"] is None and whole["role"] == "user"
    pieces = []
    offset: int | None = 0
    while offset is not None:
        page = await shared.request(
            "history/expand",
            {"sessionID": sid, "messageID": ids["u1"], "offset": offset, "maxChars": 50},
        )
        assert page["offset"] == offset and len(page["content"]) <= 50
        pieces.append(page["content"])
        offset = page["nextOffset"]
    assert "".join(pieces) == f"[part {ids['text']}]\n{PROSE}"
    tool = await shared.request(
        "history/expand", {"sessionID": sid, "messageID": ids["a1"], "partID": ids["tool"]}
    )
    assert "pytest -x tests/test_io.py" in tool["content"]
    assert "E   AssertionError zebra" in tool["content"]


async def test_bad_requests_name_the_problem(shared: Client) -> None:
    sid, ids = await seeded(shared)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("history/search", {"sessionID": "ses_nope", "query": "x"}, "ses_nope"),
        ("history/search", {"sessionID": sid, "query": "  "}, "$.query"),
        ("history/search", {"sessionID": sid, "query": "x", "kinds": ["file"]}, "$.kinds"),
        ("history/search", {"sessionID": sid, "query": "x", "before": "msg_nope"}, "msg_nope"),
        ("history/search", {"sessionID": sid, "query": "x", "limit": 0}, "$.limit"),
        ("history/expand", {"sessionID": sid, "messageID": "msg_nope"}, "msg_nope"),
        (
            "history/expand",
            {"sessionID": sid, "messageID": ids["u1"], "partID": "prt_nope"},
            "prt_nope",
        ),
    ]
    for method, params, named in cases:
        with pytest.raises(RpcError) as caught:
            await shared.request(method, params)
        assert named in str(caught.value), (method, params, caught.value)
        assert caught.value.code != -32603


async def test_an_exact_phrase_finds_the_original_before_a_summary_quoting_it(
    client: Client,
) -> None:
    """Issue 36 item 5: the summary (its ledger keeps the error line verbatim) quotes the tool
    output; a search for the quoted line ranks the output itself first."""
    sid = (await client.create_session()).id
    error = "ValueError: bad header checksum in src/pkg/mod.py line 42"
    u = await put_message(client, user_message(sid))
    await put_part(client, text_part(sid, u["id"], "Run the tests"))
    a = await put_message(client, assistant_message(sid, u["id"], finish="stop"))
    tool = await put_part(
        client, tool_part(sid, a["id"], "bash", "pytest -x", f"collected 3 items\n{error}\n")
    )
    await put_part(client, text_part(sid, a["id"], "The header parser fails."))
    # Enough history after it that a summary is smaller than the window.
    u2 = await put_message(client, user_message(sid))
    await put_part(client, text_part(sid, u2["id"], "Read the parser"))
    a2 = await put_message(client, assistant_message(sid, u2["id"], finish="stop"))
    await put_part(client, tool_part(sid, a2["id"], "read", "src/pkg/mod.py", "x = 1\n" * 4000))
    done = await client.request("session/compact", {"sessionID": sid})
    assert done["summaryMessageID"], done
    summary = next(
        m for m in (await stored(client, sid)).messages if m.info["id"] == done["summaryMessageID"]
    )
    assert any(error in p.get("text", "") for p in summary.parts)  # the summary quotes it
    hits = await search(client, sid, f'"{error}"')
    assert hits[0]["partID"] == tool["id"], hits
    assert summary.info["id"] in {h["messageID"] for h in hits}  # found too, after it
