"""What ``sessions --json`` and ``inspect --json`` print: scripts rely on these names."""

from __future__ import annotations

import msgspec

from sidecar.model.base import Dense
from sidecar.model.rpc import BreakdownResult, Diagnostics


class SessionSummary(Dense, kw_only=True):
    """One line of ``sessions``: ``estimatedTokens`` is the size of the current window."""

    id: str
    title: str
    messages: int
    estimated_tokens: int
    compactions: int
    last_activity: int  # ms since the epoch


class TurnPoint(Dense, kw_only=True):
    """One model call: the window the frontend would have sent just before ``messageID``.

    ``reportedTokens`` is what the provider reported for that call (input + cache read +
    output, the count overflow compares), or null when the call reported nothing.
    """

    turn: int
    message_id: str
    time: int
    context_tokens: int
    reported_tokens: int | None = None
    # ``contextTokens`` split as ``session/breakdown`` splits a window (no overhead: the
    # frontend's is not stored per turn).
    categories: dict[str, int] = msgspec.field(default_factory=dict)


class ReplacedMessage(Dense, kw_only=True):
    """A message a summary replaced, as a person recognises it."""

    id: str
    role: str  # "user", "assistant" or "summary" (an earlier compaction's)
    words: str  # its first words (a tool call: the tool and its main argument)


class CompactionEvent(Dense, kw_only=True):
    """``before``: the estimated tokens of the window a frontend would have sent just before
    the compaction (when its marker was written); ``after``: the same right after the summary.
    ``turn``: the number of turns before it, so it sits between ``turn`` and ``turn + 1``.
    ``writer``: who wrote the summary (``provider/model`` or ``extractive``)."""

    turn: int
    marker_id: str
    summary_id: str
    auto: bool
    before: int
    after: int
    time: int
    summary: str
    writer: str = ""
    # What the summary replaced: the window's messages before the marker.
    replaced_ids: list[str] = msgspec.field(default_factory=list)
    replaced: list[ReplacedMessage] = msgspec.field(default_factory=list)
    # What the daemon measured and stored then (``session/compactions``), when it did.
    diagnostics: Diagnostics | None = None


class PruneEvent(Dense, kw_only=True):
    """Tool outputs cleared at one ``time`` (one prune), and the tokens that freed."""

    turn: int
    time: int
    part_ids: list[str] = msgspec.field(default_factory=list)
    tokens_saved: int = 0


class Inspection(Dense, kw_only=True):
    session: SessionSummary
    model: str | None = None
    window: int | None = None  # the model's context window, when known
    usable: int | None = None  # the part of it a prompt may use (overflow's ``usable``)
    # Where window/usable come from: "session" (stored by the daemon's decisions), "catalog",
    # "--context", or null (unknown).
    limits_from: str | None = None
    turns: list[TurnPoint] = msgspec.field(default_factory=list)
    compactions: list[CompactionEvent] = msgspec.field(default_factory=list)
    prunes: list[PruneEvent] = msgspec.field(default_factory=list)
    latest_summary: str | None = None
    # The current window split (``session/breakdown`` as the daemon would answer it now).
    breakdown: BreakdownResult | None = None
