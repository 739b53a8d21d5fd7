"""The MCP ``history_search`` tool has the daemon's bounds: a query the daemon refuses
(-32602) is a tool error naming the limit, and the server keeps serving; on each backend."""

from __future__ import annotations

from pathlib import Path

from mcp import ClientSession
from mcp.client.stdio import stdio_client
from sidecar_client import Client
from wire import put_message, put_part

from .builders import assistant_message, text_part, user_message
from .test_mcp import PROJECT, daemon, error_text, payload, server

__all__ = ["daemon"]  # the fixture, shared with test_mcp


async def test_hostile_queries_are_tool_errors(
    daemon: tuple[Client, Path, dict[str, str]], db: str | Path
) -> None:
    agent, sock, env = daemon
    sid = (await agent.create_session(title="bounds", directory=PROJECT)).id  # in scope
    u = await put_message(agent, user_message(sid))
    await put_part(agent, text_part(sid, u["id"], "fix the zebra bug"))
    await put_message(agent, assistant_message(sid, u["id"], finish="stop"))
    async with stdio_client(server(sock, db, env)) as (read, write):
        async with ClientSession(read, write) as mcp:
            await mcp.initialize()
            cases = {
                "fix " * 5000: "history.maxQueryChars",
                " ".join(["fix"] * 33): "history.maxQueryTerms",
                "NEAR(" * 5000: "history.maxQueryChars",
                "fi\x00x": "control character",
            }
            for query, named in cases.items():
                got = await mcp.call_tool("history_search", {"query": query, "session": sid})
                assert named in error_text(got), (query[:20], got)
            found = payload(
                await mcp.call_tool("history_search", {"query": "zebra OR", "session": sid})
            )
            assert found["hits"] == [] and found["partial"] is False
            found = payload(
                await mcp.call_tool("history_search", {"query": "zebra", "session": sid})
            )
            assert len(found["hits"]) == 1
