"""The JSON-RPC client: request/response matching, notifications, daemon->client requests.

One reader task decodes frames and routes them: replies resolve the future of their request
id, notifications go to a per-method mailbox (every one is recorded; ``wait_for`` hands each
out once), requests from the daemon run their registered handler in a task and are answered,
and error replies with ``id: null`` (the daemon's answer to input it could not attribute to a
request) go to their own mailbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, Generic, TypeVar, cast, overload

import msgspec
from msgspec import UNSET, UnsetType

from sidecar.model.rpc import ContextFormat
from sidecar.protocol.codes import ErrorCode
from sidecar.protocol.envelopes import (
    JSONRPC,
    ErrorBody,
    Incoming,
    Notification,
    Request,
)
from sidecar.protocol.framing import Body, FrameError, StreamFrames, encode_frame
from sidecar_client._inbox import ConnectionClosed, Inbox, RpcError
from sidecar_client._methods import Methods, clean_params
from sidecar_client._transport import StreamTransport
from sidecar_client._window import ContextWindow

log = logging.getLogger("sidecar_client")

T = TypeVar("T")
Predicate = Callable[[Any], bool]
RequestHandler = Callable[[Any], Awaitable[Any]]


#: The client this library reports in ``initialize``.
CLIENT_NAME = "compaction-sidecar-client"
CLIENT_VERSION = "0.1.0"


_incoming = msgspec.json.Decoder(Incoming)
_error_body = msgspec.json.Decoder(ErrorBody)
_any = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


# -- calls -------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Call(Generic[T]):
    """An in-flight request. ``await call`` gives its result (or raises ``RpcError``).

    Cancelling the awaiting task, or ``call.cancel()``, sends ``$/cancelRequest`` and forgets
    the request; a late reply is ignored.
    """

    id: int
    method: str
    _client: Client = dataclasses.field(repr=False)
    _future: asyncio.Future[tuple[bool, Any]] = dataclasses.field(repr=False)
    _result_type: type[T] | None = dataclasses.field(repr=False)
    _timeout: float | None = dataclasses.field(repr=False)

    def done(self) -> bool:
        return self._future.done()

    def cancel(self) -> bool:
        """Ask the daemon to cancel this request and stop waiting for it locally."""
        if self._future.done():
            return False
        self._client._abandon(self.id)
        self._future.cancel()
        return True

    def __await__(self) -> Generator[Any, None, T]:
        return self._wait().__await__()

    async def _wait(self) -> T:
        try:
            async with asyncio.timeout(self._timeout):
                ok, payload = await asyncio.shield(self._future)
        except (asyncio.CancelledError, TimeoutError):
            self._client._abandon(self.id)
            self._future.cancel()
            raise
        if not ok:
            raise payload
        raw = cast(msgspec.Raw, payload)
        if self._result_type is None:
            return cast(T, _any.decode(raw))
        return msgspec.json.decode(raw, type=self._result_type)


# -- the client --------------------------------------------------------------------------------


class Client(Inbox, Methods):
    """A connection to one daemon (spawned over stdio, or a shared one over a socket)."""

    def __init__(self, transport: StreamTransport, *, default_timeout: float | None = 30.0) -> None:
        self._transport = transport
        self.default_timeout = default_timeout
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[tuple[bool, Any]]]] = {}
        Inbox.__init__(self)
        self._closed = asyncio.Event()
        #: Frames from the daemon that were not valid JSON-RPC (should stay empty).
        self.protocol_errors: list[str] = []
        #: The ``initialize`` result once ``initialize()`` has run.
        self.initialize_result: dict[str, Any] | None = None
        self._reader = asyncio.create_task(self._read_loop(), name="sidecar-client-reader")

    # -- properties ----------------------------------------------------------------------------

    @property
    def process(self) -> asyncio.subprocess.Process | None:
        """The daemon's process when this client spawned it (``None`` for sockets)."""
        return self._transport.process

    @property
    def address(self) -> str | None:
        return self._transport.address

    @property
    def closed(self) -> bool:
        """True once the daemon's side of the connection has ended."""
        return self._closed.is_set()

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered (nor abandoned)."""
        return len(self._pending)

    def stderr(self) -> str:
        """What the spawned daemon wrote to stderr so far."""
        return self._transport.stderr_text()

    # -- sending -------------------------------------------------------------------------------

    def _write(self, message: msgspec.Struct) -> None:
        if self._closed.is_set():
            raise ConnectionClosed("the connection to the daemon is closed")
        self._transport.write(encode_frame(_encoder.encode(message)))

    def send_raw(self, data: bytes) -> None:
        """Write bytes exactly as given (no framing added): for malformed-input tests."""
        if self._closed.is_set():
            raise ConnectionClosed("the connection to the daemon is closed")
        self._transport.write(data)

    def send_frame(self, body: bytes) -> None:
        """Write ``body`` in a correct frame, whatever it contains."""
        self.send_raw(encode_frame(body))

    def call(
        self,
        method: str,
        params: Any = None,
        result_type: type[T] | None = None,
        *,
        timeout: float | UnsetType | None = UNSET,
    ) -> Call[T]:
        """Send a request now; ``await`` the returned ``Call`` for its result.

        ``params=None`` leaves the ``params`` key out of the request.
        """
        request_id = next(self._ids)
        fut: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        self._write(Request(JSONRPC, request_id, method, UNSET if params is None else params))
        self._pending[request_id] = (method, fut)
        wait = self.default_timeout if timeout is UNSET else timeout
        return Call(request_id, method, self, fut, result_type, wait)

    def reserve_call(
        self,
        result_type: type[T] | None = None,
        *,
        method: str = "(raw)",
        timeout: float | UnsetType | None = UNSET,
    ) -> Call[T]:
        """Allocate a request id and wait for its reply without sending anything.

        For tests that write the request themselves (``send_frame``/``send_raw``) with
        ``call.id`` as its id, e.g. with a bad ``jsonrpc`` version: ``await call`` then gives
        the reply to that id.
        """
        request_id = next(self._ids)
        fut: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (method, fut)
        wait = self.default_timeout if timeout is UNSET else timeout
        return Call(request_id, method, self, fut, result_type, wait)

    @overload
    async def request(
        self,
        method: str,
        params: Any = None,
        result_type: None = None,
        *,
        timeout: float | UnsetType | None = ...,
    ) -> Any: ...

    @overload
    async def request(
        self,
        method: str,
        params: Any = ...,
        result_type: type[T] = ...,
        *,
        timeout: float | UnsetType | None = ...,
    ) -> T: ...

    async def request(
        self,
        method: str,
        params: Any = None,
        result_type: type[Any] | None = None,
        *,
        timeout: float | UnsetType | None = UNSET,
    ) -> Any:
        """Send a request and wait for its reply.

        Returns the result decoded into ``result_type`` (any msgspec-supported type), or as
        plain builtins without one. Raises ``RpcError`` for an error reply,
        ``ConnectionClosed`` if the daemon goes away first, ``TimeoutError`` after
        ``timeout`` seconds (default ``default_timeout``). Cancelling the awaiting task sends
        ``$/cancelRequest``.
        """
        call = self.call(method, params, result_type, timeout=timeout)
        with contextlib.suppress(ConnectionError):  # a dead daemon fails the call itself
            await self._transport.drain()
        return await call

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no reply)."""
        self._write(Notification(JSONRPC, method, UNSET if params is None else params))

    def cancel(self, request_id: int) -> None:
        """Send ``$/cancelRequest`` for ``request_id``; a local waiter is released too."""
        entry = self._pending.get(request_id)
        self._abandon(request_id)
        if entry is not None and not entry[1].done():
            entry[1].cancel()

    def _abandon(self, request_id: int) -> None:
        if self._pending.pop(request_id, None) is None:
            return
        if not self._closed.is_set():
            with contextlib.suppress(ConnectionError):
                self.notify("$/cancelRequest", {"id": request_id})

    # -- notifications and unsolicited errors --------------------------------------------------

    # -- reading -------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason: BaseException = ConnectionClosed("the daemon closed the connection")
        # A bad frame from the daemon is recorded and skipped, as the daemon does with ours.
        frames = StreamFrames(self._transport.reader, lambda e: self.protocol_errors.append(str(e)))
        try:
            while True:
                body = await frames.next()
                if body is None:
                    break
                self._dispatch(body)
        except FrameError as exc:
            self.protocol_errors.append(str(exc))
            reason = ConnectionClosed(f"unreadable stream from the daemon: {exc}")
        except (ConnectionError, OSError) as exc:
            reason = ConnectionClosed(f"connection lost: {exc}")
        except asyncio.CancelledError:
            reason = ConnectionClosed("the client was closed")
            raise
        finally:
            self._shut(reason)

    def _shut(self, reason: BaseException) -> None:
        self._close_reason = reason
        self._closed.set()
        pending, self._pending = self._pending, {}
        for method, fut in pending.values():
            if not fut.done():
                fut.set_result((False, ConnectionClosed(f"{method}: {reason}")))
        for box in self._mailboxes.values():
            box.close(reason)
        self._errors.close(reason)

    def _dispatch(self, body: Body) -> None:
        try:
            self._dispatch_frame(body)
        except RecursionError:  # JSON nested past what Python decodes: one bad frame
            self.protocol_errors.append("a frame from the daemon nests too deep to decode")

    def _dispatch_frame(self, body: Body) -> None:
        try:
            msg = _incoming.decode(body)
        except msgspec.DecodeError as exc:
            self.protocol_errors.append(f"undecodable frame from the daemon: {exc}")
            return
        if msg.method is not UNSET:
            params = _any.decode(msg.params) if len(msg.params) else None
            if msg.id is UNSET or msg.id is None:
                self._all_notifications.append((msg.method, params))
                self._mailbox(msg.method).put(params)
            else:
                self.requests_received.append((msg.method, params))
                task = asyncio.create_task(self._serve(msg.id, msg.method, params))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return
        if len(msg.error):
            try:
                body_ = _error_body.decode(msg.error)
                err = RpcError(body_.code, body_.message, body_.data)
            except msgspec.DecodeError as exc:
                self.protocol_errors.append(f"malformed error object: {exc}")
                err = RpcError(ErrorCode.INTERNAL_ERROR, "malformed error object from the daemon")
            if msg.id is UNSET or msg.id is None:
                self._errors.put(err)
                return
            entry = self._pending.pop(msg.id, None) if isinstance(msg.id, int) else None
            if entry is None:
                return  # the reply to an abandoned request
            err.method, err.request_id = entry[0], msg.id
            if not entry[1].done():
                entry[1].set_result((False, err))
            return
        if len(msg.result) and isinstance(msg.id, int):
            entry = self._pending.pop(msg.id, None)
            if entry is not None and not entry[1].done():
                entry[1].set_result((True, msg.result))
            return
        self.protocol_errors.append(f"frame is neither request, notification nor reply: {body!r}")

    # -- lifecycle -----------------------------------------------------------------------------

    async def initialize(
        self,
        capabilities: Mapping[str, Any] | None = None,
        initialization_options: Mapping[str, Any] | None = None,
        *,
        send_initialized: bool = True,
        auth_token: str | None = None,
    ) -> dict[str, Any]:
        """``initialize`` (then the ``initialized`` notification); returns the result.

        ``auth_token`` is the daemon's token, required on a TCP listener (its ``--token-file``).
        """
        params = clean_params(
            {
                "processId": os.getpid(),
                "authToken": auth_token,
                "clientInfo": {"name": CLIENT_NAME, "version": CLIENT_VERSION},
                "capabilities": dict(capabilities or {}),
                "initializationOptions": (
                    dict(initialization_options) if initialization_options is not None else None
                ),
            }
        )
        result = cast(dict[str, Any], await self.request("initialize", params))
        self.initialize_result = result
        if send_initialized:
            self.notify("initialized", {})
        return result

    async def shutdown_and_exit(self, timeout: float = 10.0) -> int | None:
        """``shutdown``, then ``exit``; waits for the process (or the socket) to end.

        Returns the daemon's exit code (``None`` for a socket connection).
        """
        await self.request("shutdown", timeout=timeout)
        self.notify("exit")
        return await self.wait_exit(timeout)

    async def wait_exit(self, timeout: float | None = 10.0) -> int | None:
        """Wait for the daemon process to exit (for sockets: for the connection to close)."""
        async with asyncio.timeout(timeout):
            await self._closed.wait()
            if self.process is None:
                return None
            code = await self.process.wait()
        await self._finish()
        return code

    async def kill(self) -> int | None:
        """SIGKILL the spawned daemon and wait for it; returns its exit code."""
        proc = self.process
        if proc is None:
            raise RuntimeError("kill() needs a daemon spawned by this client")
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        code = await proc.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self._finish()
        return code

    async def close(self, timeout: float = 10.0) -> int | None:
        """Close our end; a spawned daemon sees EOF and exits (killed after ``timeout``).

        Returns the exit code of a spawned daemon, ``None`` for sockets.
        """
        await self._transport.close_write()
        proc = self.process
        if proc is None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            await self._finish()
            return None
        try:
            async with asyncio.timeout(timeout):
                code = await proc.wait()
        except TimeoutError:
            log.warning("daemon did not exit %ss after EOF; killing it", timeout)
            return await self.kill()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self._finish()
        return code

    async def _finish(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._transport.release()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.process is not None and self.process.returncode is not None:
            await self._finish()
            return
        await self.close()

    # -- the generated wrappers' one way out, and what a table cannot say -------------------------

    async def _rpc(
        self, method: str, params: Any, result: Any, timeout: float | UnsetType | None
    ) -> Any:
        return await self.request(method, params, result, timeout=timeout)

    def window(self, session_id: str, format: ContextFormat = "parts") -> ContextWindow:
        """A ``ContextWindow`` of one session in one format."""
        return ContextWindow(self, session_id, format)
