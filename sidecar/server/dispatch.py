"""Dispatch: each row of the method table (``sidecar.protocol.methods``) bound to its handler.

Handlers are thin — ``async def h(ctx, params) -> result`` — and call the store or the
engine. An *ingest* handler is instead a plain function ``h(ctx, params, done)`` that calls
``done(result, None)`` or ``done(None, exc)`` exactly once, possibly later (from a store
commit callback), or raises before calling it: a request then costs no task of its own.
``done`` has the one completion shape of the ingest path (``sidecar.store.backend.Done``),
from the store's commit through the handler to the protocol's reply. It
queues its write before it returns; one that cannot (it must read first) returns the future
of the task that will, and the connection's later requests wait for that future.

Errors are mapped here once: ``SidecarError`` to its application code, a
``ValidationError`` raised inside a handler to -32602, anything unexpected to -32603 with
only the exception type (details go to the daemon's log).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from sidecar.errors import SidecarError
from sidecar.protocol.methods import SERVED, NotificationSpec, RequestSpec
from sidecar.server.context import Context
from sidecar.server.protocol import RpcError, internal_error, invalid_params
from sidecar.store import Done as Done  # an ingest handler's ``done``

log = logging.getLogger("sidecar.handlers")

Handler = Callable[..., Any]

HANDLERS_PACKAGE = "sidecar.server.handlers"


@dataclass(frozen=True, slots=True)
class Route:
    """A served row of the method table with its handler function resolved."""

    spec: RequestSpec | NotificationSpec
    fn: Handler
    decoder: msgspec.json.Decoder[Any]

    @property
    def method(self) -> str:
        return self.spec.method

    @property
    def ingest(self) -> bool:
        return isinstance(self.spec, RequestSpec) and self.spec.ordering == "ingest"

    @property
    def writes(self) -> bool:
        """Later requests of the connection wait for its reply."""
        return isinstance(self.spec, RequestSpec) and self.spec.ordering == "write"


def resolve(handler: str) -> Handler:
    """``"module:function"`` in the handlers package, as a table row names it."""
    module, _, name = handler.partition(":")
    fn: Handler = getattr(importlib.import_module(f"{HANDLERS_PACKAGE}.{module}"), name)
    return fn


@functools.cache
def routes() -> dict[str, Route]:
    """Every method a client may call, from the table (built once per process)."""
    return {s.method: Route(s, resolve(s.handler), msgspec.json.Decoder(s.params)) for s in SERVED}


def rpc_error(method: str, exc: BaseException) -> RpcError:
    """The JSON-RPC error a client sees for an exception raised while serving ``method``."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, SidecarError):
        return RpcError(str(exc), exc.code)
    if isinstance(exc, msgspec.ValidationError):
        return invalid_params(f"invalid params for {method}: {exc}")
    log.error("%s failed", method, exc_info=exc)
    return internal_error(f"internal error in {method}: {type(exc).__name__}")


def bind(ctx: Context, r: Route) -> Callable[..., Any]:
    """The callable the protocol dispatches for ``r`` on the connection ``ctx``."""
    if r.ingest:
        return _bind_ingest(ctx, r)

    async def handler(params: Any) -> Any:
        try:
            return await r.fn(ctx, params)
        except Exception as exc:
            raise rpc_error(r.method, exc) from None

    handler.__name__ = r.method.replace("/", "_")
    handler.sidecar_coroutine = True  # type: ignore[attr-defined]  # see SidecarProtocol
    return handler


def _bind_ingest(ctx: Context, r: Route) -> Callable[[Any, Done[Any]], Any]:
    def handler(params: Any, reply: Done[Any]) -> Any:
        def done(result: Any, exc: BaseException | None) -> None:
            reply(result, None if exc is None else rpc_error(r.method, exc))

        try:
            return r.fn(ctx, params, done)
        except Exception as exc:
            done(None, exc)
            return None

    handler.__name__ = r.method.replace("/", "_")
    handler.sidecar_deferred = True  # type: ignore[attr-defined]  # see SidecarProtocol
    return handler
