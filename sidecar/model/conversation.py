"""What a message is in the compaction timeline, and the texts OpenCode renders in place of
what it hides: defined once, because the store, the filter, the compactor, the renderers and
the tools must all agree on them (PROTOCOL.md, "Engine rules")."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.model.messages import AssistantMessage, Message, UserMessage, WithParts
from sidecar.model.parts import CompactionPart, TextPart

# OpenCode's placeholders (PROTOCOL.md, "Engine rules", context rendering).
CLEARED = "[Old tool result content cleared]"
COMPACTION_TEXT = "What did we do so far?"
INTERRUPTED = "[Tool execution was interrupted]"
CONTINUE_TEXT = "Continue if you have next steps"
DEFAULT_PROMPT = (
    "Provide a detailed prompt for continuing our conversation above. "
    "Focus on information that would be helpful for continuing the conversation, including what "
    "we did, what we're doing, which files we're working on, and what we're going to do next "
    "considering new session will not have access to our conversation."
)
"""The final user instruction of a standard compaction: seed 000's text word for word, on one
line as OpenCode 1.1.53 sends it (checked against a recorded request)."""


def compaction_part(msg: WithParts) -> CompactionPart | None:
    """The ``compaction`` part that makes a user message a compaction marker."""
    if not isinstance(msg.info, UserMessage):
        return None
    for part in msg.parts:
        if isinstance(part, CompactionPart):
            return part
    return None


def is_marker(msg: WithParts) -> bool:
    return compaction_part(msg) is not None


def is_summary(msg: WithParts) -> bool:
    """A summary attempt (finished or not) of some compaction."""
    return isinstance(msg.info, AssistantMessage) and bool(msg.info.summary)


def is_continue(msg: WithParts) -> bool:
    """The synthetic "continue" user message an automatic compaction ends with."""
    return (
        isinstance(msg.info, UserMessage)
        and len(msg.parts) == 1
        and isinstance(msg.parts[0], TextPart)
        and bool(msg.parts[0].synthetic)
        and msg.parts[0].text == CONTINUE_TEXT
    )


def is_finished_summary(info: Message) -> bool:
    """A finished, error-free compaction summary: the only kind that cuts history."""
    return (
        isinstance(info, AssistantMessage)
        and bool(info.summary)
        and bool(info.finish)
        and info.error is None
    )


def answers(msg: WithParts, marker_id: str) -> bool:
    """A summary attempt for the marker ``marker_id``."""
    info = msg.info
    return isinstance(info, AssistantMessage) and bool(info.summary) and info.parent_id == marker_id


def latest_model_turn(window: Sequence[WithParts]) -> AssistantMessage | None:
    """The newest assistant message the model wrote (not a summary): whose model the session
    talks to."""
    for m in reversed(window):
        info = m.info
        if isinstance(info, AssistantMessage) and not info.summary and info.model_id:
            return info
    return None


def writer_name(provider_id: str, model_id: str) -> str:
    """Who wrote a summary, as ``session/compacted``'s ``writer`` and ``inspect`` show it:
    ``provider/model``, or ``extractive`` for the offline writer."""
    return "extractive" if provider_id == "extractive" else f"{provider_id}/{model_id}"
