"""``compaction-sidecar mcp``: the daemon's history and compaction as Model Context Protocol
tools, on stdio, for any MCP-capable agent.

It is a client of the shared background daemon (joined, or started, as ``connect`` does, through
``sidecar_client.connect_shared``), so it sees the sessions the editor's frontend writes. Built
on the official ``mcp`` SDK's low-level server: the four tools below, each with a JSON input
schema and a description written for a model. A failure (no such session, the daemon cannot
be reached, bad arguments) is an MCP tool error (``isError``) with a message that says what to
do, never a protocol error or a traceback.

It sees its project only: the sessions whose ``directory`` is its working directory (or
``--directory``), unless started with ``--all-projects``. A session id outside that scope is
refused with the same words as one that does not exist, so a client learns nothing of other
projects. Its stdio transport is ``sidecar.mcp.stdio`` (lines bounded, bad requests answered).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec

from sidecar import __version__
from sidecar.model.base import Dense
from sidecar.model.rpc import (
    BreakdownCategory,
    BreakdownItem,
    CompactResult,
    HistoryExpandResult,
    HistorySearchResult,
)

log = logging.getLogger("sidecar.mcp")

NAME = "compaction-sidecar"

SEARCH_DESCRIPTION = (
    "Search the full earlier history of this coding session, including everything that "
    "context compaction removed from your window: old messages behind a summary, pruned tool "
    "outputs, your earlier reasoning and tool calls. Use it when the summary mentions "
    "something you need in detail (an exact error message, a file path, a command and its "
    "output, an identifier, a decision) or when you suspect you already did something. The "
    "query matches words and code terms as typed (test_parse_header, parseHeader, "
    "src/pkg/mod.py, ModuleNotFoundError); every term must match; put a phrase in double "
    "quotes to match it in order. Returns the best hits first, each with messageID and partID "
    "(pass them to history_expand to read the full content), the role, the tool name for tool "
    "calls, the time and a short snippet."
)
EXPAND_DESCRIPTION = (
    "Read the original, complete content of a message or one of its parts from the session's "
    "stored history, as found by history_search: full tool outputs (also those pruned from "
    "your context), full text and reasoning. Give the messageID (and the partID for one part) "
    "from a history_search hit. Long content is returned in pages: when nextOffset is not "
    "null, call again with offset set to it to read on."
)
STATUS_DESCRIPTION = (
    "Report how full the context window of the session is: tokens in the current window, the "
    "usable input budget of the model, how many tokens remain before the next automatic "
    "compaction, and when the last compaction happened with the size of its summary. Use it to "
    "decide whether to compact now or to keep large outputs out of the conversation."
)
COMPACT_DESCRIPTION = (
    "Compact the session's conversation now: older turns are replaced by a summary, which "
    "frees context space, while the full history stays searchable with history_search. Use it "
    "before starting a large new task, or when context_status shows little room left. "
    "instructions, if given, are appended to the summary writer's prompt (what to keep in "
    "detail, for example the open bugs and the files involved)."
)

SESSION_PROP = {
    "type": "string",
    "description": "Session id; default: the most recently active session of this project.",
}
ALL_SESSION_PROP = {
    "type": "string",
    "description": "Session id; default: the most recently active session of any project.",
}
SCOPE_NOTE = (
    " Sessions: those of this project only (the sessions whose working directory is this server's)."
)
ALL_SCOPE_NOTE = (
    " Sessions: every project's (this server was started with --all-projects), not only this "
    "project's."
)

TOOLS_SPEC: dict[str, tuple[str, dict[str, Any]]] = {
    "history_search": (
        SEARCH_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": 'Words, code terms or a "quoted phrase" to look for.',
                },
                "session": SESSION_PROP,
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "default": 10,
                    "description": "How many hits to return (default 10).",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    "history_expand": (
        EXPAND_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "messageID": {"type": "string", "description": "From a history_search hit."},
                "session": {
                    "type": "string",
                    "description": "The hit's sessionID (optional: the message is looked for in "
                    "every session in scope).",
                },
                "partID": {
                    "type": "string",
                    "description": "One part of the message; omit for the whole message.",
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Character offset to start at (a previous nextOffset).",
                },
            },
            "required": ["messageID"],
            "additionalProperties": False,
        },
    ),
    "context_status": (
        STATUS_DESCRIPTION,
        {
            "type": "object",
            "properties": {"session": SESSION_PROP},
            "additionalProperties": False,
        },
    ),
    "compact_now": (
        COMPACT_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "session": SESSION_PROP,
                "instructions": {
                    "type": "string",
                    "description": "Extra guidance appended to the summary writer's prompt.",
                },
            },
            "additionalProperties": False,
        },
    ),
}


def tool_specs(all_projects: bool) -> dict[str, tuple[str, dict[str, Any]]]:
    """The tools as listed: their descriptions say which sessions they see."""
    note, prop = (ALL_SCOPE_NOTE, ALL_SESSION_PROP) if all_projects else (SCOPE_NOTE, SESSION_PROP)
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, (description, schema) in TOOLS_SPEC.items():
        props = dict(schema["properties"])
        if name != "history_expand" and "session" in props:
            props["session"] = prop
        out[name] = (description + note, {**schema, "properties": props})
    return out


#: Characters of content one ``history_expand`` call returns.
EXPAND_PAGE = 20_000


class SearchOutput(HistorySearchResult, kw_only=True):
    """``history_search``: the session searched and the daemon's hits, best first."""

    session: str


class CompactOutput(CompactResult, kw_only=True):
    """``compact_now``: the session compacted and ``session/compact``'s result."""

    session: str


class LastCompaction(Dense, kw_only=True):
    message_id: str
    time: int | None
    summary_chars: int
    summary_tokens_estimate: int


class ContextStatus(Dense, kw_only=True):
    """``context_status``: the window the next model call gets, as ``session/breakdown``
    measures it. ``windowTokens`` is that window plus the frontend's overhead;
    ``tokensUntilCompaction`` how far it is from the ``trigger``; the limits are the model's
    (null, with ``modelLimitsKnown`` false, when the daemon does not know them)."""

    session: str
    window_tokens: int
    estimated_window_tokens: int
    overhead_tokens: int
    usable_input: int | None
    trigger: int | None
    prepare_at: int | None
    free: int | None
    tokens_until_compaction: int | None
    overflow: bool
    model_limits_known: bool
    breakdown: list[BreakdownCategory]
    largest: list[BreakdownItem]
    last_compaction: LastCompaction | None


def _output_schema(kind: type[Any]) -> dict[str, Any]:
    """A tool's ``outputSchema``: the JSON Schema of the Struct its ``structuredContent`` is
    encoded from, so the two cannot drift (an object at the root, its definitions beside)."""
    schema = msgspec.json.schema(kind)
    defs: dict[str, Any] = schema.pop("$defs", {})
    name = schema["$ref"].rsplit("/", 1)[1]
    return {**defs.pop(name), **({"$defs": defs} if defs else {})}


OUTPUTS: dict[str, type[Any]] = {
    "history_search": SearchOutput,
    "history_expand": HistoryExpandResult,
    "context_status": ContextStatus,
    "compact_now": CompactOutput,
}

#: What each tool does to the session, for clients that ask before calling (MCP
#: ``ToolAnnotations``): the three readers change nothing; compact_now adds a summary (undoable
#: with session/uncompact, so not destructive) and a second call compacts again.
ANNOTATIONS: dict[str, dict[str, bool]] = {
    "history_search": {"readOnlyHint": True, "openWorldHint": False},
    "history_expand": {"readOnlyHint": True, "openWorldHint": False},
    "context_status": {"readOnlyHint": True, "openWorldHint": False},
    "compact_now": {
        "readOnlyHint": False,
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": False,
    },
}


class ToolFailure(Exception):
    """A tool call that failed for a reason the model should read (an MCP tool error)."""


@dataclass
class Options:
    socket: Path | None = None
    db: str | None = None
    config: Path | None = None
    idle_exit: float | None = None
    log_level: str | None = None
    log_file: Path | None = None
    # The project whose sessions are visible (default: the working directory); None with
    # ``--all-projects``: every session.
    directory: str | None = None
    all_projects: bool = False

    def scope(self) -> str | None:
        if self.all_projects:
            return None
        return os.path.abspath(self.directory if self.directory is not None else os.getcwd())


class Tools:
    """The tools' logic over one daemon connection (joined on first use, again if lost)."""

    def __init__(self, options: Options) -> None:
        self._options = options
        self._scope = options.scope()
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def client(self) -> Any:
        from sidecar_client import connect_shared

        from sidecar.shared_daemon.sockets import NotOurs

        async with self._lock:
            if self._client is None or self._client.closed:
                o = self._options
                try:
                    self._client = await connect_shared(
                        o.socket,
                        db=o.db,
                        config=o.config,
                        idle_exit=o.idle_exit,
                        log_level=o.log_level,
                        log_file=o.log_file,
                    )
                except (ConnectionError, OSError, NotOurs) as exc:
                    raise ToolFailure(
                        f"cannot reach the compaction-sidecar daemon: {exc}"
                    ) from None
            return self._client

    async def close(self) -> None:
        if self._client is not None and not self._client.closed:
            await self._client.close()

    async def call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        run = self._table().get(name)
        if run is None:
            raise ToolFailure(f"unknown tool {name!r}; the tools are {', '.join(TOOLS_SPEC)}")
        _check_args(name, args)
        from sidecar_client import RpcError

        try:
            return await run(args)
        except RpcError as exc:
            raise ToolFailure(exc.message) from None
        except (ConnectionError, OSError) as exc:
            raise ToolFailure(f"lost the compaction-sidecar daemon: {exc}") from None

    def _table(self) -> dict[str, Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]]:
        return {
            "history_search": self.history_search,
            "history_expand": self.history_expand,
            "context_status": self.context_status,
            "compact_now": self.compact_now,
        }

    def _in_scope(self, directory: str | None) -> bool:
        if self._scope is None:
            return True
        if not directory:
            return False
        return directory == self._scope or os.path.abspath(directory) == self._scope

    async def sessions(self) -> list[str]:
        """The ids of the sessions in scope, the most recently active first."""
        client = await self.client()
        found: list[tuple[int, str]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 500}
            if cursor:
                params["cursor"] = cursor
            page = await client.request("session/list", params)
            found.extend(
                (int(s.get("time", {}).get("updated", 0)), str(s["id"]))
                for s in page["sessions"]
                if self._in_scope(s.get("directory"))
            )
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return [sid for _, sid in sorted(found, reverse=True)]

    def _not_here(self, what: str, given: str) -> ToolFailure:
        """The one answer for an id out of scope or unknown: it says nothing of which."""
        if self._scope is None:
            return ToolFailure(f"no {what} {given!r}")
        return ToolFailure(
            f"no {what} {given!r} in this project ({self._scope}); this server sees only the "
            "sessions of its project"
        )

    async def session(self, given: Any) -> str:
        """The session named (when in scope), or the most recently active one in scope."""
        if isinstance(given, str) and given:
            if self._scope is None:
                return given
            if given in await self.sessions():
                return given
            raise self._not_here("session", given)
        ids = await self.sessions()
        if not ids:
            if self._scope is None:
                raise ToolFailure("there is no session yet: the daemon has stored no conversation")
            raise ToolFailure(
                f"there is no session of this project ({self._scope}) yet: the daemon has "
                "stored no conversation whose directory is this one"
            )
        return ids[0]

    async def history_search(self, args: Mapping[str, Any]) -> dict[str, Any]:
        client = await self.client()
        sid = await self.session(args.get("session"))
        result = await client.request(
            "history/search",
            {"sessionID": sid, "query": args["query"], "limit": int(args.get("limit", 10))},
        )
        return {"session": sid, **result}

    async def history_expand(self, args: Mapping[str, Any]) -> dict[str, Any]:
        from sidecar_client import ErrorCode, RpcError

        client = await self.client()
        params: dict[str, Any] = {
            "messageID": args["messageID"],
            "offset": int(args.get("offset", 0)),
            "maxChars": EXPAND_PAGE,
        }
        if args.get("partID"):
            params["partID"] = args["partID"]
        if self._scope is None and not args.get("session"):
            where = ["*"]
        elif args.get("session"):
            where = [await self.session(args["session"])]
        else:
            where = await self.sessions()
        for sid in where:
            try:
                result: dict[str, Any] = await client.request(
                    "history/expand", {**params, "sessionID": sid}
                )
            except RpcError as exc:
                if exc.code == ErrorCode.UNKNOWN_MESSAGE and self._scope is not None:
                    continue  # not in this session: the next one in scope
                raise
            return result
        raise self._not_here("message", str(args["messageID"]))

    async def context_status(self, args: Mapping[str, Any]) -> dict[str, Any]:
        client = await self.client()
        sid = await self.session(args.get("session"))
        b = await client.breakdown(sid)
        window = await client.request("session/context", {"sessionID": sid, "fit": False})
        total = b.total_tokens
        status = ContextStatus(
            session=sid,
            window_tokens=total,
            estimated_window_tokens=b.estimated_tokens,
            overhead_tokens=b.overhead_tokens,
            usable_input=b.usable_input,
            trigger=b.trigger,
            prepare_at=b.prepare_at,
            free=b.free,
            tokens_until_compaction=None if b.trigger is None else max(0, b.trigger - total),
            overflow=b.usable_input is not None and total > b.usable_input,
            model_limits_known=b.model_limits_known,
            breakdown=b.categories,
            largest=b.largest[:5],
            last_compaction=_last_summary(window["messages"]),
        )
        return cast(dict[str, Any], msgspec.to_builtins(status))

    async def compact_now(self, args: Mapping[str, Any]) -> dict[str, Any]:
        client = await self.client()
        sid = await self.session(args.get("session"))
        params: dict[str, Any] = {"sessionID": sid}
        if args.get("instructions"):
            params["instructions"] = args["instructions"]
        result = await client.request("session/compact", params, timeout=None)
        if result.get("error"):
            raise ToolFailure(f"the compaction failed: {result['error']}")
        return {"session": sid, **result}


def _last_summary(messages: list[Any]) -> LastCompaction | None:
    """The summary at the head of the window, if the session was compacted."""
    for entry in messages:
        info = entry.get("info", {}) if isinstance(entry, dict) else {}
        if info.get("role") == "assistant" and info.get("summary"):
            chars = sum(
                len(p.get("text", "")) for p in entry.get("parts", []) if p.get("type") == "text"
            )
            return LastCompaction(
                message_id=str(info.get("id")),
                time=info.get("time", {}).get("completed") or info.get("time", {}).get("created"),
                summary_chars=chars,
                summary_tokens_estimate=(chars + 3) // 4,
            )
    return None


def _check_args(name: str, args: Mapping[str, Any]) -> None:
    """The input schema's rules, with messages naming the argument."""
    schema = TOOLS_SPEC[name][1]
    props: dict[str, Any] = schema["properties"]
    for key in schema.get("required", []):
        if key not in args:
            raise ToolFailure(f"{name}: the argument {key!r} is required")
    for key, value in args.items():
        spec = props.get(key)
        if spec is None:
            raise ToolFailure(f"{name}: unknown argument {key!r}; use {', '.join(props)}")
        if spec["type"] == "string":
            if not isinstance(value, str):
                raise ToolFailure(f"{name}: {key!r} must be a string")
            if len(value) < spec.get("minLength", 0) or (
                spec.get("minLength") and not value.strip()
            ):
                raise ToolFailure(f"{name}: {key!r} must not be empty")
        elif spec["type"] == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ToolFailure(f"{name}: {key!r} must be an integer")
            low, high = spec.get("minimum"), spec.get("maximum")
            if (low is not None and value < low) or (high is not None and value > high):
                raise ToolFailure(f"{name}: {key!r} must be between {low} and {high or 'any'}")


def build_server(tools: Tools, all_projects: bool = False) -> Any:
    """The low-level MCP server with the four tools."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    listed = [
        types.Tool(
            name=name,
            description=description,
            input_schema=schema,
            output_schema=_output_schema(OUTPUTS[name]),
            annotations=types.ToolAnnotations.model_validate(ANNOTATIONS[name]),
        )
        for name, (description, schema) in tool_specs(all_projects).items()
    ]

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await tools.call(params.name, params.arguments or {})
        except ToolFailure as exc:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(exc))], is_error=True
            )
        except Exception as exc:  # a bug: still one clear tool error, the server keeps going
            log.exception("tool %s failed", params.name)
            return types.CallToolResult(
                content=[
                    types.TextContent(
                        type="text", text=f"internal error in {params.name}: {type(exc).__name__}"
                    )
                ],
                is_error=True,
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, indent=1))],
            structured_content=result,
        )

    return Server(
        NAME,
        version=__version__,
        instructions=(
            "Tools over this coding session's stored history and context window: "
            "history_search finds what compaction removed; history_expand reads it in full."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(options: Options, max_line: int) -> None:
    from sidecar.mcp.stdio import bounded_stdio

    tools = Tools(options)
    server = build_server(tools, options.all_projects)
    try:
        async with bounded_stdio(max_line) as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await tools.close()


def main(options: Options) -> int:
    """Serve until the client's input ends. A socket or daemon of another user's, or a config
    file that cannot be read, is one line on stderr and exit 1, before anything is served."""
    from sidecar.model.config import ConfigError, load_files
    from sidecar.shared_daemon import paths
    from sidecar.shared_daemon.sockets import NotOurs, connect

    try:
        # A daemon already there must be this user's (its socket, directory and process).
        probe = connect(options.socket or paths.default_socket_path())
        if probe is not None:
            probe.close()
        max_line = load_files(options.config).config.mcp.max_line_bytes
        options.scope()  # a working directory that is gone is an error now, not at a tool call
    except (NotOurs, ConfigError, OSError) as exc:
        print(f"compaction-sidecar mcp: {exc}", file=sys.stderr)
        return 1
    asyncio.run(serve(options, max_line))
    return 0
