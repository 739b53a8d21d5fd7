"""What the daemon sends a client unasked: notifications, error replies with ``id: null``,
and requests the client answers (``Inbox``, a base of ``Client``); and the client's errors."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import msgspec

from sidecar.protocol.codes import ErrorCode
from sidecar.protocol.envelopes import JSONRPC, ErrorBody, ErrorResponse, Response

log = logging.getLogger("sidecar_client")

Predicate = Callable[[Any], bool]
RequestHandler = Callable[[Any], Awaitable[Any]]
_encoder = msgspec.json.Encoder()


class RpcError(Exception):
    """An error reply: ``code``, ``message`` and optional ``data``, as the daemon sent them.

    ``method`` and ``request_id`` name the request it answers (both ``None`` for an error
    with ``id: null``).
    """

    def __init__(
        self,
        code: int,
        message: str,
        data: Any = None,
        *,
        method: str | None = None,
        request_id: int | str | None = None,
    ) -> None:
        super().__init__(code, message, data)
        self.code = code
        self.message = message
        self.data = data
        self.method = method
        self.request_id = request_id

    def __str__(self) -> str:
        where = f"{self.method}: " if self.method else ""
        return f"{where}[{self.code}] {self.message}"


class ConnectionClosed(ConnectionError):
    """The daemon closed the connection (or exited) before answering."""


# -- mailboxes ---------------------------------------------------------------------------------


class _Mailbox:
    """Everything received under one key, plus the not-yet-consumed part for ``get``."""

    def __init__(self) -> None:
        self.received: list[Any] = []
        self._unconsumed: list[Any] = []
        self._waiters: list[tuple[Predicate | None, asyncio.Future[Any]]] = []
        self._closed: BaseException | None = None

    def put(self, item: Any) -> None:
        self.received.append(item)
        for i, (predicate, fut) in enumerate(self._waiters):
            if fut.done():
                continue
            try:
                matches = predicate is None or predicate(item)
            except Exception as exc:  # a broken predicate fails its own waiter only
                fut.set_exception(exc)
                continue
            if matches:
                del self._waiters[i]
                fut.set_result(item)
                return
        self._unconsumed.append(item)

    def close(self, exc: BaseException) -> None:
        self._closed = exc
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(exc)
        self._waiters.clear()

    async def get(self, predicate: Predicate | None, timeout: float | None, what: str) -> Any:
        for i, item in enumerate(self._unconsumed):
            if predicate is None or predicate(item):
                del self._unconsumed[i]
                return item
        if self._closed is not None:
            raise ConnectionClosed(f"connection closed while waiting for {what}")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiter = (predicate, fut)
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            seen = len(self.received)
            raise TimeoutError(
                f"no matching {what} within {timeout}s ({seen} received in total)"
            ) from None
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)


class Inbox:
    """Every notification (kept, and handed out once by ``wait_for``), every ``id: null``
    error, and the handlers of daemon->client requests. ``_write`` sends a reply."""

    def __init__(self) -> None:
        self._mailboxes: dict[str, _Mailbox] = {}
        self._errors = _Mailbox()
        self._all_notifications: list[tuple[str, Any]] = []
        self._handlers: dict[str, RequestHandler] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._close_reason: BaseException | None = None
        #: Requests the daemon sent us, in arrival order: ``(method, params)``.
        self.requests_received: list[tuple[str, Any]] = []

    def _write(self, message: msgspec.Struct) -> None:
        raise NotImplementedError

    def _mailbox(self, method: str) -> _Mailbox:
        box = self._mailboxes.get(method)
        if box is None:
            box = self._mailboxes[method] = _Mailbox()
            if self._close_reason is not None:
                box.close(self._close_reason)
        return box

    async def wait_for(
        self, method: str, predicate: Predicate | None = None, timeout: float | None = 10.0
    ) -> Any:
        """The params of the first ``method`` notification matching ``predicate`` that no
        earlier ``wait_for`` has returned, including ones that arrived before this call."""
        return await self._mailbox(method).get(predicate, timeout, f"{method!r} notification")

    def notifications(self, method: str) -> list[Any]:
        """Params of every ``method`` notification received so far (consumed or not)."""
        box = self._mailboxes.get(method)
        return list(box.received) if box is not None else []

    def all_notifications(self) -> list[tuple[str, Any]]:
        """Every notification received so far as ``(method, params)``, in arrival order."""
        return list(self._all_notifications)

    async def wait_for_error(
        self, predicate: Callable[[RpcError], bool] | None = None, timeout: float | None = 10.0
    ) -> RpcError:
        """The next unconsumed error reply with ``id: null`` matching ``predicate``."""
        return cast(
            RpcError, await self._errors.get(predicate, timeout, "error reply with id null")
        )

    def unsolicited_errors(self) -> list[RpcError]:
        """Every error reply with ``id: null`` received so far."""
        return list(self._errors.received)

    # -- daemon -> client requests -------------------------------------------------------------

    def on_request(self, method: str, handler: RequestHandler | None) -> None:
        """Answer daemon requests for ``method`` with ``await handler(params)``.

        The return value is sent as the result; ``RpcError`` is sent with its own code, any
        other exception as -32603. ``None`` removes the handler (the daemon then gets -32601).
        """
        if handler is None:
            self._handlers.pop(method, None)
        else:
            self._handlers[method] = handler

    async def _serve(self, request_id: int | str, method: str, params: Any) -> None:
        handler = self._handlers.get(method)
        reply: msgspec.Struct
        if handler is None:
            reply = ErrorResponse(
                JSONRPC,
                request_id,
                ErrorBody(ErrorCode.METHOD_NOT_FOUND, f"unhandled method: {method}"),
            )
        else:
            try:
                result = await handler(params)
                reply = Response(JSONRPC, request_id, result)
                _encoder.encode(result)  # fail here, as -32603, if it cannot be sent
            except RpcError as exc:
                reply = ErrorResponse(
                    JSONRPC, request_id, ErrorBody(exc.code, exc.message, exc.data)
                )
            except Exception as exc:
                log.warning("handler for %s failed", method, exc_info=True)
                reply = ErrorResponse(
                    JSONRPC,
                    request_id,
                    ErrorBody(ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"),
                )
        with contextlib.suppress(ConnectionError):
            self._write(reply)
