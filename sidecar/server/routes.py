"""The method table: each handler module registers ``@route(method, ParamsStruct)`` functions.

Handlers are thin — ``async def h(conn, params) -> result`` — and call the store or the
engine. Errors are mapped here once: ``SidecarError`` to its application code, a
``ValidationError`` raised inside a handler to -32602, anything unexpected to -32603 with
only the exception type (details go to the daemon's log).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

from sidecar.errors import SidecarError

if TYPE_CHECKING:
    from sidecar.server.connection import Connection

log = logging.getLogger("sidecar.handlers")

Handler = Callable[["Connection", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    params: type[Any]
    fn: Handler


ROUTES: dict[str, Route] = {}


def route(method: str, params: type[Any]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if method in ROUTES:
            raise ValueError(f"method {method} registered twice")
        ROUTES[method] = Route(method, params, fn)
        return fn

    return register


def bind(conn: Connection, r: Route) -> Callable[[Any], Awaitable[Any]]:
    """The coroutine pygls dispatches for ``r`` on ``conn``."""

    async def handler(params: Any) -> Any:
        try:
            return await r.fn(conn, params)
        except SidecarError as exc:
            raise JsonRpcException(str(exc), exc.code) from None
        except msgspec.ValidationError as exc:
            raise JsonRpcInvalidParams(f"invalid params for {r.method}: {exc}") from None
        except JsonRpcException:
            raise
        except Exception as exc:
            log.exception("%s failed", r.method)
            message = f"internal error in {r.method}: {type(exc).__name__}"
            raise JsonRpcInternalError(message) from None

    handler.__name__ = r.method.replace("/", "_")
    handler.sidecar_coroutine = True  # type: ignore[attr-defined]  # see SidecarProtocol
    return handler
