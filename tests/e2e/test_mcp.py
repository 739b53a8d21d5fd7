"""``compaction-sidecar mcp`` driven by the official MCP SDK's own client (``ClientSession``
over ``stdio_client``) against a real shared daemon, on each backend."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from daemon_env import MCP_INITIALIZE, spawn_mcp
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from sidecar_client import Client, connect_shared
from wire import put_message, put_part

from .builders import assistant_message, text_part, user_message
from .test_history import tool_part

TOOLS = {"history_search", "history_expand", "context_status", "compact_now"}


@pytest_asyncio.fixture(loop_scope="session")
async def daemon(
    db: str | Path, daemon_env: dict[str, str | None]
) -> AsyncIterator[tuple[Client, Path, dict[str, str]]]:
    """The shared daemon on a short socket path (started by a Python agent's
    ``connect_shared``), and the environment the MCP server runs in."""
    where = Path(tempfile.mkdtemp(prefix="scmcp", dir="/tmp"))
    sock = where / "d.sock"
    env = {k: v for k, v in os.environ.items() if k not in daemon_env or daemon_env[k]}
    env.update({k: v for k, v in daemon_env.items() if v is not None})
    agent = await connect_shared(sock, db=db, idle_exit=30)
    try:
        yield agent, sock, env
    finally:
        await agent.request("daemon/stop", {})
        await agent.close()
        shutil.rmtree(where, ignore_errors=True)


PROJECT = "/work/project-a"


def server(sock: Path, db: str | Path, env: dict[str, str], *scope: str) -> StdioServerParameters:
    """The MCP server on ``sock``; its scope is ``PROJECT`` unless ``scope`` says otherwise."""
    return StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "sidecar", "mcp", "--socket", str(sock), "--db", str(db)),
            *(scope or ("--directory", PROJECT)),
        ],
        env=env,
    )


def payload(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error
    text: str = result.content[0].text
    return text


async def test_mcp_tools_listed_and_called(
    daemon: tuple[Client, Path, dict[str, str]], db: str | Path
) -> None:
    agent, sock, env = daemon
    old = await agent.create_session(title="older", directory=PROJECT)
    await put_message(agent, user_message(old.id))
    session = await agent.create_session(title="current", directory=PROJECT)
    sid = session.id
    model = {"providerID": "test", "modelID": "test-model"}
    u1 = await put_message(agent, user_message(sid, model=model))
    await put_part(agent, text_part(sid, u1["id"], "Fix test_parse_header in src/pkg/mod.py"))
    a1 = await put_message(agent, assistant_message(sid, u1["id"]))
    tool = await put_part(
        agent,
        tool_part(
            sid, a1["id"], "bash", "pytest -x", "ModuleNotFoundError: No module named 'yaml'"
        ),
    )
    await put_part(agent, text_part(sid, a1["id"], "Installed yaml; tests pass."))
    for turn in range(4):  # enough history that a summary is smaller than the window
        u = await put_message(agent, user_message(sid, model=model))
        await put_part(agent, text_part(sid, u["id"], f"Step {turn}: read the log"))
        a = await put_message(agent, assistant_message(sid, u["id"]))
        log = "\n".join(f"line {i} of log {turn}: all fine" for i in range(300))
        await put_part(agent, tool_part(sid, a["id"], "read", f"log{turn}.txt", log))

    async with stdio_client(server(sock, db, env)) as (read, write):
        async with ClientSession(read, write) as mcp:
            await mcp.initialize()
            listed = await mcp.list_tools()
            tools = {t.name: t for t in listed.tools}
            assert set(tools) == TOOLS
            for t in tools.values():
                assert t.description and len(t.description) > 100
                assert t.input_schema["type"] == "object"
            assert tools["history_search"].input_schema["required"] == ["query"]

            # history_search: the default session is the most recently active one.
            found = payload(await mcp.call_tool("history_search", {"query": "ModuleNotFoundError"}))
            assert found["session"] == sid
            [hit] = found["hits"]
            assert hit["partID"] == tool["id"] and hit["tool"] == "bash"
            assert (
                payload(
                    await mcp.call_tool(
                        "history_search", {"query": "src/pkg/mod.py", "session": sid}
                    )
                )["hits"][0]["messageID"]
                == u1["id"]
            )

            full = payload(
                await mcp.call_tool(
                    "history_expand", {"messageID": hit["messageID"], "partID": hit["partID"]}
                )
            )
            assert "No module named 'yaml'" in full["content"] and full["nextOffset"] is None
            later = payload(
                await mcp.call_tool("history_expand", {"messageID": a1["id"], "offset": 10})
            )
            assert later["offset"] == 10 and later["total"] > 10

            status = payload(await mcp.call_tool("context_status", {}))
            assert status["session"] == sid and status["lastCompaction"] is None
            assert {"windowTokens", "usableInput", "tokensUntilCompaction"} <= set(status)

            compacted = payload(
                await mcp.call_tool(
                    "compact_now", {"session": sid, "instructions": "keep the yaml fix"}
                )
            )
            assert compacted["status"] == "continue" and compacted["summaryMessageID"]
            after = payload(await mcp.call_tool("context_status", {"session": sid}))
            last = after["lastCompaction"]
            assert last["messageID"] == compacted["summaryMessageID"]
            assert last["summaryChars"] > 0 and last["time"] > 0
            # What the summary replaced is still found.
            again = payload(await mcp.call_tool("history_search", {"query": "pytest -x"}))
            assert tool["id"] in {h["partID"] for h in again["hits"]}

            # Errors are tool errors that say what is wrong; the server keeps serving.
            assert "ses_missing" in error_text(
                await mcp.call_tool("history_search", {"query": "x", "session": "ses_missing"})
            )
            assert "msg_missing" in error_text(
                await mcp.call_tool("history_expand", {"messageID": "msg_missing"})
            )
            assert "query" in error_text(await mcp.call_tool("history_search", {}))
            assert "limit" in error_text(
                await mcp.call_tool("history_search", {"query": "x", "limit": 0})
            )
            assert "ses_missing" in error_text(
                await mcp.call_tool("compact_now", {"session": "ses_missing"})
            )
            assert payload(await mcp.call_tool("context_status", {"session": sid}))


async def test_mcp_reports_an_unreachable_daemon_as_a_tool_error(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    where = Path(tempfile.mkdtemp(prefix="scmcp", dir="/tmp"))
    try:
        env = {k: v for k, v in os.environ.items() if k not in daemon_env}
        env.update({k: v for k, v in daemon_env.items() if v is not None})
        bad_db = tmp_path / "not-a-dir" / "x.db"
        (tmp_path / "not-a-dir").write_text("a file, so the daemon cannot create its database")
        async with stdio_client(server(where / "d.sock", bad_db, env)) as (read, write):
            async with ClientSession(read, write) as mcp:
                await mcp.initialize()
                text = error_text(await mcp.call_tool("context_status", {}))
                assert "cannot reach the compaction-sidecar daemon" in text
    finally:
        shutil.rmtree(where, ignore_errors=True)


async def test_mcp_sees_only_the_sessions_of_its_project(
    daemon: tuple[Client, Path, dict[str, str]], db: str | Path
) -> None:
    """Issue 32 item 7: a client in project A got project B's secrets. The server sees the
    sessions of its directory; an id of another project is refused in the very words of an
    id that does not exist; ``--all-projects`` opts out and the descriptions say so."""
    agent, sock, env = daemon
    ours = await agent.create_session(title="ours", directory=PROJECT)
    u = await put_message(agent, user_message(ours.id))
    await put_part(agent, text_part(ours.id, u["id"], "our notes about parsers"))
    other = "/work/project-b"
    theirs = await agent.create_session(title="theirs", directory=other)  # newer
    t = await put_message(agent, user_message(theirs.id))
    await put_part(agent, text_part(theirs.id, t["id"], "their secret is hunter2"))
    for sid, asked in ((ours.id, u), (theirs.id, t)):
        # Answered, so the requests are history, not an open turn that search leaves out.
        await put_message(agent, assistant_message(sid, asked["id"], finish="stop"))

    def same_refusal(text: str, given: str, missing: str) -> str:
        return text.replace(given, missing)

    async with stdio_client(server(sock, db, env)) as (read, write):
        async with ClientSession(read, write) as mcp:
            await mcp.initialize()
            for tool in (await mcp.list_tools()).tools:
                assert "this project" in (tool.description or ""), tool.name
            found = payload(await mcp.call_tool("history_search", {"query": "hunter2"}))
            assert found["session"] == ours.id and found["hits"] == []
            assert payload(await mcp.call_tool("history_search", {"query": "parsers"}))["hits"]
            status = payload(await mcp.call_tool("context_status", {}))
            assert status["session"] == ours.id
            for tool, args, given, missing in [
                ("history_search", {"query": "hunter2", "session": theirs.id}, theirs.id, "ses_x"),
                ("context_status", {"session": theirs.id}, theirs.id, "ses_x"),
                ("compact_now", {"session": theirs.id}, theirs.id, "ses_x"),
                ("history_expand", {"messageID": t["id"]}, t["id"], "msg_x"),
                ("history_expand", {"messageID": t["id"], "session": theirs.id}, theirs.id, "s"),
            ]:
                refused = error_text(await mcp.call_tool(tool, args))
                assert "hunter2" not in refused and given in refused, refused
                unknown = error_text(await mcp.call_tool(tool, {**args, **_swap(args, missing)}))
                assert same_refusal(refused, given, missing) == unknown, (refused, unknown)
            mine = payload(await mcp.call_tool("history_expand", {"messageID": u["id"]}))
            assert "parsers" in mine["content"]
        assert (await agent.get_session(theirs.id)).title == "theirs"  # compact_now did nothing

    async with stdio_client(server(sock, db, env, "--all-projects")) as (read, write):
        async with ClientSession(read, write) as mcp:
            await mcp.initialize()
            for tool in (await mcp.list_tools()).tools:
                assert "--all-projects" in (tool.description or ""), tool.name
            found = payload(await mcp.call_tool("history_search", {"query": "hunter2"}))
            assert found["session"] == theirs.id and found["hits"]
            assert (
                "hunter2"
                in payload(await mcp.call_tool("history_expand", {"messageID": t["id"]}))["content"]
            )


def _swap(args: dict[str, Any], missing: str) -> dict[str, Any]:
    """``args`` with the id that names the other project's session or message replaced."""
    key = "session" if "session" in args else "messageID"
    return {key: missing}


async def _lines_until(stdout: asyncio.StreamReader, ids: set[Any]) -> dict[Any, dict[str, Any]]:
    """The replies read until every id in ``ids`` has one (bounded wait; a second reply to
    an id fails)."""
    seen: dict[Any, dict[str, Any]] = {}
    async with asyncio.timeout(60):
        while not ids <= set(seen):
            line = await stdout.readline()
            assert line, f"the server ended; replies so far: {seen}"
            msg = json.loads(line)
            if "id" in msg:
                assert msg["id"] not in seen, f"two replies: {seen[msg['id']]}, {msg}"
                seen[msg["id"]] = msg
    return seen


def _peak_kib(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1])
    raise AssertionError("no VmHWM")


async def test_mcp_answers_every_request_it_can_read(
    daemon: tuple[Client, Path, dict[str, str]], db: str | Path
) -> None:
    """Issue 32 item 6: a batch, a line without ``jsonrpc`` and a NUL in the method got no
    answer (the client waited forever), and a 50 MB line was read whole. Each request with a
    readable id gets an error under it; a line past ``mcp.maxLineBytes`` is refused with its
    id, and not held: the server's peak memory does not grow by the line's size."""
    _, sock, env = daemon
    proc = await spawn_mcp(server(sock, db, env).args, env)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        bad = [
            b'[{"jsonrpc":"2.0","id":5,"method":"ping"}]',
            b'{"id":6,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":7,"method":"pi\\u0000ng"}',
            b'{"jsonrpc":"2.0","id":"eight","method":"ping","params":{"x":"'
            + b"a" * (3 << 20)
            + b'"}}',
            b"not json at all",
        ]
        proc.stdin.write(b"\n".join(bad) + b"\n")
        await proc.stdin.drain()
        seen = await _lines_until(proc.stdout, {5, 6, 7, "eight", None})
        for msg_id in (5, 6, 7, "eight"):
            assert seen[msg_id]["error"]["code"] == -32600, seen[msg_id]
        assert "mcp.maxLineBytes" in seen["eight"]["error"]["message"]
        assert seen[None]["error"]["code"] == -32700

        before = _peak_kib(proc.pid)
        huge = b'{"jsonrpc":"2.0","id":11,"method":"ping","params":{"x":"'
        proc.stdin.write(huge)
        chunk = b"b" * (1 << 20)
        for _ in range(50):
            proc.stdin.write(chunk)
            await proc.stdin.drain()
        proc.stdin.write(b'"}}\n')
        proc.stdin.write(json.dumps({**MCP_INITIALIZE, "id": 12}).encode() + b"\n")
        await proc.stdin.drain()
        seen = await _lines_until(proc.stdout, {11, 12})
        assert seen[11]["error"]["code"] == -32600 and "result" in seen[12], seen
        grown = _peak_kib(proc.pid) - before
        assert grown < 16 * 1024, f"peak memory grew by {grown} KiB for a 50 MiB line"
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        proc.stdin.write(b'{"jsonrpc":"2.0","id":13,"method":"tools/list"}\n')
        await proc.stdin.drain()
        listed = (await _lines_until(proc.stdout, {13}))[13]
        assert {t["name"] for t in listed["result"]["tools"]} == TOOLS
    finally:
        proc.stdin.close()
        async with asyncio.timeout(30):
            await proc.wait()
    err = (await proc.stderr.read()).decode()
    assert "Traceback" not in err, err
    assert proc.returncode == 0, err


async def test_mcp_tools_say_what_they_do_and_what_they_return(
    db: str | Path, daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    """Issue 36 item 5, through the official SDK client: annotations on every tool, an
    ``outputSchema`` each ``structuredContent`` validates against (the SDK's own check), and
    ``context_status`` with the model's limits before and after ``compact_now`` (item 2)."""
    where = Path(tempfile.mkdtemp(prefix="scmcp", dir="/tmp"))
    sock = where / "d.sock"
    env = {k: v for k, v in os.environ.items() if k not in daemon_env or daemon_env[k]}
    env.update({k: v for k, v in daemon_env.items() if v is not None})
    config = tmp_path / "sidecar.json"
    # usable input 50,000 - 4,000 = 46,000
    config.write_text(
        json.dumps({"models": {"test/test-model": {"context": 50_000, "output": 4_000}}})
    )
    agent = await connect_shared(sock, db=db, config=config, idle_exit=30)
    try:
        sid = (await agent.create_session(title="t", directory=PROJECT)).id
        model = {"providerID": "test", "modelID": "test-model"}
        for turn in range(4):
            u = await put_message(agent, user_message(sid, model=model))
            await put_part(agent, text_part(sid, u["id"], f"Step {turn}: read the log"))
            a = await put_message(agent, assistant_message(sid, u["id"]))
            log = "\n".join(f"line {i} of log {turn}: all fine" for i in range(300))
            await put_part(agent, tool_part(sid, a["id"], "read", f"log{turn}.txt", log))
            a.update(finish="stop", tokens={"input": 3_000 * (turn + 1), "output": 100})
            await put_message(agent, a)
        async with stdio_client(server(sock, db, env)) as (read, write):
            async with ClientSession(read, write) as mcp:
                await mcp.initialize()
                tools = {t.name: t for t in (await mcp.list_tools()).tools}
                for name in ("history_search", "history_expand", "context_status"):
                    assert tools[name].annotations.read_only_hint is True, name
                hints = tools["compact_now"].annotations
                assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
                    False,
                    False,
                    False,
                )
                for t in tools.values():
                    assert t.output_schema is not None and t.output_schema["type"] == "object"

                async def call(name: str, args: dict[str, Any]) -> Any:
                    result = await mcp.call_tool(name, args)
                    assert not result.is_error, result.content
                    await mcp.validate_tool_result(name, result)  # raises when it does not fit
                    assert result.structured_content == json.loads(result.content[0].text)
                    return result.structured_content

                before = await call("context_status", {})
                assert before["modelLimitsKnown"] is True and before["usableInput"] == 46_000
                assert before["trigger"] == 46_000
                shares = {c["name"]: c["tokens"] for c in before["breakdown"]}
                assert sum(shares.values()) == before["windowTokens"]
                assert before["tokensUntilCompaction"] == 46_000 - before["windowTokens"]
                assert before["largest"][0]["tool"] == "read"
                found = await call("history_search", {"query": "log3.txt"})
                await call("history_expand", {"messageID": found["hits"][0]["messageID"]})
                done = await call("compact_now", {"session": sid})
                after = await call("context_status", {"session": sid})
                assert after["modelLimitsKnown"] is True
                assert (after["usableInput"], after["trigger"]) == (46_000, 46_000)
                assert after["windowTokens"] < before["windowTokens"]
                assert after["lastCompaction"]["messageID"] == done["summaryMessageID"]
                # session/overflow agrees: no call since the compaction, the model's budget.
                over = await agent.request("session/overflow", {"sessionID": sid})
                assert (over["count"], over["usable"], over["known"]) == (0, 46_000, True)
    finally:
        await agent.request("daemon/stop", {})
        await agent.close()
        shutil.rmtree(where, ignore_errors=True)
