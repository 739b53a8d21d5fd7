"""The method table: each handler module registers ``@route(method, ParamsStruct)`` functions.

Handlers are thin — ``async def h(conn, params) -> result`` — and call the store or the
engine. A *deferred* handler (``@route(..., deferred=True)``) is instead a plain function
``h(conn, params, done)`` that calls ``done(result, None)`` or ``done(None, exc)`` exactly once,
possibly later (from a store commit callback), or raises before calling it: the ingest path
uses it so that a request costs no task of its own. A deferred handler queues its write before
it returns; one that cannot (it must read first) returns the future of the task that will, and
the connection's later requests wait for that future. Errors are mapped here once:
``SidecarError`` to its application code, a ``ValidationError`` raised inside a handler to
-32602, anything unexpected to -32603 with only the exception type (details go to the
daemon's log).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

from sidecar.errors import SidecarError

if TYPE_CHECKING:
    from sidecar.server.connection import Connection

log = logging.getLogger("sidecar.handlers")

Handler = Callable[..., Any]
# How a deferred handler answers: (result, None) or (None, the exception).
Done = Callable[[Any, BaseException | None], None]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    params: type[Any]
    fn: Handler
    deferred: bool = False
    writes: bool = False


ROUTES: dict[str, Route] = {}


def route(
    method: str, params: type[Any], *, deferred: bool = False, writes: bool = False
) -> Callable[[Handler], Handler]:
    """Register a handler. ``writes``: it changes stored or connection state, so the
    connection's later requests wait for it (PROTOCOL.md, "Order")."""

    def register(fn: Handler) -> Handler:
        if method in ROUTES:
            raise ValueError(f"method {method} registered twice")
        ROUTES[method] = Route(method, params, fn, deferred, writes)
        return fn

    return register


def rpc_error(method: str, exc: BaseException) -> JsonRpcException:
    """The JSON-RPC error a client sees for an exception raised while serving ``method``."""
    if isinstance(exc, JsonRpcException):
        return exc
    if isinstance(exc, SidecarError):
        return JsonRpcException(str(exc), exc.code)
    if isinstance(exc, msgspec.ValidationError):
        return JsonRpcInvalidParams(f"invalid params for {method}: {exc}")
    log.error("%s failed", method, exc_info=exc)
    return JsonRpcInternalError(f"internal error in {method}: {type(exc).__name__}")


def bind(conn: Connection, r: Route) -> Callable[..., Any]:
    """The callable the protocol dispatches for ``r`` on ``conn``."""
    if r.deferred:
        return _bind_deferred(conn, r)

    async def handler(params: Any) -> Any:
        try:
            return await r.fn(conn, params)
        except Exception as exc:
            raise rpc_error(r.method, exc) from None

    handler.__name__ = r.method.replace("/", "_")
    handler.sidecar_coroutine = True  # type: ignore[attr-defined]  # see SidecarProtocol
    return handler


def _bind_deferred(conn: Connection, r: Route) -> Callable[[Any, Done], Any]:
    def handler(params: Any, reply: Done) -> Any:
        def done(result: Any, exc: BaseException | None) -> None:
            reply(result, None if exc is None else rpc_error(r.method, exc))

        try:
            return r.fn(conn, params, done)
        except Exception as exc:
            done(None, exc)
            return None

    handler.__name__ = r.method.replace("/", "_")
    handler.sidecar_deferred = True  # type: ignore[attr-defined]  # see SidecarProtocol
    return handler
