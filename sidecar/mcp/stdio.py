"""The MCP server's stdio transport: lines bounded, and every request it cannot take answered.

The SDK's own ``stdio_server`` reads a line whole however long it is, and a line it cannot
validate (a batch, no ``jsonrpc``) becomes an exception the server only logs, so the client
waits forever for its reply. This transport reads at most ``mcp.maxLineBytes`` of a line
(what is past it is read and dropped, never held) and answers what it refuses itself: a
JSON-RPC error under the request's id whenever the id can be read, ``null`` otherwise. What
it passes on is what the SDK's server can answer. Like the SDK's, it moves the process's
fds 0 and 1 out of the way while serving, so a stray write or read cannot touch the wire.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec

log = logging.getLogger("sidecar.mcp")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

READ_BYTES = 64 * 1024
# What of an overlong line is kept to read its id from (the id leads in practice).
_HEAD = 4096
_LEADING_ID = re.compile(
    rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,18}(?![\d.eE])|"[^"\\]{0,200}")'
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Overlong:
    """A line past the bound: its length and the head it started with."""

    __slots__ = ("head", "size")

    def __init__(self, head: bytes, size: int) -> None:
        self.head, self.size = head, size


class LineReader:
    """Lines of ``fd`` up to ``max_line`` bytes; a longer one is an ``Overlong``, read and
    dropped as it comes (at most ``max_line`` plus one read are held at any time)."""

    def __init__(self, fd: int, max_line: int) -> None:
        self._fd = fd
        self._max = max_line
        self._buf = bytearray()
        self._eof = False
        self._skipping: Overlong | None = None

    async def next(self) -> bytes | Overlong | None:
        """The next line (without its newline), or ``None`` at the end of input."""
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                if self._skipping is not None:
                    skipped, self._skipping = self._skipping, None
                    skipped.size += end
                    return skipped
                if len(line) > self._max:
                    return Overlong(line[:_HEAD], len(line))
                return line
            if self._skipping is not None:
                self._skipping.size += len(self._buf)
                self._buf.clear()
            elif len(self._buf) > self._max:
                self._skipping = Overlong(bytes(self._buf[:_HEAD]), len(self._buf))
                self._buf.clear()
            if self._eof:
                if self._skipping is not None:
                    skipped, self._skipping = self._skipping, None
                    return skipped
                if self._buf:
                    line = bytes(self._buf)
                    self._buf.clear()
                    return line
                return None
            data = await anyio.to_thread.run_sync(
                os.read, self._fd, READ_BYTES, abandon_on_cancel=True
            )
            if data:
                self._buf += data
            else:
                self._eof = True


def _readable_id(value: Any) -> int | str | None:
    """A JSON-RPC id as a client would recognise it (not a bool, a float or a container)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def _is_request(doc: dict[str, Any]) -> bool:
    """A request (it expects a reply): an id and a method, or an id and nothing else (a
    broken request; a reply has a result or an error)."""
    return "id" in doc and ("method" in doc or not ("result" in doc or "error" in doc))


def _ids_of_unreadable(line: bytes) -> list[int | str | None]:
    """The request ids of a line msgspec refuses that a lenient reader still reads (bytes that
    are not UTF-8, a lone surrogate escape), so the refusal goes to them; else ``[None]``."""
    try:
        doc = json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return [None]
    items = doc if isinstance(doc, list) else [doc]
    found = [_readable_id(i.get("id")) for i in items if isinstance(i, dict) and _is_request(i)]
    ids = [i for i in found if i is not None and not (isinstance(i, str) and "\ufffd" in i)]
    return list(ids) or [None]


def _error(msg_id: int | str | None, code: int, message: str) -> bytes:
    return msgspec.json.encode(
        {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
    )


def refusals(line: bytes | Overlong, max_line: int) -> tuple[list[bytes], Any]:
    """What to answer for a line, and the message to pass on (``None``: nothing).

    Refused here: not JSON, a batch (MCP has none), an envelope that is not JSON-RPC 2.0, a
    method with control characters, anything the SDK's message types reject. Answered only
    when it is a request; a bad notification or response is logged.
    """
    import mcp_types as types
    from pydantic import ValidationError

    if isinstance(line, Overlong):
        found = _LEADING_ID.match(line.head)
        msg_id = msgspec.json.decode(found.group(1)) if found else None
        message = f"the line is over {max_line} bytes (config mcp.maxLineBytes); not read"
        log.warning("refused a line of %d bytes (mcp.maxLineBytes %d)", line.size, max_line)
        return [_error(msg_id, INVALID_REQUEST, message)], None
    if not line.strip():
        return [], None
    try:
        doc = msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        if isinstance(exc, UnicodeDecodeError):
            message = f"invalid UTF-8 at byte {exc.start}"
        else:
            message = f"invalid JSON: {exc}"
        return [_error(i, PARSE_ERROR, message) for i in _ids_of_unreadable(line)], None
    if isinstance(doc, list):
        answers = [
            _error(_readable_id(item["id"]), INVALID_REQUEST, "batches are not supported")
            for item in doc
            if isinstance(item, dict)
            and _is_request(item)
            and _readable_id(item.get("id")) is not None
        ]
        return answers or [_error(None, INVALID_REQUEST, "batches are not supported")], None
    if not isinstance(doc, dict):
        return [_error(None, INVALID_REQUEST, "a message is a JSON object")], None
    msg_id = _readable_id(doc.get("id"))
    is_request = _is_request(doc)
    problem: str | None = None
    if doc.get("jsonrpc") != "2.0":
        problem = 'invalid request: "jsonrpc" must be "2.0"'
    elif "method" in doc and not isinstance(doc["method"], str):
        problem = 'invalid request: "method" must be a string'
    elif "method" in doc and _CONTROL.search(doc["method"]):
        problem = 'invalid request: "method" holds a control character'
    elif "id" in doc and msg_id is None:
        problem = 'invalid request: "id" must be a string or an integer'
    if problem is None:
        try:
            return [], types.jsonrpc_message_adapter.validate_python(doc, by_name=False)
        except ValidationError as exc:
            problem = f"invalid message: {exc.errors()[0].get('msg', 'not a JSON-RPC message')}"
    if is_request:
        return [_error(msg_id, INVALID_REQUEST, problem)], None
    log.warning("ignored a message: %s", problem)
    return [], None


class _Out:
    """The wire out: whole lines, one writer at a time."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = anyio.Lock()

    async def line(self, data: bytes) -> None:
        async with self._lock:
            view = memoryview(data + b"\n")
            while view:
                written = await anyio.to_thread.run_sync(os.write, self._fd, view)
                view = view[written:]


@asynccontextmanager
async def bounded_stdio(max_line: int) -> AsyncIterator[tuple[Any, Any]]:
    """``stdio_server``'s streams, over a bounded reader that answers what it refuses."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    out = _Out(wire_out)
    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    write_send, write_recv = anyio.create_memory_object_stream[Any](0)

    # Requests handed to the server and not answered yet: at the end of input the server is
    # told only once each has its reply (it drops what is in flight when its input closes).
    pending: set[int | str] = set()
    settled = anyio.Event()

    async def reader() -> None:
        nonlocal settled
        lines = LineReader(wire_in, max_line)
        async with read_send:
            while (line := await lines.next()) is not None:
                try:
                    answers, message = refusals(line, max_line)
                except Exception:  # a bug: logged, and the line still gets an answer
                    log.exception("a line could not be read")
                    answers, message = [_error(None, -32603, "internal error reading a line")], None
                for answer in answers:
                    await out.line(answer)
                if message is not None:
                    if isinstance(message, types.JSONRPCRequest):
                        pending.add(message.id)
                    await read_send.send(SessionMessage(message))
            while pending:
                settled = anyio.Event()
                await settled.wait()

    async def writer() -> None:
        async with write_recv:
            async for session_message in write_recv:
                message = session_message.message
                text = message.model_dump_json(by_alias=True, exclude_unset=True)
                await out.line(text.encode())
                root = getattr(message, "root", message)
                if isinstance(root, types.JSONRPCResponse | types.JSONRPCError):
                    pending.discard(root.id)
                    settled.set()

    try:
        async with anyio.create_task_group() as tg:
            reading = anyio.CancelScope()

            async def read_until_done() -> None:
                with reading:
                    await reader()

            tg.start_soon(read_until_done)
            tg.start_soon(writer)
            try:
                yield read_recv, write_send
            finally:
                # The server is done: what it sent is written, what was not read stays so.
                write_send.close()
                reading.cancel()
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)
