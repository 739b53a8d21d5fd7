"""A small scriptable HTTP/1.1 server on 127.0.0.1 for the writer tests.

Real sockets, real HTTP: httpx talks to it exactly as to a provider. Each test queues replies;
every request pops one (or gets a 500 "unscripted" when the queue is empty). A reply either sends
a body with ``Content-Length`` or streams server-sent events as chunked frames, draining after
each one so that the client sees them one by one. The server records every request and notices
when a client closes a connection before a reply is finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Self

SSEItem = str | dict[str, Any] | tuple[str, dict[str, Any]] | float


@dataclass
class Reply:
    """One scripted response.

    ``events`` items: a dict (sent as ``data: <json>``), a ``(event_name, dict)`` pair (Anthropic
    style ``event:`` + ``data:``), a str (sent raw, e.g. ``"data: [DONE]\\n\\n"``), or a float
    (pause that many seconds mid-stream). ``delay`` pauses between events; ``stall`` pauses before
    the status line is sent.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    events: list[SSEItem] | None = None
    body: bytes | str | dict[str, Any] | None = None
    delay: float = 0.0
    stall: float = 0.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def sse_frame(item: str | dict[str, Any] | tuple[str, dict[str, Any]]) -> bytes:
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, tuple):
        name, data = item
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
    return f"data: {json.dumps(item)}\n\n".encode()


REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    408: "Timeout",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


class ScriptedServer:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Request] = []
        self.aborted = 0  # connections the client closed while a reply was still being sent
        self.connections = 0  # connections accepted
        self.client_gone = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    # -- connection handling -------------------------------------------------------------------

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        prefix = b""  # a byte of the next request the close-watcher may have read
        try:
            while True:
                request = await self._read_request(reader, prefix)
                if request is None:
                    return
                self.requests.append(request)
                reply = self.replies.pop(0) if self.replies else Reply(500, body="unscripted")
                ok, prefix = await self._respond(reply, reader, writer)
                if not ok:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:  # stop(): end quietly (asyncio logs cancelled handlers)
            return
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_request(self, reader: asyncio.StreamReader, prefix: bytes) -> Request | None:
        try:
            head = prefix + await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
            data = bytes(body)
        else:
            data = await reader.readexactly(int(headers.get("content-length", "0")))
        return Request(method, path, headers, data)

    async def _respond(
        self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[bool, bytes]:
        """Send ``reply``; False when the client went away before it was complete, and any byte
        of the next request that was read while watching for that."""
        sending = asyncio.ensure_future(self._send(reply, writer))
        watching = asyncio.ensure_future(reader.read(1))  # b"" = the client closed its side
        await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
        if not sending.done() and watching.result() == b"":
            sending.cancel()
            await asyncio.wait({sending})
            return self._gone(), b""
        try:
            await sending
        except ConnectionError:
            watching.cancel()
            await asyncio.wait({watching})
            return self._gone(), b""
        if not watching.done():
            watching.cancel()
            await asyncio.wait({watching})
        if watching.cancelled():
            return True, b""
        prefix = watching.result()
        return prefix != b"", prefix  # b"": the client closed after a complete reply

    def _gone(self) -> bool:
        self.aborted += 1
        self.client_gone.set()
        return False

    async def _send(self, reply: Reply, writer: asyncio.StreamWriter) -> None:
        if reply.stall:
            await asyncio.sleep(reply.stall)
        status = f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, 'Status')}\r\n"
        headers = dict(reply.headers)
        if reply.events is None:
            body = reply.body
            if isinstance(body, dict):
                body = json.dumps(body)
                headers.setdefault("content-type", "application/json")
            raw = body.encode() if isinstance(body, str) else (body or b"")
            headers["content-length"] = str(len(raw))
            writer.write(status.encode() + _headers(headers) + raw)
            await writer.drain()
            return
        headers.setdefault("content-type", "text/event-stream")
        headers["transfer-encoding"] = "chunked"
        headers["cache-control"] = "no-cache"
        writer.write(status.encode() + _headers(headers))
        await writer.drain()
        for i, item in enumerate(reply.events):
            if isinstance(item, float | int):
                await asyncio.sleep(float(item))
                continue
            if i and reply.delay:
                await asyncio.sleep(reply.delay)
            frame = sse_frame(item)
            writer.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _headers(headers: dict[str, str]) -> bytes:
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode() + b"\r\n"
