"""The JSON-RPC protocol of one connection, with a msgspec byte path, and the one module that
knows pygls.

Dispatch reads the method table (``sidecar.server.dispatch.routes``, built once per process
from ``sidecar.protocol.methods``): a frame is decoded with msgspec straight into its row's
params Struct, its row's ordering class says what it waits for, and its handler is called with
the connection's ``Context``. Every request gets exactly one reply: a request without
``params``, params that fail validation (-32602 with the field's path), an unserialisable
result (-32603), requests before ``initialize`` (-32002) and after ``shutdown`` (-32600).
Outgoing bytes go through the connection's ``Outbox`` (``sidecar.server.outbox``).

pygls keeps what it does well: response futures for daemon→client requests and
``$/cancelRequest`` of a request's task. The pygls fence: no other module of ``sidecar/``
imports pygls. What it relies on beyond pygls' public API
(``tests/server/test_pygls_fence.py`` checks each against the installed pygls):

- overrides one private method of ``JsonRPCProtocol``: ``_send_data`` (requests to the
  client, encoded with msgspec);
- calls one: ``_handle_cancel_notification``;
- uses three attributes its ``__init__`` sets: ``_request_futures`` (in-flight requests,
  both ways), ``_result_types`` (dropped once a reply is sent) and ``_converter`` (lsprotocol
  payloads).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import attrs
import msgspec
from lsprotocol.types import ResponseError, ResponseErrorMessage
from msgspec import UNSET
from pygls.protocol import JsonRPCProtocol, default_converter
from pygls.protocol.json_rpc import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
)
from pygls.server import JsonRPCServer

from sidecar.errors import ErrorCode, SidecarError
from sidecar.model.buffers import Shared
from sidecar.model.config import DEFAULT_MAX_DEPTH
from sidecar.model.cpu import charged
from sidecar.model.jsonguard import bad_utf8_field, first_bad_utf8, too_deep
from sidecar.model.rpc import CancelParams
from sidecar.protocol.envelopes import (
    JSONRPC,
    ErrorBody,
    ErrorResponse,
    Incoming,
    Notification,
    Request,
    Response,
)
from sidecar.protocol.framing import Body, FrameError
from sidecar.protocol.shared import PieceEncoder
from sidecar.server.context import Context
from sidecar.server.dispatch import Route, call_ingest, call_notification, routes, rpc_error
from sidecar.server.outbox import Outbox, size_of

log = logging.getLogger("sidecar.rpc")

# Methods allowed before ``initialize`` has been answered.
_PRE_INIT = frozenset({"initialize", "exit", "$/cancelRequest"})


_envelope_decoder = msgspec.json.Decoder(Incoming)
_any_decoder = msgspec.json.Decoder()
_cancel_decoder = msgspec.json.Decoder(CancelParams)
_EMPTY = b"{}"
# Payload types msgspec encodes as they are (the common case: skip the attrs check).
_MSGSPEC_NATIVE = (msgspec.Struct, msgspec.Raw, Shared, dict, list, str, int, float, type(None))


class Starting:
    """Requests dispatched but whose handler has not taken its first step (all connections).

    While any is waiting, a write submitted now may yet be joined by theirs in one group
    commit; when none is, the store may commit it at once (``GroupCommit.may_join``).
    """

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class SidecarProtocol(JsonRPCProtocol):
    """One per connection: its lifecycle, the order of its requests, their replies.

    ``routes`` is the process's one mapping of served methods (``dispatch.routes``), read at
    each frame; ``context`` is what the handlers get (the ``Connection``).
    """

    def __init__(self, server: JsonRPCServer, converter: Any) -> None:
        super().__init__(server, converter)
        self.routes: Mapping[str, Route] = {}
        self.context: Context = None  # type: ignore[assignment]  # set by ``new_protocol``
        self.initialized = False
        self.shutting_down = False
        self.on_exit: Callable[[], None] = lambda: None
        self.starting = Starting()  # replaced by the App-wide one (``Connection``)
        self.max_depth: Callable[[], int] = lambda: DEFAULT_MAX_DEPTH
        self.max_reply: Callable[[], int | None] = lambda: None
        # Encodes to buffers: a ``Shared`` value (a large part echoed in a reply and in
        # notifications) is referenced by each frame, not copied into it.
        self._encoder = PieceEncoder()
        self.out = Outbox()
        self._notes: set[asyncio.Future[None]] = set()  # notification handlers running
        # Order (PROTOCOL.md, "Order"): a write that could not queue its store op at once (an async
        # handler) is the *barrier*; requests that arrive behind it wait in ``_held`` and start
        # in arrival order once it has answered. Deferred writes queue their op in arrival
        # order and block nothing; ``_unacked`` counts those not yet answered, and a read
        # waits for them, so it sees this connection's own writes.
        self._barrier: asyncio.Future[Any] | None = None
        self._held: deque[tuple[int | str, Route, Any]] = deque()
        self._unacked = 0
        self._acked: asyncio.Future[None] | None = None
        self._initializing = False  # an ``initialize`` was read; what follows waits for it
        self.ended = False  # ``exit`` was read

    # -- the fence's public face ------------------------------------------------------------

    def set_writer(self, writer: Any, include_headers: bool = True) -> None:
        """Where frames go: the ``Outbox``'s transport."""
        super().set_writer(writer, include_headers)
        self.out.writer = writer

    def in_flight(self) -> int:
        """Requests with a task or a pending reply, in both directions."""
        return len(self._request_futures)

    def cancel_requests(self) -> None:
        """The connection is gone: cancel every request task and every request to the peer."""
        for fut in list(self._request_futures.values()):
            fut.cancel()

    # -- inbound ---------------------------------------------------------------------------

    @charged("ingest")
    def handle_frame(self, body: Body) -> None:
        """Decode one frame and dispatch it; never raises (a raise would close the pipe)."""
        try:
            self._handle_frame(body)
        except Exception:  # pragma: no cover - a bug here must not end the connection
            log.exception("unexpected error while handling a frame")
            self.send_error(
                _recover_id(body), ErrorCode.INTERNAL_ERROR, "internal error reading a frame"
            )

    def frame_error(self, err: FrameError) -> None:
        self.send_error(None, err.code, err.message)

    def _handle_frame(self, body: Body) -> None:
        """Parse the envelope, then route it: a reply, or a request or notification that the
        connection's lifecycle admits, with its params decoded."""
        if self.ended:
            return
        env = parse_envelope(body, self.max_depth())
        if isinstance(env, Refusal):
            self.send_error(*env)
            return
        if env.method is UNSET:
            self._handle_reply(env)
            return
        msg_id = None if env.id is UNSET else env.id
        is_request = env.id is not UNSET
        if is_request and msg_id is None:
            self.send_error(
                None, ErrorCode.INVALID_REQUEST, 'invalid request: "id" must not be null'
            )
            return
        if not self._admit(env.method, msg_id, is_request):
            return
        if env.method == "$/cancelRequest":
            self._cancel(env.params)
            return
        decoded = self._decode_params(env.method, env.params, msg_id, is_request)
        if decoded is None:
            return
        route, params = decoded
        if msg_id is None:
            self._notified(route, params)
        elif self._barrier is not None or self._held:
            self._held.append((msg_id, route, params))
        else:
            self._start_request(msg_id, route, params)

    def _admit(self, method: str, msg_id: int | str | None, is_request: bool) -> bool:
        """The lifecycle's say on a request or notification: not before ``initialize``, not
        after ``shutdown``; ``exit`` ends reading. False once it has been dealt with."""
        if not self.initialized and not self._initializing and method not in _PRE_INIT:
            if is_request:
                self.send_error(
                    msg_id, ErrorCode.SERVER_NOT_INITIALIZED, f"{method}: server not initialized"
                )
            return False
        if method == "initialize" and is_request:
            # Requests pipelined behind it wait for it (it is a barrier), then are checked.
            self._initializing = True
        if self.shutting_down and method != "exit":
            if is_request:
                self.send_error(
                    msg_id, ErrorCode.INVALID_REQUEST, f"{method}: server is shutting down"
                )
            return False
        if method == "exit":
            self.ended = True  # what follows ``exit`` is not read
            self.on_exit()
            return False
        if method == "shutdown" and is_request:
            # Set now, not in the handler task, so an ``exit`` right behind it sees it.
            self.shutting_down = True
        return True

    def _decode_params(
        self, method: str, raw: msgspec.Raw, msg_id: int | str | None, is_request: bool
    ) -> tuple[Route, Any] | None:
        """The method's row and its params Struct, decoded in place; None once an unknown
        method or invalid params has been answered (a notification's only logged)."""
        route = self.routes.get(method)
        if route is None:
            if is_request:
                self.send_error(msg_id, ErrorCode.METHOD_NOT_FOUND, f"unknown method: {method}")
            else:
                log.info("ignoring notification for unknown method %r", method)
            return None
        data: bytes | msgspec.Raw = raw
        if not len(raw) or (len(raw) == 4 and bytes(raw) == b"null"):
            data = _EMPTY
        try:
            return route, route.decoder.decode(data)
        except msgspec.ValidationError as exc:
            if is_request:
                self.send_error(
                    msg_id, ErrorCode.INVALID_PARAMS, f"invalid params for {method}: {exc}"
                )
            else:
                log.warning("invalid params for notification %s: %s", method, exc)
            return None

    def _release_held(self, _done: object = None) -> None:
        """The barrier answered: start what waited behind it, in order, up to the next one."""
        self._barrier = None
        while self._held and self._barrier is None:
            self._start_request(*self._held.popleft())

    def _set_barrier(self, future: asyncio.Future[Any]) -> None:
        if not future.done():
            self._barrier = future
            future.add_done_callback(self._release_held)

    def _write_acked(self) -> None:
        self._unacked -= 1
        if not self._unacked and self._acked is not None:
            if not self._acked.done():
                self._acked.set_result(None)
            self._acked = None

    async def _own_writes_acked(self) -> None:
        """Wait until every deferred write this connection sent earlier has been answered."""
        while self._unacked:
            if self._acked is None:
                self._acked = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._acked)

    def _start_request(self, msg_id: int | str, route: Route, params: Any) -> None:
        """Call a request's handler: an ``ingest`` one now, answering through a callback
        (usually the store's commit), with no task and no cancelling (LSP lets a server answer
        a cancelled request normally); any other in a task registered for
        ``$/cancelRequest``, which replies from inside the task, so a reply leaves in the same
        write as the notifications its handler published."""
        if not self.initialized and route.method not in _PRE_INIT:
            # Held behind an ``initialize`` that failed.
            self.send_error(
                msg_id, ErrorCode.SERVER_NOT_INITIALIZED, f"{route.method}: server not initialized"
            )
            return
        if route.ingest:
            self._unacked += 1
            # An ingest handler that could not queue its write at once returns the future
            # that will: the barrier for what follows.
            reply = functools.partial(self._reply_deferred, msg_id)
            later = call_ingest(route, self.context, params, reply)
            if later is not None:
                self._set_barrier(later)
            return
        self.starting.count += 1
        task: asyncio.Future[None] = asyncio.ensure_future(self._run_request(msg_id, route, params))
        self._request_futures[msg_id] = task  # type: ignore[assignment]  # pygls types these as concurrent futures
        task.add_done_callback(functools.partial(self._request_done, msg_id))
        if route.writes:
            self._set_barrier(task)

    def _reply_deferred(self, msg_id: int | str, result: Any, exc: BaseException | None) -> None:
        """An ingest handler's reply: a ``Done`` (``sidecar.store.backend``) bound to
        ``msg_id``, the last step of the ingest path's one completion shape."""
        self._write_acked()
        self._reply(msg_id, result, exc)

    async def _run_request(self, msg_id: int | str, route: Route, params: Any) -> None:
        self.starting.count -= 1
        try:
            if self._unacked and not route.writes:
                await self._own_writes_acked()
            result = await route.fn(self.context, params)
        except asyncio.CancelledError:  # ``$/cancelRequest`` or the connection closing
            self._reply_cancelled(msg_id)
            return
        except Exception as exc:
            self._reply(msg_id, None, rpc_error(route.method, exc, self.context))
            return
        finally:
            self._request_futures.pop(msg_id, None)
        self._reply(msg_id, result, None)

    def _notified(self, route: Route, params: Any) -> None:
        """A notification's handler, in a task of its own (nothing waits for it)."""
        task = asyncio.ensure_future(call_notification(route, self.context, params))
        self._notes.add(task)
        task.add_done_callback(self._notes.discard)

    def _reply(self, msg_id: int | str, result: Any, exc: BaseException | None) -> None:
        """The one reply of a request. ``dispatch`` maps every handler error to a
        ``SidecarError`` with its code; anything else is a bug, answered by its type only."""
        if exc is None:
            self._send_result(msg_id, result)
            return
        if not isinstance(exc, SidecarError):
            log.error("request %s failed", msg_id, exc_info=exc)
            exc = SidecarError(f"internal error: {type(exc).__name__}", ErrorCode.INTERNAL_ERROR)
        self.send_error(msg_id, exc.code, str(exc))

    def _request_done(self, msg_id: int | str, task: asyncio.Future[None]) -> None:
        # Only a task cancelled before its first step ends here without having replied.
        if task.cancelled():
            self.starting.count -= 1
            self._request_futures.pop(msg_id, None)
            self._reply_cancelled(msg_id)

    def _reply_cancelled(self, msg_id: int | str) -> None:
        self.send_error(msg_id, ErrorCode.REQUEST_CANCELLED, f"request {msg_id!r} was cancelled")

    def _cancel(self, raw: msgspec.Raw) -> None:
        try:
            params = _cancel_decoder.decode(raw if len(raw) else b"{}")
        except msgspec.ValidationError as exc:
            log.warning("invalid $/cancelRequest: %s", exc)
            return
        # pygls cancels the handler's task; the task's own reply is then -32800. A deferred
        # request has no task and will be answered normally (LSP allows that).
        if params.id in self._request_futures:
            self._handle_cancel_notification(params.id)
            return
        for held in self._held:
            if held[0] == params.id:
                self._held.remove(held)
                self._reply_cancelled(params.id)
                return

    async def answered(self) -> None:
        """Wait until every request read so far has been answered (in flight, deferred, or
        held behind a barrier)."""
        while True:
            # Incoming requests run as asyncio tasks; pygls keeps our own requests to the
            # client (``concurrent.futures``) in the same table.
            waits: list[asyncio.Future[Any]] = [
                f  # type: ignore[misc]  # pygls types these as concurrent futures
                for f in self._request_futures.values()
                if isinstance(f, asyncio.Future) and not f.done()
            ]
            if self._barrier is not None:
                waits.append(self._barrier)
            if waits:
                await asyncio.wait(waits)
            elif self._unacked:
                await self._own_writes_acked()
            elif self._held:  # pragma: no cover - a held request always has a barrier
                self._release_held()
            else:
                return

    def fail_outgoing_requests(self, exc: Exception) -> None:
        """Our requests to the peer that it can no longer answer fail with ``exc``."""
        for msg_id, fut in list(self._request_futures.items()):
            if not isinstance(fut, asyncio.Future) and not fut.done():
                self._request_futures.pop(msg_id, None)
                fut.set_exception(exc)

    def drop_held(self) -> None:
        """The connection is gone: what waited behind a barrier will never run, and what was
        held for the peer will never be read."""
        self._held.clear()
        self.out.drop()

    def _handle_reply(self, env: Incoming) -> None:
        if env.id is UNSET or env.id is None or (not len(env.result) and not len(env.error)):
            # A frame with an id but no method, result or error is a broken request: its
            # one reply carries that id.
            msg_id = None if env.id is UNSET else env.id
            self.send_error(
                msg_id, ErrorCode.INVALID_REQUEST, "invalid request: no method, result or error"
            )
            return
        if not self._asked(env.id):
            # Only our own requests to the peer take a reply: an id of the peer's own
            # requests (a task of ours, not a response future) or of nothing is not one.
            log.warning("ignoring a response to id %r: the daemon sent no such request", env.id)
            return
        self._result_types.pop(env.id, None)  # pygls' note of the result type: decoded here
        if len(env.error):
            try:
                err = _any_decoder.decode(env.error)
                error = ResponseError(code=int(err["code"]), message=str(err.get("message", "")))
            except (msgspec.DecodeError, KeyError, TypeError, ValueError):
                error = ResponseError(
                    code=ErrorCode.INTERNAL_ERROR, message="malformed error response"
                )
            self.handle_message(ResponseErrorMessage(id=env.id, error=error))  # type: ignore[arg-type]  # pygls' Protocol types miss its own error message
            return
        result = _any_decoder.decode(env.result)
        self.handle_message(JsonRPCResponseMessage(env.id, JSONRPC, result))

    def _asked(self, msg_id: int | str) -> bool:
        """Is ``msg_id`` a request of ours still waiting for the peer's reply? The table holds
        the peer's requests too (asyncio tasks); ours are ``concurrent.futures`` futures."""
        fut = self._request_futures.get(msg_id)
        return fut is not None and not isinstance(fut, asyncio.Future)

    def send_error(self, msg_id: int | str | None, code: int, message: str) -> None:
        self._write(ErrorResponse(JSONRPC, msg_id, ErrorBody(code, message)))

    def notify(self, method: str, params: Any | None = None) -> None:
        self._write(Notification(JSONRPC, method, self._plain(params)))

    # -- outbound ---------------------------------------------------------------------------

    @charged("encode")
    def _send_result(self, msg_id: Any, result: Any) -> None:
        try:
            body = self._encoder.encode(Response(JSONRPC, msg_id, self._plain(result)))
        except (TypeError, ValueError, NotImplementedError, msgspec.EncodeError) as exc:
            log.error("result of request %s could not be serialised: %s", msg_id, exc)
            self.send_error(
                msg_id, ErrorCode.INTERNAL_ERROR, f"result could not be serialised: {exc}"
            )
            return
        cap = self.max_reply()
        size = size_of(body)
        if cap is not None and size > cap:
            self.send_error(
                msg_id,
                ErrorCode.TOO_LARGE,
                f"the reply is {size} bytes, over the limit of {cap} (config "
                "server.maxReplyBytes): ask for less (session/messages limit, partLimit, "
                "cursor; session/context after session/compact)",
            )
            return
        self.out.write(body, reply=True, length=size)

    def _send_data(self, data: Any) -> None:
        """What pygls sends itself: our requests to the client (``send_request_async``)."""
        if isinstance(data, JsonRPCRequestMessage):
            self._write(Request(JSONRPC, data.id, data.method, self._plain(data.params)))
        elif isinstance(data, JsonRPCNotification):
            self._write(Notification(JSONRPC, data.method, self._plain(data.params)))
        else:  # pragma: no cover - pygls sends nothing else: replies are ours
            log.error("cannot send %r", type(data))

    def _plain(self, value: Any) -> Any:
        """lsprotocol (attrs) payloads go through pygls' converter for their wire names."""
        if isinstance(value, _MSGSPEC_NATIVE) or not attrs.has(type(value)):
            return value
        return self._converter.unstructure(value)

    @charged("encode")
    def _write(self, message: msgspec.Struct) -> None:
        try:
            body = self._encoder.encode(message)
        except (TypeError, ValueError, NotImplementedError, msgspec.EncodeError):
            log.exception("could not encode an outgoing message")
            return
        self.out.write(body)


class Refusal(NamedTuple):
    """The error reply to a frame that is no JSON-RPC 2.0 message."""

    msg_id: int | str | None
    code: int
    message: str


def parse_envelope(body: Body, limit: int) -> Incoming | Refusal:
    """The frame's envelope, or why it is refused (too deep, not UTF-8, not JSON, not
    JSON-RPC 2.0)."""
    if (deep := too_deep(body, limit)) is not None:
        return Refusal(deep.request_id, ErrorCode.INVALID_PARAMS, deep.message(limit))
    if first_bad_utf8(body) is not None:
        return Refusal(
            _recover_id(body), ErrorCode.PARSE_ERROR, f"invalid UTF-8 in {bad_utf8_field(body)}"
        )
    try:
        env = _envelope_decoder.decode(body)
    except msgspec.ValidationError as exc:
        return Refusal(None, ErrorCode.INVALID_REQUEST, f"invalid JSON-RPC message: {exc}")
    except msgspec.DecodeError as exc:
        return Refusal(_recover_id(body), ErrorCode.PARSE_ERROR, f"invalid JSON: {exc}")
    if env.jsonrpc != JSONRPC:
        msg_id = None if env.id is UNSET else env.id
        return Refusal(
            msg_id, ErrorCode.INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"'
        )
    return env


#: A ``\\uD800``-``\\uDFFF`` escape: JSON's grammar allows one alone, msgspec refuses it.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _recover_id(body: Body) -> int | str | None:
    """The request id of a frame that failed a check, when it can still be read (a lone
    surrogate escape elsewhere in the frame does not hide it)."""
    text = _SURROGATE_ESCAPE.sub(rb"\\ufffd", body).decode("utf-8", "replace")
    try:
        env = _envelope_decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    if env.id is UNSET or isinstance(env.id, bool):
        return None
    # An id that itself held the bad bytes is not the client's id any more.
    return None if isinstance(env.id, str) and "\ufffd" in env.id else env.id


@functools.cache
def _converter() -> Any:
    return default_converter()  # type: ignore[no-untyped-call]


def new_protocol(context: Context, served: Mapping[str, Route] | None = None) -> SidecarProtocol:
    """A connection's protocol, on its own pygls server object (one per connection), serving
    ``served`` (default: the method table's ``routes()``, shared by every connection) with
    ``context`` as its handlers' ``Context``."""
    server = JsonRPCServer(protocol_cls=SidecarProtocol, converter_factory=_converter)
    protocol: SidecarProtocol = server.protocol  # type: ignore[assignment]
    protocol.context = context
    protocol.routes = routes() if served is None else served
    return protocol
