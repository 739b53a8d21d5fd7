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


class RequestSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A request: ``result`` is a type (a Struct, a union alias) or ``None`` for ``null``.

    ``handler`` is ``"module:function"`` in ``sidecar.server.handlers`` (client->daemon rows).
    """

    method: str
    direction: Direction
    params: type[Any]
    result: Any
    ordering: Ordering = "read"
    handler: str = ""
    doc: str = ""


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
) -> RequestSpec:
    return RequestSpec(
        method=method,
        direction=TO_DAEMON,
        params=params,
        result=result,
        ordering=ordering,
        handler=handler,
        doc=doc,
    )


# fmt: off
REQUESTS: tuple[RequestSpec, ...] = (
    # method, params, result, ordering, handler ("module:function"), doc
    _req("initialize", InitializeParams, InitializeResult, "write", "lifecycle:initialize",
         "must be the first request"),
    _req("shutdown", Empty, None, "write", "lifecycle:shutdown"),
    _req("session/create", SessionCreateParams, Session, "write", "sessions:create"),
    _req("session/get", SessionRef, Session, "read", "sessions:get"),
    _req("session/list", SessionListParams, SessionList, "read", "sessions:list_"),
    _req("session/delete", SessionRef, None, "write", "sessions:delete"),
    _req("session/messages", SessionMessagesParams, MessagesPage, "read", "sessions:messages",
         "full history, chronological"),
    _req("session/subscribe", SessionRef, None, "write", "sessions:subscribe",
         'sessionID "*" subscribes to every session'),
    _req("session/unsubscribe", SessionRef, None, "write", "sessions:unsubscribe"),
    _req("session/context", SessionContextParams, ContextResult, "read", "compaction:context",
         "the filtered window"),
    _req("session/breakdown", SessionBreakdownParams, BreakdownResult, "read",
         "compaction:breakdown", "what fills the window the next session/context serves"),
    _req("session/overflow", SessionOverflowParams, OverflowResult, "read",
         "compaction:overflow"),
    _req("session/idle", SessionRef, None, "read", "compaction:idle",
         "answered once automatic work has finished"),
    _req("session/prune", SessionRef, PruneResult, "write", "compaction:prune"),
    _req("session/compact", SessionCompactParams, CompactResult, "write", "compaction:compact"),
    _req("session/fork", SessionForkParams, Session, "write", "compaction:fork"),
    _req("session/revert", SessionRevertParams, Session, "write", "compaction:revert"),
    _req("session/unrevert", SessionRef, Session, "write", "compaction:unrevert"),
    _req("session/compactions", SessionRef, CompactionsResult, "read", "steering:compactions",
         "each compaction's diagnostics, oldest first"),
    _req("session/uncompact", SessionUncompactParams, UncompactResult, "write",
         "steering:uncompact", "undo the newest (or the named and every later) compaction"),
    _req("part/pin", PartPinParams, None, "write", "steering:pin",
         "pin or unpin a part (or every part of a message)"),
    _req("session/pins", SessionRef, PinsResult, "read", "steering:pins"),
    _req("message/update", MessageUpdateParams, Message, "ingest", "messages:message_update",
         "upsert; echoes the stored message"),
    _req("message/remove", MessageRemoveParams, None, "write", "messages:message_remove"),
    _req("part/update", PartUpdateParams, Part, "ingest", "messages:part_update",
         "upsert; echoes the stored part"),
    _req("part/remove", PartRemoveParams, None, "write", "messages:part_remove"),
    _req("history/search", HistorySearchParams, HistorySearchResult, "read", "history:search",
         'full-text search of stored history; sessionID "*" searches every session'),
    _req("history/expand", HistoryExpandParams, HistoryExpandResult, "read", "history:expand",
         "a message's or part's original content, paged by characters"),
    _req("config/get", Empty, Config, "read", "config:get",
         "the effective config, secrets redacted"),
    _req("config/update", ConfigUpdateParams, Config, "write", "config:update",
         "partial, deep-merged"),
    _req("daemon/status", Empty, DaemonStatus, "read", "admin:status",
         "extension: the daemon's pid, listener, db, load"),
    _req("daemon/stop", Empty, None, "read", "admin:stop",
         "extension: answered, then the daemon stops"),
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
