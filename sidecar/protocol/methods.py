"""The method table: the one registry of every request and notification.

A row names the method, its direction, params and result types, its *ordering class* and its
handler. Everything else follows from the rows: the daemon's dispatch
(``sidecar.server.dispatch`` binds each client->daemon row to its handler), the per-connection
ordering rules (``SidecarProtocol``), ``initialize``'s method list, the engine's event names
(``NOTIFICATION_OF``) and the JSON Schema (``schema.py``) the clients are generated from.
Adding a method is one row here and one handler function.

Ordering classes (what a connection's later requests wait for):

- ``ingest``: ``message/update``, ``part/update``. The handler queues its store op when its
  frame is read and answers from the commit callback, costing no task; the connection's later
  reads wait until its queued writes are acknowledged.
- ``write``: any other change to stored or connection state; the connection's later requests
  are held until it has answered, so a client's writes take effect in the order sent.
- ``read``: runs at once, after the connection's own unacknowledged writes.

Handlers are named ``"module:function"`` inside ``sidecar.server.handlers`` (a string, so this
layer imports nothing of the server). Params and results are the Structs of
``sidecar.model.rpc`` (and the model), never redefined here.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

from sidecar.model.config import Config
from sidecar.model.daemon import DaemonStatus
from sidecar.model.messages import Message
from sidecar.model.parts import Part
from sidecar.model.rpc import (
    BreakdownResult,
    CancelParams,
    CompactedEvent,
    CompactingHookParams,
    CompactingHookResult,
    CompactionsResult,
    CompactResult,
    ConfigUpdateParams,
    ContextResult,
    Empty,
    Event,
    HistoryExpandParams,
    HistoryExpandResult,
    HistorySearchParams,
    HistorySearchResult,
    InitializeParams,
    InitializeResult,
    LogMessageParams,
    MessageRemovedEvent,
    MessageRemoveParams,
    MessagesPage,
    MessageUpdatedEvent,
    MessageUpdateParams,
    OverflowResult,
    PartPinParams,
    PartRemovedEvent,
    PartRemoveParams,
    PartUpdatedEvent,
    PartUpdateParams,
    PinsResult,
    ProgressParams,
    PrunedEvent,
    PruneResult,
    SessionBreakdownParams,
    SessionCompactParams,
    SessionContextParams,
    SessionCreateParams,
    SessionForkParams,
    SessionList,
    SessionListParams,
    SessionMessagesParams,
    SessionOverflowParams,
    SessionRef,
    SessionRevertParams,
    SessionUncompactParams,
    StatusEvent,
    SummarizerCompleteParams,
    SummarizerCompleteResult,
    UncompactResult,
)
from sidecar.model.session import Session

Direction = Literal["client->daemon", "daemon->client"]
Ordering = Literal["ingest", "write", "read"]
TO_DAEMON: Direction = "client->daemon"
TO_CLIENT: Direction = "daemon->client"


class Call(msgspec.Struct, frozen=True):
    """How the clients' generated wrappers (``sidecar.protocol.clients``) call a row: ``name``
    in Python (TypeScript's is its camelCase); the params fields taken positionally in Python
    (``args``) and in TypeScript (``ts``, default ``args``), the others keyword-only (Python)
    or in an ``options`` object (TypeScript); ``unwrap``: the result field returned instead
    of the whole result."""

    name: str
    args: tuple[str, ...] = ()
    ts: tuple[str, ...] | None = None
    unwrap: str = ""


class RequestSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A request: ``result`` is a type (a Struct, a union alias) or ``None`` for ``null``.

    ``handler`` is ``"module:function"`` in ``sidecar.server.handlers`` (client->daemon rows);
    ``call``, its clients' wrapper (none: hand-written, as ``initialize``).
    """

    method: str
    direction: Direction
    params: type[Any]
    result: Any
    ordering: Ordering = "read"
    handler: str = ""
    doc: str = ""
    call: Call | None = None


class NotificationSpec(msgspec.Struct, frozen=True, kw_only=True):
    """``handler`` as for requests; a client->daemon notification without one is handled by
    the protocol itself (``exit``, ``$/cancelRequest``)."""

    method: str
    direction: Direction
    params: type[Any]
    handler: str = ""
    doc: str = ""


def _req(
    method: str,
    params: type[Any],
    result: Any,
    ordering: Ordering,
    handler: str,
    doc: str = "",
    call: Call | None = None,
) -> RequestSpec:
    return RequestSpec(
        method=method,
        direction=TO_DAEMON,
        params=params,
        result=result,
        ordering=ordering,
        handler=handler,
        doc=doc,
        call=call,
    )


S = ("session_id",)  # the usual first argument of a wrapper


# fmt: off
REQUESTS: tuple[RequestSpec, ...] = (
    # method, params, result, ordering, handler ("module:function"), doc, the clients' call
    _req("initialize", InitializeParams, InitializeResult, "write", "lifecycle:initialize",
         "must be the first request"),
    _req("shutdown", Empty, None, "write", "lifecycle:shutdown",
         call=Call("shutdown")),
    _req("session/create", SessionCreateParams, Session, "write", "sessions:create",
         call=Call("create_session")),
    _req("session/get", SessionRef, Session, "read", "sessions:get",
         call=Call("get_session", S)),
    _req("session/list", SessionListParams, SessionList, "read", "sessions:list_",
         call=Call("list_sessions", ("limit", "cursor"), ts=())),
    _req("session/delete", SessionRef, None, "write", "sessions:delete",
         call=Call("delete_session", S)),
    _req("session/messages", SessionMessagesParams, MessagesPage, "read", "sessions:messages",
         "full history, chronological",
         call=Call("messages", (*S, "limit", "cursor"), ts=S)),
    _req("session/subscribe", SessionRef, None, "write", "sessions:subscribe",
         'sessionID "*" subscribes to every session',
         call=Call("subscribe", S)),
    _req("session/unsubscribe", SessionRef, None, "write", "sessions:unsubscribe",
         call=Call("unsubscribe", S)),
    _req("session/context", SessionContextParams, ContextResult, "read", "compaction:context",
         "the filtered window",
         call=Call("context", (*S, "format"))),
    _req("session/breakdown", SessionBreakdownParams, BreakdownResult, "read",
         "compaction:breakdown", "what fills the window the next session/context serves",
         call=Call("breakdown", S)),
    _req("session/overflow", SessionOverflowParams, OverflowResult, "read",
         "compaction:overflow",
         call=Call("overflow", S)),
    _req("session/idle", SessionRef, None, "read", "compaction:idle",
         "answered once automatic work has finished",
         call=Call("idle", S)),
    _req("session/prune", SessionRef, PruneResult, "write", "compaction:prune",
         call=Call("prune", S)),
    _req("session/compact", SessionCompactParams, CompactResult, "write", "compaction:compact",
         call=Call("compact", (*S, "auto"), ts=S)),
    _req("session/fork", SessionForkParams, Session, "write", "compaction:fork",
         call=Call("fork", (*S, "message_id"))),
    _req("session/revert", SessionRevertParams, Session, "write", "compaction:revert",
         call=Call("revert", (*S, "message_id", "part_id"))),
    _req("session/unrevert", SessionRef, Session, "write", "compaction:unrevert",
         call=Call("unrevert", S)),
    _req("session/compactions", SessionRef, CompactionsResult, "read", "steering:compactions",
         "each compaction's diagnostics, oldest first",
         call=Call("compactions", S, unwrap="compactions")),
    _req("session/uncompact", SessionUncompactParams, UncompactResult, "write",
         "steering:uncompact", "undo the newest (or the named and every later) compaction",
         call=Call("uncompact", (*S, "message_id"), ts=S, unwrap="removed")),
    _req("part/pin", PartPinParams, None, "write", "steering:pin",
         "pin or unpin a part (or every part of a message)",
         call=Call("pin", (*S, "message_id", "part_id", "pinned"))),
    _req("session/pins", SessionRef, PinsResult, "read", "steering:pins",
         call=Call("pins", S, unwrap="pins")),
    _req("message/update", MessageUpdateParams, Message, "ingest", "messages:message_update",
         "upsert; echoes the stored message",
         call=Call("update_message", ("message",))),
    _req("message/remove", MessageRemoveParams, None, "write", "messages:message_remove",
         call=Call("remove_message", (*S, "message_id"))),
    _req("part/update", PartUpdateParams, Part, "ingest", "messages:part_update",
         "upsert; echoes the stored part",
         call=Call("update_part", ("part",))),
    _req("part/remove", PartRemoveParams, None, "write", "messages:part_remove",
         call=Call("remove_part", (*S, "message_id", "part_id"))),
    _req("history/search", HistorySearchParams, HistorySearchResult, "read", "history:search",
         'full-text search of stored history; sessionID "*" searches every session',
         call=Call("search_history", (*S, "query"))),
    _req("history/expand", HistoryExpandParams, HistoryExpandResult, "read", "history:expand",
         "a message's or part's original content, paged by characters",
         call=Call("expand_history", (*S, "message_id", "part_id"), ts=(*S, "message_id"))),
    _req("config/get", Empty, Config, "read", "config:get",
         "the effective config, secrets redacted",
         call=Call("get_config")),
    _req("config/update", ConfigUpdateParams, Config, "write", "config:update",
         "partial, deep-merged",
         call=Call("update_config", ("config",))),
    _req("daemon/status", Empty, DaemonStatus, "read", "admin:status",
         "extension: the daemon's pid, listener, db, load",
         call=Call("daemon_status")),
    _req("daemon/stop", Empty, None, "read", "admin:stop",
         "extension: answered, then the daemon stops",
         call=Call("stop_daemon")),
    RequestSpec(
        method="compaction/compacting",
        direction=TO_CLIENT,
        params=CompactingHookParams,
        result=CompactingHookResult,
        doc="to clients that declared capabilities.compactingHook",
    ),
    RequestSpec(
        method="summarizer/complete",
        direction=TO_CLIENT,
        params=SummarizerCompleteParams,
        result=SummarizerCompleteResult,
        doc="to a client that declared capabilities.summarizer",
    ),
)
# fmt: on


def _note(
    method: str, direction: Direction, params: type[Any], handler: str = ""
) -> NotificationSpec:
    return NotificationSpec(method=method, direction=direction, params=params, handler=handler)


NOTIFICATIONS: tuple[NotificationSpec, ...] = (
    _note("initialized", TO_DAEMON, Empty, "lifecycle:initialized"),
    _note("exit", TO_DAEMON, Empty),
    _note("$/cancelRequest", TO_DAEMON, CancelParams),
    _note("session/compacted", TO_CLIENT, CompactedEvent),
    _note("session/pruned", TO_CLIENT, PrunedEvent),
    _note("session/status", TO_CLIENT, StatusEvent),
    _note("message/updated", TO_CLIENT, MessageUpdatedEvent),
    _note("message/removed", TO_CLIENT, MessageRemovedEvent),
    _note("part/updated", TO_CLIENT, PartUpdatedEvent),
    _note("part/removed", TO_CLIENT, PartRemovedEvent),
    _note("$/progress", TO_CLIENT, ProgressParams),
    _note("window/logMessage", TO_CLIENT, LogMessageParams),
)

#: What a client may call on the daemon: requests, then notifications that have a handler.
SERVED: tuple[RequestSpec | NotificationSpec, ...] = (
    *(r for r in REQUESTS if r.direction == TO_DAEMON),
    *(n for n in NOTIFICATIONS if n.direction == TO_DAEMON and n.handler),
)

#: The notification each engine event is sent as (an event type is used by one method only).
NOTIFICATION_OF: dict[type[Any], str] = {
    n.params: n.method for n in NOTIFICATIONS if n.direction == TO_CLIENT
}


#: The notifications a session's subscribers get for its changes, in table order.
SESSION_EVENTS: tuple[str, ...] = tuple(
    n.method for n in NOTIFICATIONS if n.params in get_args(Event)
)


def notification_method(event: Event) -> str:
    """The method an engine event is published as."""
    return NOTIFICATION_OF[type(event)]
