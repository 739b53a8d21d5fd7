"""Params, results and notifications of the wire protocol (PROTOCOL.md), one Struct each.

Handlers receive these already validated; a field that fails validation is reported as
-32602 with msgspec's path (``$.message.role``). ``message`` and ``part`` payloads are kept as
``msgspec.Raw`` so that fields this version does not know survive a round trip through the store.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from sidecar.model.base import Base, Count, Dense, Id, PageLimit
from sidecar.model.messages import ModelRef
from sidecar.model.session import Session
from sidecar.model.tokens import ModelLimit, Tokens

ContextFormat = Literal["parts", "openai", "anthropic"]
#: How a compaction treated the session's open turn (``Diagnostics.open_turn``).
OpenTurn = Literal["kept", "cut"]
#: Where ``session/context``'s overhead came from: the request, learned usage, or none (0).
OverheadSource = Literal["given", "learned", "none"]
SessionStatus = Literal["idle", "compacting", "error"]
PROTOCOL_VERSION = "1.0"

# A ``Raw`` payload is validated by the handler, not the decoder (unknown fields survive), so
# these say what it holds for the JSON Schema (``sidecar.protocol.schema`` defines the targets).
RawMessage = Annotated[msgspec.Raw, msgspec.Meta(extra_json_schema={"$ref": "#/$defs/Message"})]
RawPart = Annotated[msgspec.Raw, msgspec.Meta(extra_json_schema={"$ref": "#/$defs/Part"})]


class Empty(Base, kw_only=True):
    """Params of methods that take none; unknown keys are ignored."""


# -- lifecycle ---------------------------------------------------------------------------------


class ClientCapabilities(Base, kw_only=True):
    compacting_hook: bool = False
    summarizer: bool = False
    #: False: the client's own ``message/update`` and ``part/update`` are answered by their
    #: replies only, not sent back to it as ``message/updated``/``part/updated`` too (a
    #: mirror such as an agent plugin has no use for them).
    echo: bool = True


class ClientInfo(Base, kw_only=True):
    name: str
    version: str | None = None


class InitializeParams(Base, kw_only=True):
    process_id: int | None = msgspec.field(default=None, name="processId")  # LSP's spelling
    client_info: ClientInfo | None = None
    capabilities: ClientCapabilities = msgspec.field(default_factory=ClientCapabilities)
    initialization_options: dict[str, Any] | None = None
    #: The daemon's token; required on a TCP listener (PROTOCOL.md, "Transport").
    auth_token: str | None = None


class ServerInfo(Base, kw_only=True):
    name: str
    version: str


class InitializeResult(Dense, kw_only=True):
    server_info: ServerInfo
    capabilities: dict[str, Any]
    protocol_version: str = PROTOCOL_VERSION


class CancelParams(Base, kw_only=True):
    id: int | str


# -- sessions ----------------------------------------------------------------------------------


class SessionCreateParams(Base, kw_only=True):
    id: Id | None = None
    title: str | None = None
    parent_id: Id | None = None
    directory: str | None = None


class SessionRef(Base, kw_only=True):
    session_id: Id


class SessionListParams(Base, kw_only=True):
    limit: PageLimit | None = None
    cursor: str | None = None


class SessionList(Base, kw_only=True):
    sessions: list[Session]
    next_cursor: str | None = None


class SessionForkParams(Base, kw_only=True):
    session_id: Id
    message_id: Id | None = None


class SessionMessagesParams(Base, kw_only=True):
    session_id: Id
    limit: PageLimit | None = None
    cursor: str | None = None
    part_limit: PageLimit | None = None


class StoredMessage(msgspec.Struct, kw_only=True):
    """``{info, parts}`` exactly as stored (unknown fields included)."""

    info: RawMessage
    parts: list[RawPart]


class MessagesPage(Base, kw_only=True):
    messages: list[StoredMessage]
    next_cursor: str | None = None


class SessionContextParams(Base, kw_only=True):
    session_id: Id
    format: ContextFormat = "parts"
    wait: bool = True  # answer after the automatic work caused by earlier writes
    fit: bool = True  # never above the usable input when the model's limits are known
    # A ``revision`` of an earlier reply: answer with only what changed at its end if it can.
    since: str | None = None
    # What the frontend adds to the window (system prompt, tool schemas), counted by ``fit``;
    # absent: the overhead learned from the session's reported usage.
    overhead_tokens: Count | None = None


class ContextResult(Dense, kw_only=True):
    format: ContextFormat
    messages: list[Any]
    estimated_tokens: int
    system: list[str] = msgspec.field(default_factory=list)
    boundary_message_id: Id | None = None
    # ``fit``: true when even the last resort left the window above the usable input.
    overflow: bool = False
    usable: int | None = None  # set when the window had to be fitted
    truncated_part_ids: list[Id] = msgspec.field(default_factory=list)
    # This reply's window, for a later request's ``since``.
    revision: str = ""
    # With ``since``: true when ``messages`` are only those from index ``start`` of the
    # window (the client keeps its first ``start`` messages); false: the whole window. Both are
    # absent from a reply to a request without ``since`` (its shape is unchanged); the Python
    # client reads an absent one as None.
    delta: bool | msgspec.UnsetType | None = msgspec.UNSET
    start: int | msgspec.UnsetType | None = msgspec.UNSET
    # The frontend's overhead ``fit`` counted (with ``estimatedTokens``, against ``usable``),
    # and where it came from.
    overhead_tokens: int = 0
    overhead_source: OverheadSource = "none"


class OverflowModel(Base, kw_only=True):
    limit: ModelLimit


class SessionOverflowParams(Base, kw_only=True):
    session_id: Id | None = None
    wait: bool = True  # with sessionID: after the automatic work caused by earlier writes
    tokens: Tokens | None = None
    model: OverflowModel | None = None


class OverflowResult(Dense, kw_only=True):
    overflow: bool
    count: int
    usable: int
    known: bool = True


class PruneResult(Dense, kw_only=True):
    part_ids: list[Id]
    tokens_saved: int


class SessionCompactParams(Base, kw_only=True):
    session_id: Id
    model: ModelRef | None = None
    auto: bool = False
    instructions: str | None = None
    work_done_token: str | int | None = None
    # Summarize only up to and including this message; every later one is kept as it is.
    up_to: Id | None = None


class CompactResult(Dense, kw_only=True):
    status: Literal["continue", "stop"]
    summary_message_id: Id | None
    error: str | None = None


class SessionRevertParams(Base, kw_only=True):
    session_id: Id
    message_id: Id
    part_id: Id | None = None


# -- messages and parts ------------------------------------------------------------------------


class MessageUpdateParams(Base, kw_only=True):
    message: RawMessage


class MessageRemoveParams(Base, kw_only=True):
    session_id: Id
    message_id: Id


class PartUpdateParams(Base, kw_only=True):
    part: RawPart


class PartRemoveParams(Base, kw_only=True):
    session_id: Id
    message_id: Id
    part_id: Id


class ConfigUpdateParams(Base, kw_only=True):
    config: dict[str, Any]


# -- notifications (daemon -> client) ----------------------------------------------------------


class Diagnostics(Dense, kw_only=True):
    """What one compaction did (PROTOCOL.md "Steering compaction"), as measured then."""

    # The one before/after pair every tool shows: the window just before the compaction and
    # right after it (continue message and kept tail included), measured as session/context
    # measures it (``estimatedTokens``).
    tokens_before: int = 0
    tokens_after: int = 0
    # An automatic compaction's trigger: the finished turn's reported tokens (prompt + reply,
    # so the frontend's system prompt and tools included); absent for the others.
    reported_tokens: int | None = None
    summary_tokens: int = 0
    messages_summarized: int = 0
    parts_pruned: int = 0  # pruned tool outputs among what the summary replaced
    # Who wrote the summary: "provider/model" (e.g. "openai/gpt-4o-mini"), "extractive" for the
    # offline writer, which is also what a failed writer's fallback shows.
    writer: str = ""
    duration_ms: int = 0
    auto: bool = False
    # Only when the compaction came inside an open turn and kept it (absent otherwise):
    # "kept" (the whole turn, verbatim) or "cut" (the turn alone did not fit: only its newest
    # messages that fit were kept).
    open_turn: OpenTurn | msgspec.UnsetType = msgspec.UNSET


class CompactionRecord(Diagnostics, kw_only=True):
    """One ``session/compactions`` entry, stored by the daemon beside the session: the
    diagnostics, the messages the compaction added and what its summary replaced."""

    message_id: Id  # the summary message
    time: int
    marker_id: Id
    continue_id: Id | None = None
    replaced_ids: list[Id] = msgspec.field(default_factory=list)
    pruned_part_ids: list[Id] = msgspec.field(default_factory=list)


class CompactedEvent(Diagnostics, kw_only=True):
    session_id: Id
    message_id: Id
    auto: bool
    # With compaction.verifySummary: why the configured writer's first summary was rejected
    # (null: it was not). On a refused or lost compaction, which stored nothing: why.
    rejected: str | msgspec.UnsetType | None = msgspec.UNSET
    # With compaction.prepare (absent otherwise): whether a summary prepared in the background
    # was committed, and how long the compaction held reads of the session (ms).
    prepared: bool | msgspec.UnsetType = msgspec.UNSET
    waited_ms: int | msgspec.UnsetType = msgspec.UNSET


class PartPinParams(Base, kw_only=True):
    session_id: Id
    message_id: Id
    part_id: Id | None = None  # absent: every part of the message
    pinned: bool = True


class Pin(Dense, kw_only=True):
    message_id: Id
    part_id: Id


class PinsResult(Dense, kw_only=True):
    pins: list[Pin]


class CompactionsResult(Dense, kw_only=True):
    compactions: list[CompactionRecord]


#: What fills a window, in the order ``session/breakdown`` lists it.
Category = Literal[
    "overhead",
    "summary",
    "keptVerbatim",
    "userText",
    "assistantText",
    "reasoning",
    "toolCalls",
    "toolOutputs",
    "toolOutputsPruned",
    "pinned",
    "other",
]


class BreakdownCategory(Dense, kw_only=True):
    """One slice of the window: its tokens and its share of the usable input."""

    name: Category
    tokens: int
    share: float | None = None  # of ``usableInput``; None when the model's limits are unknown


class BreakdownItem(Dense, kw_only=True):
    """One of the largest parts in the window."""

    message_id: Id
    part_id: Id
    kind: str  # the category most of its tokens fall in ("pinned" for a pinned part)
    tool: str | None = None
    tokens: int


class BreakdownResult(Dense, kw_only=True):
    """``session/breakdown``: the window the next ``session/context`` would serve, split.

    ``categories`` add up to ``estimatedTokens + overheadTokens``; ``free`` is what is left of
    ``usableInput``. ``trigger`` is where the turn-end check compacts (OpenCode's rule on the
    reported tokens); ``prepareAt`` where ``compaction.prepare`` starts writing the summary.
    """

    session_id: Id
    estimated_tokens: int
    overhead_tokens: int
    overhead_source: OverheadSource = "none"
    categories: list[BreakdownCategory]
    total_tokens: int
    model_limits_known: bool
    context: int | None = None
    reserved_output: int | None = None
    usable_input: int | None = None
    free: int | None = None
    trigger: int | None = None
    prepare_at: int | None = None
    largest: list[BreakdownItem] = msgspec.field(default_factory=list)


class SessionBreakdownParams(Base, kw_only=True):
    session_id: Id
    wait: bool = True  # after the automatic work caused by earlier writes
    overhead_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None


class SessionUncompactParams(Base, kw_only=True):
    session_id: Id
    message_id: Id | None = None  # a summary or marker id; absent: the newest compaction
    restore_pruned: bool = False


class UncompactResult(Dense, kw_only=True):
    removed: list[Id]


class PrunedEvent(Dense, kw_only=True):
    """Tool outputs a prune marked (``compacted``: their ``state.time.compacted``). It stands
    for those parts' ``part/updated``: a prune sends no part, so no notification carries an
    output it cleared. A large prune comes as several, each naming at most
    ``PRUNED_PER_EVENT`` parts with their share of ``tokens_saved``."""

    session_id: Id
    part_ids: list[Id]
    tokens_saved: int
    compacted: int


#: Part ids per ``session/pruned`` notification (about 40 KB of JSON).
PRUNED_PER_EVENT = 1000


class StatusEvent(Base, kw_only=True):
    session_id: Id
    status: SessionStatus
    error: str | None = None


class MessageUpdatedEvent(msgspec.Struct, kw_only=True):
    message: RawMessage


class MessageRemovedEvent(Dense, kw_only=True):
    session_id: Id
    message_id: Id


class PartUpdatedEvent(msgspec.Struct, kw_only=True):
    part: RawPart


class PartRemovedEvent(Dense, kw_only=True):
    session_id: Id
    message_id: Id
    part_id: Id


class ProgressParams(Dense, kw_only=True):
    """``$/progress``: ``value`` is LSP's work-done begin/report/end object."""

    token: str | int
    value: dict[str, Any]


class LogMessageParams(Dense, kw_only=True):
    """``window/logMessage``: ``type`` is LSP's MessageType (1 error .. 4 log)."""

    type: int
    message: str


# What the engine publishes; ``sidecar.protocol.methods`` names the notification of each type.
Event = (
    CompactedEvent
    | PrunedEvent
    | StatusEvent
    | MessageUpdatedEvent
    | MessageRemovedEvent
    | PartUpdatedEvent
    | PartRemovedEvent
)


# -- requests daemon -> client -----------------------------------------------------------------


class CompactingHookParams(Dense, kw_only=True):
    session_id: Id


class CompactingHookResult(Base, kw_only=True):
    context: list[str] = msgspec.field(default_factory=list)
    prompt: str | None = None


class SummarizerCompleteParams(Dense, kw_only=True):
    system: str
    messages: list[Any]
    max_tokens: int


class SummarizerCompleteResult(Base, kw_only=True):
    text: str
    tokens: Tokens | None = None


# -- history (search and expand) ---------------------------------------------------------------

HistoryKind = Literal["text", "reasoning", "tool"]
SearchLimit = Annotated[int, msgspec.Meta(ge=1, le=200)]
ExpandChars = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]


class HistorySearchParams(Base, kw_only=True):
    """``sessionID`` ``"*"`` searches every session; ``before`` (a message id) limits the search
    to what precedes that message; ``kinds`` to those part kinds. Left out unless
    ``includeRecall``: the recall tools' own calls (``history_search``/``history_expand``,
    whatever prefix a frontend gives them) and each session's open turn (the message being
    answered)."""

    session_id: Id
    query: str
    limit: SearchLimit = 20
    before: Id | None = None
    kinds: Annotated[list[HistoryKind], msgspec.Meta(max_length=3)] | None = None
    include_recall: bool = False


class HistoryHit(Dense, kw_only=True):
    """One matching part, best first. ``tool`` is null for text and reasoning parts; ``time``
    is its message's creation time; ``score`` grows with relevance."""

    session_id: Id
    message_id: Id
    part_id: Id
    role: str
    tool: str | None
    time: int
    snippet: str
    score: float


class HistorySearchResult(Dense, kw_only=True):
    """``partial``: the search ran out of its time budget (``history.searchBudgetMs``);
    ``hits`` are the best of what it had found by then."""

    hits: list[HistoryHit]
    partial: bool = False


class HistoryExpandParams(Base, kw_only=True):
    """A part's original content (a pruned output in full), or with no ``partID`` every indexed
    part of the message in order; paged by characters. ``sessionID`` ``"*"``: wherever the
    message is."""

    session_id: Id
    message_id: Id
    part_id: Id | None = None
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    max_chars: ExpandChars = 20_000


class HistoryExpandResult(Dense, kw_only=True):
    """``content`` is ``[offset, offset + maxChars)`` of the whole; ``nextOffset`` is null at
    the end."""

    message_id: Id
    part_id: Id | None
    role: str
    content: str
    offset: int
    total: int
    next_offset: int | None
