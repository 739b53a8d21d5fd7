"""Summary writers: extractive (offline default), OpenAI-compatible, Anthropic, client-delegated.

Depends on ``sidecar.model`` only; the engine renders the history and calls a writer through the
:class:`~sidecar.summarizers.base.Summarizer` protocol.
"""

from sidecar.summarizers.base import (
    COMPACTION_SYSTEM,
    DEFAULT_PROMPT,
    MERGE_INSTRUCTION,
    NO_TOOLS,
    REFERENCE_INSTRUCTION,
    EmptySummaryError,
    Summarizer,
    SummaryError,
    SummaryRequest,
    SummaryResult,
)
from sidecar.summarizers.factory import build_summarizer

__all__ = [
    "COMPACTION_SYSTEM",
    "DEFAULT_PROMPT",
    "MERGE_INSTRUCTION",
    "NO_TOOLS",
    "REFERENCE_INSTRUCTION",
    "EmptySummaryError",
    "Summarizer",
    "SummaryError",
    "SummaryRequest",
    "SummaryResult",
    "build_summarizer",
]
