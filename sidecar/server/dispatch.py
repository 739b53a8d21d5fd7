"""Dispatch: each row of the method table (``sidecar.protocol.methods``) with its handler.

``routes()`` is the one mapping of served methods, built once per process from the table and
read by every connection's protocol at each frame; nothing is registered per connection.

Handlers are thin — ``async def h(ctx, params) -> result`` — and call the store or the
engine. An *ingest* handler is instead a plain function ``h(ctx, params, done)`` that calls
``done(result, None)`` or ``done(None, exc)`` exactly once, possibly later (from a store
commit callback), or raises before calling it: a request then costs no task of its own.
``done`` has the one completion shape of the ingest path (``sidecar.store.backend.Done``),
from the store's commit through the handler to the protocol's reply; it is given the stored
JSON, and annotated with the type that JSON is (``Annotated[Done[Any], Part]``), which
``tests/protocol/test_handler_types.py`` checks against the row as it checks the others'
params and return annotations. An ingest handler queues its write before it returns; one that
cannot (it must read first) returns the future of the task that will, and the connection's
later requests wait for that future.

Errors are mapped here once (``rpc_error``): a ``SidecarError`` keeps its code, a
``ValidationError`` raised inside a handler is -32602, anything unexpected -32603 with only
the exception type (details go to the daemon's log).
"""

from __future__ import annotations

import functools
import importlib
import logging
from asyncio import Future
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from sidecar.errors import ErrorCode, InvalidParams, SidecarError
from sidecar.protocol.methods import SERVED, NotificationSpec, RequestSpec
from sidecar.server.context import Context
from sidecar.store import Done as Done  # an ingest handler's ``done``
from sidecar.store import damage_of

log = logging.getLogger("sidecar.handlers")

Handler = Callable[..., Any]

HANDLERS_PACKAGE = "sidecar.server.handlers"


@dataclass(frozen=True, slots=True)
class Route:
    """A served row of the method table with its handler function and params decoder."""

    spec: RequestSpec | NotificationSpec
    fn: Handler
    decoder: msgspec.json.Decoder[Any]
    #: Ordering class ``ingest``: called at once, answered through ``done``.
    ingest: bool = False
    #: Ordering class ``write``: the connection's later requests wait for its reply.
    writes: bool = False

    @property
    def method(self) -> str:
        return self.spec.method


def route(spec: RequestSpec | NotificationSpec, fn: Handler) -> Route:
    """``spec`` served by ``fn``."""
    ordering = spec.ordering if isinstance(spec, RequestSpec) else "read"
    return Route(
        spec,
        fn,
        msgspec.json.Decoder(spec.params),
        ingest=ordering == "ingest",
        writes=ordering == "write",
    )


def resolve(handler: str) -> Handler:
    """``"module:function"`` in the handlers package, as a table row names it."""
    module, _, name = handler.partition(":")
    fn: Handler = getattr(importlib.import_module(f"{HANDLERS_PACKAGE}.{module}"), name)
    return fn


@functools.cache
def routes() -> dict[str, Route]:
    """Every method a client may call, from the table (built once per process)."""
    return {s.method: route(s, resolve(s.handler)) for s in SERVED}


def rpc_error(method: str, exc: BaseException, ctx: Context | None) -> SidecarError:
    """The error a client sees for an exception raised while serving ``method`` for ``ctx``
    (whose store is named when what it holds cannot be read)."""
    damaged = damage_of(exc)
    if damaged is not None:
        if ctx is not None:
            damaged = damaged.at(ctx.store.path)
        log.warning("%s: %s", method, damaged)
        return damaged
    if isinstance(exc, SidecarError):
        return exc
    if isinstance(exc, msgspec.ValidationError):
        return InvalidParams(f"invalid params for {method}: {exc}")
    log.error("%s failed", method, exc_info=exc)
    return SidecarError(
        f"internal error in {method}: {type(exc).__name__}", ErrorCode.INTERNAL_ERROR
    )


def call_ingest(r: Route, ctx: Context, params: Any, reply: Done[Any]) -> Future[None] | None:
    """Call an ingest handler; ``reply`` gets its result or its mapped error, exactly once."""

    def done(result: Any, exc: BaseException | None) -> None:
        reply(result, None if exc is None else rpc_error(r.method, exc, ctx))

    try:
        later: Future[None] | None = r.fn(ctx, params, done)
    except Exception as exc:
        done(None, exc)
        return None
    return later


async def call_notification(r: Route, ctx: Context, params: Any) -> None:
    """Run a notification's handler; a failure is logged (there is no one to answer)."""
    try:
        await r.fn(ctx, params)
    except Exception as exc:
        log.warning("notification %s failed: %s", r.method, rpc_error(r.method, exc, ctx))
