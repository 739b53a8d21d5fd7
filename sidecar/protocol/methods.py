"""The method table: every request and notification, its direction and its types.

The daemon's ``@route`` registrations are checked against it (tests/protocol), the engine's
events are named through ``NOTIFICATION_OF``, and ``schema.py`` turns it into the JSON Schema
the TypeScript client is generated from. Params and results are the Structs of
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
    CancelParams,
    CompactedEvent,
    CompactingHookParams,
    CompactingHookResult,
    CompactResult,
    ConfigUpdateParams,
    ContextResult,
    Empty,
    Event,
    InitializeParams,
    InitializeResult,
    LogMessageParams,
    MessageRemovedEvent,
    MessageRemoveParams,
    MessagesPage,
    MessageUpdatedEvent,
    MessageUpdateParams,
    OverflowResult,
    PartRemovedEvent,
    PartRemoveParams,
    PartUpdatedEvent,
    PartUpdateParams,
    ProgressParams,
    PrunedEvent,
    PruneResult,
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
    StatusEvent,
    SummarizerCompleteParams,
    SummarizerCompleteResult,
)
from sidecar.model.session import Session

Direction = Literal["client->daemon", "daemon->client"]
TO_DAEMON: Direction = "client->daemon"
TO_CLIENT: Direction = "daemon->client"


class RequestSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A request: ``result`` is a type (a Struct, a union alias) or ``None`` for ``null``."""

    method: str
    direction: Direction
    params: type[Any]
    result: Any
    doc: str = ""


class NotificationSpec(msgspec.Struct, frozen=True, kw_only=True):
    method: str
    direction: Direction
    params: type[Any]
    doc: str = ""


def _req(method: str, params: type[Any], result: Any, doc: str = "") -> RequestSpec:
    return RequestSpec(method=method, direction=TO_DAEMON, params=params, result=result, doc=doc)


REQUESTS: tuple[RequestSpec, ...] = (
    _req("initialize", InitializeParams, InitializeResult, "must be the first request"),
    _req("shutdown", Empty, None),
    _req("session/create", SessionCreateParams, Session),
    _req("session/get", SessionRef, Session),
    _req("session/list", SessionListParams, SessionList),
    _req("session/delete", SessionRef, None),
    _req("session/messages", SessionMessagesParams, MessagesPage, "full history, chronological"),
    _req("session/subscribe", SessionRef, None, 'sessionID "*" subscribes to every session'),
    _req("session/unsubscribe", SessionRef, None),
    _req("session/context", SessionContextParams, ContextResult, "the filtered window"),
    _req("session/overflow", SessionOverflowParams, OverflowResult),
    _req("session/idle", SessionRef, None, "answered once automatic work has finished"),
    _req("session/prune", SessionRef, PruneResult),
    _req("session/compact", SessionCompactParams, CompactResult),
    _req("session/fork", SessionForkParams, Session),
    _req("session/revert", SessionRevertParams, Session),
    _req("session/unrevert", SessionRef, Session),
    _req("message/update", MessageUpdateParams, Message, "upsert; echoes the stored message"),
    _req("message/remove", MessageRemoveParams, None),
    _req("part/update", PartUpdateParams, Part, "upsert; echoes the stored part"),
    _req("part/remove", PartRemoveParams, None),
    _req("config/get", Empty, Config, "the effective config, secrets redacted"),
    _req("config/update", ConfigUpdateParams, Config, "partial, deep-merged"),
    _req("daemon/status", Empty, DaemonStatus, "extension: the daemon's pid, listener, db, load"),
    _req("daemon/stop", Empty, None, "extension: answered, then the daemon stops"),
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


def _note(method: str, direction: Direction, params: type[Any]) -> NotificationSpec:
    return NotificationSpec(method=method, direction=direction, params=params)


NOTIFICATIONS: tuple[NotificationSpec, ...] = (
    _note("initialized", TO_DAEMON, Empty),
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

REQUEST: dict[str, RequestSpec] = {r.method: r for r in REQUESTS}
NOTIFICATION: dict[str, NotificationSpec] = {n.method: n for n in NOTIFICATIONS}

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
