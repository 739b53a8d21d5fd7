"""Message parts, a tagged union on ``type`` (OpenCode MessageV2 names and shapes).

Every part carries ``id``, ``sessionID`` and ``messageID``. ``id`` may be left empty by a client;
the daemon then assigns an ascending one.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.model.base import Base, Count
from sidecar.model.tokens import Tokens

JSONObject = dict[str, Any]


class PartTime(Base, kw_only=True):
    start: Count | None = None
    end: Count | None = None


class ToolTime(Base, kw_only=True):
    start: Count | None = None
    end: Count | None = None
    compacted: Count | None = None


class PartBase(Base, tag_field="type", kw_only=True, weakref=True):
    # Weakly referenceable: the engine's memos watch decoded parts without keeping them
    # alive (``engine/memo.py``).
    id: str = ""
    session_id: str
    message_id: str


# -- tool states -------------------------------------------------------------------------------


class ToolStateBase(Base, tag_field="status", kw_only=True):
    input: JSONObject


class ToolPending(ToolStateBase, tag="pending", kw_only=True):
    raw: str | None = None


class ToolRunning(ToolStateBase, tag="running", kw_only=True):
    title: str | None = None
    metadata: JSONObject | None = None
    time: ToolTime | None = None


class ToolCompleted(ToolStateBase, tag="completed", kw_only=True):
    output: str = ""
    title: str | None = None
    metadata: JSONObject | None = None
    time: ToolTime = msgspec.field(default_factory=ToolTime)
    attachments: list[FilePart] | None = None


class ToolError(ToolStateBase, tag="error", kw_only=True):
    error: str = ""
    metadata: JSONObject | None = None
    time: ToolTime | None = None


ToolState = ToolPending | ToolRunning | ToolCompleted | ToolError


# -- parts -------------------------------------------------------------------------------------


class TextPart(PartBase, tag="text", kw_only=True):
    text: str = ""
    synthetic: bool | None = None
    ignored: bool | None = None
    time: PartTime | None = None
    metadata: JSONObject | None = None


class ReasoningPart(PartBase, tag="reasoning", kw_only=True):
    text: str = ""
    time: PartTime | None = None
    metadata: JSONObject | None = None


class FilePart(PartBase, tag="file", kw_only=True):
    mime: str
    url: str = ""
    filename: str | None = None
    source: JSONObject | None = None


class ToolPart(PartBase, tag="tool", kw_only=True):
    call_id: str
    tool: str
    state: ToolState
    metadata: JSONObject | None = None


class StepStartPart(PartBase, tag="step-start", kw_only=True):
    snapshot: str | None = None


class StepFinishPart(PartBase, tag="step-finish", kw_only=True):
    reason: str = ""
    snapshot: str | None = None
    cost: float = 0.0
    tokens: Tokens = msgspec.field(default_factory=Tokens)


class SnapshotPart(PartBase, tag="snapshot", kw_only=True):
    snapshot: str = ""


class PatchPart(PartBase, tag="patch", kw_only=True):
    hash: str = ""
    files: list[str] = msgspec.field(default_factory=list)


class AgentPart(PartBase, tag="agent", kw_only=True):
    name: str
    source: JSONObject | None = None


class RetryPart(PartBase, tag="retry", kw_only=True):
    attempt: Count
    error: JSONObject = msgspec.field(default_factory=dict)
    time: JSONObject | None = None


class CompactionPart(PartBase, tag="compaction", kw_only=True):
    """Marks a user message as a compaction request.

    ``tail_start_id`` (wire ``tailStartID``) is set by collapse compaction: the first message
    kept verbatim after the summary. OpenCode >= 1.14 writes its own kept tail as
    ``tail_start_id`` (snake_case on the wire: ``opencode_tail_start_id`` here); ``tail``
    is whichever is set.
    """

    auto: bool = False
    overflow: bool | None = None
    tail_start_id: str | None = None
    opencode_tail_start_id: str | None = msgspec.field(default=None, name="tail_start_id")

    @property
    def tail(self) -> str | None:
        """The first message kept verbatim after the summary, if the marker keeps a tail."""
        return self.tail_start_id or self.opencode_tail_start_id


class SubtaskPart(PartBase, tag="subtask", kw_only=True):
    prompt: str = ""
    description: str = ""
    agent: str = ""
    model: JSONObject | None = None
    command: str | None = None


Part = (
    TextPart
    | ReasoningPart
    | FilePart
    | ToolPart
    | StepStartPart
    | StepFinishPart
    | SnapshotPart
    | PatchPart
    | AgentPart
    | RetryPart
    | CompactionPart
    | SubtaskPart
)
