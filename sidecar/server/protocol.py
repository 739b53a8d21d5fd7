"""pygls' JSON-RPC dispatcher with a msgspec byte path, and the one module that knows pygls.

pygls keeps what it does well — handler dispatch, one task per request, ``$/cancelRequest``,
response futures for daemon→client requests, exception→error mapping. This subclass replaces
its codec: frames are decoded with msgspec straight into each method's params Struct, and
replies are encoded with msgspec. It also closes stock pygls' silent gaps, so every request
gets exactly one reply: a request without ``params``, params that fail validation (-32602 with
the field's path), an unserialisable result (-32603), requests before ``initialize`` (-32002)
and after ``shutdown`` (-32600).

The pygls fence: no other module of ``sidecar/`` imports pygls; they use what this one
exposes (``new_protocol``, ``SidecarProtocol.register``/``cancel_requests``/``in_flight``,
``RpcError``, ``invalid_params``, ``internal_error``). What it relies on beyond pygls' public
API (``tests/server/test_pygls_fence.py`` checks each against the installed pygls):

- overrides three private methods of ``JsonRPCProtocol``: ``_execute_handler`` (our
  coroutines skip pygls' introspection), ``_send_response`` and ``_send_data`` (replies and
  requests encoded with msgspec);
- calls four: ``_get_handler``, ``_handle_request`` and ``_handle_notification``
  (dispatch without ``handle_message``'s Protocol checks) and ``_handle_cancel_notification``;
- uses three attributes its ``__init__`` sets: ``_request_futures`` (in-flight requests,
  both ways), ``_result_types`` (dropped once a reply is sent) and ``_converter`` (lsprotocol
  payloads).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import attrs
import msgspec
from lsprotocol.types import ResponseError, ResponseErrorMessage
from msgspec import UNSET
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.protocol import JsonRPCProtocol, default_converter
from pygls.protocol.json_rpc import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
)
from pygls.server import JsonRPCServer

from sidecar.errors import ErrorCode
from sidecar.model.config import DEFAULT_MAX_DEPTH
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
from sidecar.protocol.framing import FrameError, frame_header
from sidecar.protocol.shared import Buffer, PieceEncoder, Shared

#: The error a handler's failure becomes (its code and message are the reply's).
RpcError = JsonRpcException


def invalid_params(message: str) -> RpcError:
    return JsonRpcInvalidParams(message)


def internal_error(message: str) -> RpcError:
    return JsonRpcInternalError(message)


log = logging.getLogger("sidecar.rpc")

# Methods allowed before ``initialize`` has been answered.
_PRE_INIT = frozenset({"initialize", "exit", "$/cancelRequest"})


_envelope_decoder = msgspec.json.Decoder(Incoming)
_any_decoder = msgspec.json.Decoder()
_cancel_decoder = msgspec.json.Decoder(CancelParams)
_EMPTY = b"{}"
# ``_decode_params``: the frame has been answered (params may be anything, None included).
_REFUSED: Any = object()
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


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """What the protocol needs to know about a method before dispatching it.

    ``writes``: the method changes stored or connection state, so later requests of the same
    connection must not overtake it (PROTOCOL.md, "Order").
    """

    decoder: msgspec.json.Decoder[Any]
    writes: bool = False


class SidecarProtocol(JsonRPCProtocol):
    """One per connection. ``specs`` maps method names to params decoders."""

    def __init__(self, server: JsonRPCServer, converter: Any) -> None:
        super().__init__(server, converter)
        self.specs: dict[str, MethodSpec] = {}
        self.initialized = False
        self.shutting_down = False
        self.on_exit: Callable[[], None] = lambda: None
        self.starting = Starting()  # replaced by the App-wide one (``Connection``)
        self.max_depth: Callable[[], int] = lambda: DEFAULT_MAX_DEPTH
        # Bytes sent and still unread by the peer (in the transport's buffer after a flush)
        # past which it is a stalled reader: ``on_stalled`` drops the connection so the
        # daemon's memory stays bounded. ``None``: no limit. Below ``low_water`` again,
        # ``on_drained`` lets a reader held for backpressure go on.
        self.max_outgoing: Callable[[], int | None] = lambda: None
        self.max_reply: Callable[[], int | None] = lambda: None
        self.on_stalled: Callable[[], None] = lambda: None
        self.on_drained: Callable[[], None] = lambda: None
        # Encodes to buffers: a ``Shared`` value (a large part echoed in a reply and in
        # notifications) is referenced by each frame, not copied into it.
        self._encoder = PieceEncoder()
        self._out: list[Buffer] = []
        self._out_bytes = 0
        # Large frames (``_LARGE`` bytes or more) in the batch being queued, as (offset in
        # the batch, length, is a reply), and those handed to the transport and maybe still
        # unread, as (start, end, is a reply) in ``_sent`` bytes since the connection began.
        self._large_out: list[tuple[int, int, bool]] = []
        self._large: deque[tuple[int, int, bool]] = deque()
        self._sent = 0
        # What is sent but not yet handed to the transport: a body of ``_UNCOPIED`` bytes or
        # more, and what queued behind it. The transport gets it ``FEED_BYTES`` at a time as
        # the peer reads (``feed``): given at once, it would copy all the rest of the body
        # into its own buffer, a second copy of a large reply while the peer reads it.
        self._held_out: deque[memoryview] = deque()
        self._held_out_bytes = 0
        self._hold_at = _NO_LIMIT  # set at each flush (``backlog_over_hold``)
        self._flush_scheduled = False
        # Order (PROTOCOL.md, "Order"): a write that could not queue its store op at once (an async
        # handler) is the *barrier*; requests that arrive behind it wait in ``_held`` and start
        # in arrival order once it has answered. Deferred writes queue their op in arrival
        # order and block nothing; ``_unacked`` counts those not yet answered, and a read
        # waits for them, so it sees this connection's own writes.
        self._barrier: asyncio.Future[Any] | None = None
        self._held: deque[tuple[int | str, str, Any]] = deque()
        self._unacked = 0
        self._acked: asyncio.Future[None] | None = None
        self._initializing = False  # an ``initialize`` was read; what follows waits for it
        self.ended = False  # ``exit`` was read

    # -- the fence's public face ------------------------------------------------------------

    def register(self, method: str, handler: Callable[..., Any]) -> None:
        """Serve ``method`` with ``handler`` (as ``dispatch.bind`` made it)."""
        self.fm.feature(method)(handler)

    def in_flight(self) -> int:
        """Requests with a task or a pending reply, in both directions."""
        return len(self._request_futures)

    def cancel_requests(self) -> None:
        """The connection is gone: cancel every request task and every request to the peer."""
        for fut in list(self._request_futures.values()):
            fut.cancel()

    # -- inbound ---------------------------------------------------------------------------

    def handle_frame(self, body: bytes) -> None:
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

    def _handle_frame(self, body: bytes) -> None:
        """Parse the envelope, then route it: a reply, or a request or notification that the
        connection's lifecycle admits, with its params decoded."""
        if self.ended:
            return
        env = self._parse_envelope(body)
        if env is None:
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
        params = self._decode_params(env.method, env.params, msg_id, is_request)
        if params is _REFUSED:
            return
        # Straight to the request/notification paths: pygls' ``handle_message`` would first
        # test the message against runtime-checkable Protocols (~20 us each).
        if msg_id is not None:
            if self._barrier is not None or self._held:
                self._held.append((msg_id, env.method, params))
            else:
                self._start_request(msg_id, env.method, params)
        else:
            contextvars.copy_context().run(self._handle_notification, env.method, params)

    def _parse_envelope(self, body: bytes) -> Incoming | None:
        """The frame's envelope, or None once the frame has been answered with its error
        (too deep, not UTF-8, not JSON, not JSON-RPC 2.0)."""
        limit = self.max_depth()
        if (deep := too_deep(body, limit)) is not None:
            self.send_error(deep.request_id, ErrorCode.INVALID_PARAMS, deep.message(limit))
            return None
        if first_bad_utf8(body) is not None:
            self.send_error(
                _recover_id(body), ErrorCode.PARSE_ERROR, f"invalid UTF-8 in {bad_utf8_field(body)}"
            )
            return None
        try:
            env = _envelope_decoder.decode(body)
        except msgspec.ValidationError as exc:
            self.send_error(None, ErrorCode.INVALID_REQUEST, f"invalid JSON-RPC message: {exc}")
            return None
        except msgspec.DecodeError as exc:
            self.send_error(_recover_id(body), ErrorCode.PARSE_ERROR, f"invalid JSON: {exc}")
            return None
        if env.jsonrpc != JSONRPC:
            msg_id = None if env.id is UNSET else env.id
            self.send_error(
                msg_id, ErrorCode.INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"'
            )
            return None
        return env

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
    ) -> Any:
        """The method's params Struct, decoded in place; ``_REFUSED`` once an unknown method
        or invalid params has been answered (a notification's only logged)."""
        spec = self.specs.get(method)
        if spec is None:
            if is_request:
                self.send_error(msg_id, ErrorCode.METHOD_NOT_FOUND, f"unknown method: {method}")
            else:
                log.info("ignoring notification for unknown method %r", method)
            return _REFUSED
        data: bytes | msgspec.Raw = raw
        if not len(raw) or (len(raw) == 4 and bytes(raw) == b"null"):
            data = _EMPTY
        try:
            return spec.decoder.decode(data)
        except msgspec.ValidationError as exc:
            if is_request:
                self.send_error(
                    msg_id, ErrorCode.INVALID_PARAMS, f"invalid params for {method}: {exc}"
                )
            else:
                log.warning("invalid params for notification %s: %s", method, exc)
            return _REFUSED

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

    def _start_request(self, msg_id: int | str, method: str, params: Any) -> None:
        """Run a request's handler as a task registered for ``$/cancelRequest``.

        Our own handlers (``sidecar_coroutine``) reply from inside their task, so a reply
        leaves in the same write as the notifications its handler published; anything else
        takes pygls' path, which replies from a done-callback one loop iteration later.
        Deferred handlers (``sidecar_deferred``, the ingest path) get no task: they are called
        now and answer through a callback, usually the store's commit; they cannot be
        cancelled (LSP lets a server answer a cancelled request normally).
        """
        if not self.initialized and method not in _PRE_INIT:
            # Held behind an ``initialize`` that failed.
            self.send_error(
                msg_id, ErrorCode.SERVER_NOT_INITIALIZED, f"{method}: server not initialized"
            )
            return
        handler: Any = self._get_handler(method)
        writes = self.specs[method].writes
        if getattr(handler, "sidecar_deferred", False):
            self._unacked += 1
            # A deferred handler that could not queue its write at once returns the future
            # that will: the barrier for what follows.
            later = handler(params, functools.partial(self._reply_deferred, msg_id))
            if later is not None:
                self._set_barrier(later)
            return
        if not getattr(handler, "sidecar_coroutine", False):
            contextvars.copy_context().run(self._handle_request, msg_id, method, params)
            return
        self.starting.count += 1
        task: asyncio.Future[None] = asyncio.ensure_future(
            self._run_request(msg_id, handler, params, writes)
        )
        self._request_futures[msg_id] = task  # type: ignore[assignment]  # pygls types these as concurrent futures
        task.add_done_callback(functools.partial(self._request_done, msg_id))
        if writes:
            self._set_barrier(task)

    def _reply_deferred(self, msg_id: int | str, result: Any, exc: BaseException | None) -> None:
        """A deferred handler's reply: a ``Done`` (``sidecar.store.backend``) bound to
        ``msg_id``, the last step of the ingest path's one completion shape."""
        self._write_acked()
        self._reply(msg_id, result, exc)

    async def _run_request(
        self, msg_id: int | str, handler: Any, params: Any, writes: bool = False
    ) -> None:
        self.starting.count -= 1
        try:
            if self._unacked and not writes:
                await self._own_writes_acked()
            result = await handler(params)
        except asyncio.CancelledError:  # ``$/cancelRequest`` or the connection closing
            self._reply_cancelled(msg_id)
            return
        except JsonRpcException as exc:  # ``routes.bind`` maps every handler error to one
            self._reply(msg_id, None, exc)
            return
        finally:
            self._request_futures.pop(msg_id, None)
        self._reply(msg_id, result, None)

    def _reply(self, msg_id: int | str, result: Any, exc: BaseException | None) -> None:
        """The one reply of a request of ours (a deferred handler's ``done`` lands here).
        ``dispatch`` maps every handler error to an ``RpcError``; anything else is a bug."""
        if exc is None:
            self._send_result(msg_id, result)
            return
        if not isinstance(exc, RpcError):
            log.error("request %s failed", msg_id, exc_info=exc)
            exc = internal_error(f"internal error: {type(exc).__name__}")
        self._send_response(msg_id, error=exc.to_response_error())

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

    def flush_now(self) -> None:
        """Write what is queued now, held output included (closing: the loop may not run the
        scheduled flush, and the transport drains only what it was given)."""
        if self._out:
            self._flush()
        try:
            self.feed(everything=True)
        except (BrokenPipeError, ConnectionError, RuntimeError):
            self._drop_out()

    def drop_held(self) -> None:
        """The connection is gone: what waited behind a barrier will never run, and what was
        held for the peer will never be read."""
        self._held.clear()
        self._drop_out()

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

    # -- outbound --------------------------------------------------------------------------

    def send_error(self, msg_id: int | str | None, code: int, message: str) -> None:
        self._write(ErrorResponse(JSONRPC, msg_id, ErrorBody(code, message)))

    def notify(self, method: str, params: Any | None = None) -> None:
        self._write(Notification(JSONRPC, method, self._plain(params)))

    # -- the hot path, without pygls' generic wrappers ---------------------------------------

    def _execute_handler(
        self,
        msg_id: Any,
        handler: Any,
        callback: Any,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Our handlers are known coroutines: skip pygls' per-call introspection."""
        if getattr(handler, "sidecar_coroutine", False):
            future = asyncio.ensure_future(handler(*(args or ())))
            self._request_futures[msg_id] = future
            future.add_done_callback(callback)
            return
        super()._execute_handler(msg_id, handler, callback, args, kwargs)

    def _send_response(
        self, msg_id: Any, result: Any | None = None, error: ResponseError | None = None
    ) -> None:
        if error is not None:
            self._send_data(ResponseErrorMessage(id=msg_id, error=error))
            return
        self._result_types.pop(msg_id, None)
        self._send_result(msg_id, result)

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
        size = _size(body)
        if cap is not None and size > cap:
            self.send_error(
                msg_id,
                ErrorCode.TOO_LARGE,
                f"the reply is {size} bytes, over the limit of {cap} (config "
                "server.maxReplyBytes): ask for less (session/messages limit, partLimit, "
                "cursor; session/context after session/compact)",
            )
            return
        self._write_bytes(body, reply=True)

    def _send_data(self, data: Any) -> None:
        if isinstance(data, JsonRPCResponseMessage):
            self._send_result(data.id, data.result)
        elif isinstance(data, ResponseErrorMessage):
            err = data.error
            assert err is not None
            # Tracebacks are not sent: they are for the daemon's log, not for clients.
            extra = err.data
            if isinstance(extra, dict) and "traceback" in extra:
                extra = None
            self._write(ErrorResponse(JSONRPC, data.id, ErrorBody(err.code, err.message, extra)))
        elif isinstance(data, JsonRPCRequestMessage):
            self._write(Request(JSONRPC, data.id, data.method, self._plain(data.params)))
        elif isinstance(data, JsonRPCNotification):
            self._write(Notification(JSONRPC, data.method, self._plain(data.params)))
        else:  # pragma: no cover - pygls sends nothing else
            log.error("cannot send %r", type(data))

    def _plain(self, value: Any) -> Any:
        """lsprotocol (attrs) payloads go through pygls' converter for their wire names."""
        if isinstance(value, _MSGSPEC_NATIVE) or not attrs.has(type(value)):
            return value
        return self._converter.unstructure(value)

    def _write(self, message: msgspec.Struct) -> None:
        try:
            body = self._encoder.encode(message)
        except (TypeError, ValueError, NotImplementedError, msgspec.EncodeError):
            log.exception("could not encode an outgoing message")
            return
        self._write_bytes(body)

    def _write_bytes(self, body: list[Buffer], *, reply: bool = False) -> None:
        """Queue a frame whose body is ``body``'s buffers; what is queued in one loop
        iteration goes out in one write, except that a buffer of ``_UNCOPIED`` bytes or more
        is written on its own: joined to the rest, it would be one more copy of a reply beside
        its result and its body (and a ``Shared`` one, a copy per frame that carries it)."""
        if self.writer is None:
            return
        header = frame_header(_size(body))
        size = len(header) + _size(body)
        if size >= _LARGE:
            self._large_out.append((self._out_bytes, size, reply))
        run: list[Buffer] = [header]
        for piece in body:
            if len(piece) >= _UNCOPIED:
                if run:
                    self._out.append(run[0] if len(run) == 1 else b"".join(run))
                    run = []
                self._out.append(piece)
            else:
                run.append(piece)
        if run:
            self._out.append(run[0] if len(run) == 1 else b"".join(run))
        self._out_bytes += size
        if not self._flush_scheduled:
            self._flush_scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self._flush)
            except RuntimeError:  # no running loop (unit tests): write at once
                self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        writer, out = self.writer, self._out
        if writer is None or not out:
            return
        base = self._sent
        if self._large_out:
            for offset, length, reply in self._large_out:
                self._large.append((base + offset, base + offset + length, reply))
            self._large_out = []
        self._sent = base + self._out_bytes
        self._out, self._out_bytes = [], 0
        held = self._held_out
        try:
            for piece in _coalesced(out):
                if held or len(piece) >= _UNCOPIED:
                    held.append(memoryview(piece))
                    self._held_out_bytes += len(piece)
                else:
                    writer.write(piece)  # type: ignore[arg-type]  # any bytes-like object
            if held:
                self.feed()
        except (BrokenPipeError, ConnectionError, RuntimeError):
            log.info("peer is gone; dropping outgoing messages")
            self._drop_out()
            return
        cap = self.max_outgoing()
        unread = self._unread(writer)
        large = self._large
        if large:  # forget the large frames the peer has read
            done = self._sent - unread
            while large and large[0][1] <= done:
                large.popleft()
        if cap is not None and unread > cap and unread - self._being_read(unread) > cap:
            # What one loop iteration queues is bounded by what the peer sent in it; what
            # piles up unread across iterations is a stalled reader.
            log.warning(
                "a client stopped reading: %d bytes wait for it (limit %d, config "
                "server.maxOutgoingBytes); disconnecting it",
                unread,
                cap,
            )
            self.writer = None  # nothing more is queued for a peer that is being dropped
            self._drop_out()
            self.on_stalled()
            return
        low = self.low_water()
        # Until the next flush, more than this queued here means the peer is held.
        self._hold_at = 2 * low - unread
        if unread <= low:
            self.on_drained()

    def feed(self, everything: bool = False) -> None:
        """Hand the transport what is held here (``_held_out``) while it holds at most
        ``FEED_BYTES`` unread, so it pauses us and ``feed`` is called again once the peer has
        read (``resume_writing``); ``everything``: all of it now (closing)."""
        writer, held = self.writer, self._held_out
        while held and writer is not None and (everything or _buffered(writer) <= FEED_BYTES):
            piece = held[0]
            if len(piece) <= FEED_BYTES or everything:
                held.popleft()
            else:
                held[0], piece = piece[FEED_BYTES:], piece[:FEED_BYTES]
            self._held_out_bytes -= len(piece)
            # asyncio's transports take any bytes-like object (pygls types ``write`` as bytes).
            writer.write(piece)  # type: ignore[arg-type]

    def _drop_out(self) -> None:
        self._held_out.clear()
        self._held_out_bytes = 0

    def _unread(self, writer: Any) -> int:
        """Bytes sent that the peer has not read: the transport's and those held here."""
        return _buffered(writer) + self._held_out_bytes

    def _being_read(self, unread: int) -> int:
        """The unread bytes the stalled-reader rule does not count: the rest of the frame the
        peer is reading now, and of every large reply. A reply is at most
        ``server.maxReplyBytes`` and answers the peer's own request, whose next requests wait
        unread meanwhile (backpressure); so a client slowly reading a large reply is never
        taken for one that stopped reading. Notifications it does not read still count."""
        done = self._sent - unread  # what the peer has read so far
        exempt = 0
        for start, end, reply in self._large:
            if end <= done:
                continue
            if reply or start <= done:
                exempt += end - max(start, done)
        return exempt

    def backlog_over_hold(self) -> bool:
        """Should the peer's next frame wait (backpressure)? Asked before every frame, so the
        common answer is two attribute reads; the threshold is set at each flush from the
        transport's backlog, and checked against the transport again before a "yes"."""
        if self._out_bytes <= self._hold_at:
            return False
        # The threshold may be stale (the transport drained since the flush): ask it.
        unread = self._unread(self.writer) if self.writer is not None else 0
        self._hold_at = 2 * self.low_water() - unread
        return self._out_bytes > self._hold_at

    def low_water(self) -> int:
        """Below this backlog a peer held for backpressure is read again."""
        cap = self.max_outgoing()
        return _NO_LIMIT if cap is None else cap // 8


_NO_LIMIT = 1 << 62
# Frames at least this large are tracked for the stalled-reader rule (``_being_read``); a
# smaller one the peer is in the middle of is within any ``server.maxOutgoingBytes``.
_LARGE = 4096


# A body this large is written after its header instead of being copied into one frame, and
# handed to the transport ``FEED_BYTES`` at a time as the peer reads it (``feed``).
_UNCOPIED = 1 << 20
FEED_BYTES = 1 << 20


def _size(body: list[Buffer]) -> int:
    return sum(len(piece) for piece in body)


def _coalesced(out: list[Buffer]) -> list[Buffer]:
    """``out`` in as few writes as possible, none copying a body of ``_UNCOPIED`` bytes."""
    pieces: list[Buffer] = []
    run: list[Buffer] = []
    for piece in out:
        if len(piece) < _UNCOPIED:
            run.append(piece)
            continue
        if run:
            pieces.append(run[0] if len(run) == 1 else b"".join(run))
            run = []
        pieces.append(piece)
    if run:
        pieces.append(run[0] if len(run) == 1 else b"".join(run))
    return pieces


def _buffered(writer: Any) -> int:
    """Bytes the transport holds for a peer that has not read them yet."""
    size = getattr(writer, "get_write_buffer_size", None)
    return int(size()) if size is not None else 0


#: A ``\\uD800``-``\\uDFFF`` escape: JSON's grammar allows one alone, msgspec refuses it.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _recover_id(body: bytes) -> int | str | None:
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


def new_protocol() -> SidecarProtocol:
    """A connection's protocol, on its own pygls server object (one per connection)."""
    server = JsonRPCServer(protocol_cls=SidecarProtocol, converter_factory=_converter)
    protocol: SidecarProtocol = server.protocol  # type: ignore[assignment]
    return protocol
