"""``compaction-sidecar mcp`` driven by the official MCP SDK's own client (``ClientSession``
over ``stdio_client``) against a real shared daemon, on each backend."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
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


def server(sock: Path, db: str | Path, env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "sidecar", "mcp", "--socket", str(sock), "--db", str(db)],
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
    old = await agent.create_session(title="older")
    await put_message(agent, user_message(old.id))
    session = await agent.create_session(title="current")
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
