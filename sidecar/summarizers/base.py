"""The summary-writer contract: request/result types, errors, prompts and the factory.

A *summarizer* turns an already filtered, already rendered history into one summary text. The
engine decides what to summarize (standard: everything; collapse: the oldest slice, with the
newest slice as reference and earlier summaries to merge); writers only write.

Layering: this package depends on ``sidecar.model`` only. It never imports the engine, the server
or the store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from sidecar.model.conversation import DEFAULT_PROMPT as DEFAULT_PROMPT  # its home; re-exported
from sidecar.model.messages import WithParts
from sidecar.model.rpc import SummarizerCompleteParams, SummarizerCompleteResult
from sidecar.model.tokens import Tokens
from sidecar.summarizers._text import transcript, transcript_from_rendered

WireFormat = Literal["parts", "openai", "anthropic"]
Progress = Callable[[int], None]
ClientCall = Callable[[SummarizerCompleteParams], Awaitable[SummarizerCompleteResult]]

# -- prompts (seed 000, in meaning) -------------------------------------------------------------


NO_TOOLS = "Do not call any tools. Respond only with the summary text."
"""Some proxies require ``tools`` whenever the history holds tool calls and then the model calls
a stub instead of writing (OpenCode #18053, fixed by #18539): writers send no tools and say so."""

COMPACTION_SYSTEM = (
    "You are a helpful AI assistant tasked with summarizing conversations.\n"
    "\n"
    "Provide a detailed but concise summary of the conversation.\n"
    "\n"
    "Capture:\n"
    "- Completed actions and current work in progress\n"
    "- Modified files and technical decisions with rationale\n"
    "- Upcoming tasks and user-specific requirements or constraints\n"
    "- Persistent preferences affecting the conversation\n"
    "\n"
    "Balance: comprehensive enough to provide context, but concise enough to be quickly "
    "understood.\n"
    "\n" + NO_TOOLS
)
"""System prompt of the hidden ``compaction`` agent."""

MERGE_INSTRUCTION = (
    "Earlier parts of this conversation were already compacted. Their summaries follow, oldest "
    "first. Your summary replaces all of them: merge them with the conversation above into ONE "
    "consolidated summary. Keep every user directive and preference, every modified file, design "
    "decisions and lessons learned, and working code blocks verbatim; drop only what later "
    "messages supersede. Do not summarize the summaries separately."
)
"""Introduces ``previous_summaries`` (collapse, seed 003: a rolling summary across cycles)."""

REFERENCE_INSTRUCTION = (
    "REFERENCE ONLY: the most recent messages of the conversation follow. They stay in the "
    "context verbatim after your summary, so do not summarize them; use them only to understand "
    "where the conversation is heading and what the summary must connect to."
)
"""Introduces ``reference`` (collapse: the newest slice, shown but not summarized)."""


STRUCTURED_SUMMARY = (
    "Write the summary in these markdown sections, in this order: ## Goal, ## Decisions, "
    "## Current state, ## Files, ## Errors, ## Next steps. If a previous summary is given, "
    "update it: keep what still holds, change what the conversation changed, and add what is "
    "new. Name files by path and quote error messages exactly. An artifact ledger (files "
    "modified and read, failed commands, errors, tests, the user's requests) is appended to "
    "your summary automatically, so do not copy it; explain what the entries mean instead."
)
"""Sections every model-written summary uses (appended to the system prompt by the engine, so
the final user prompt stays OpenCode's own)."""


def with_no_tools(system: str) -> str:
    """``system`` with the no-tools line appended unless it already says so."""
    system = system.rstrip()
    if NO_TOOLS in system:
        return system
    return f"{system}\n\n{NO_TOOLS}" if system else NO_TOOLS


# -- request / result ---------------------------------------------------------------------------


class SummaryRequest(msgspec.Struct, kw_only=True):
    """Everything a writer needs; built by the engine.

    ``rendered`` is ``history`` rendered in the writer's ``wire_format`` (empty for ``parts``
    writers such as the extractive one); ``reference_rendered`` likewise for ``reference``.
    """

    system: str
    prompt: str
    history: list[WithParts]
    rendered: list[dict[str, Any]]
    max_tokens: int
    previous_summaries: list[str] = msgspec.field(default_factory=list)
    reference: list[WithParts] = msgspec.field(default_factory=list)
    reference_rendered: list[dict[str, Any]] = msgspec.field(default_factory=list)
    ledger: str = ""
    """The artifact ledger block the engine appends to the summary (a writer that lists
    artifacts itself, such as the extractive one, leaves them to it)."""

    @property
    def writer_system(self) -> str:
        """``system`` as a model writer sends it: with the no-tools line (``with_no_tools``)."""
        return with_no_tools(self.system)


class SummaryResult(msgspec.Struct):
    text: str
    tokens: Tokens
    provider_id: str
    model_id: str


class SummaryError(Exception):
    """A summary could not be written. ``retryable`` says whether trying later may succeed.

    The message is short and safe to show and log: it never contains an API key or a header.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message


class EmptySummaryError(SummaryError):
    """The model answered with no text (reasoning only, a tool call, whitespace): OpenCode #41571.
    Committing it would silently drop the history, so the compaction must fail instead."""

    def __init__(self, message: str = "the summarizer returned an empty summary") -> None:
        super().__init__(message, retryable=False)


@runtime_checkable
class Summarizer(Protocol):
    provider_id: str
    model_id: str

    @property
    def wire_format(self) -> WireFormat:
        """How the engine renders history for this writer (read-only: each writer fixes one)."""
        ...

    def input_limit(self) -> int | None:
        """Most input tokens this writer accepts (``None``: unknown / unbounded)."""
        ...

    async def summarize(
        self, req: SummaryRequest, progress: Progress | None = None
    ) -> SummaryResult:
        """Write the summary; ``progress`` receives the output characters so far."""
        ...

    async def aclose(self) -> None: ...


# -- helpers for chat-style writers -------------------------------------------------------------


def reference_text(req: SummaryRequest) -> str | None:
    """The "reference only" block for ``req.reference`` as plain text, or ``None``."""
    if req.reference:
        body = transcript(req.reference)
    elif req.reference_rendered:
        body = transcript_from_rendered(req.reference_rendered)
    else:
        return None
    if not body.strip():
        return None
    return f"{REFERENCE_INSTRUCTION}\n\n<reference>\n{body}\n</reference>"


def previous_summaries_text(req: SummaryRequest) -> str | None:
    """The block asking to merge ``req.previous_summaries`` (oldest first), or ``None``."""
    summaries = [s.strip() for s in req.previous_summaries if s and s.strip()]
    if not summaries:
        return None
    blocks = "\n\n".join(
        f'<previous-summary n="{i}">\n{text}\n</previous-summary>'
        for i, text in enumerate(summaries, 1)
    )
    return f"{MERGE_INSTRUCTION}\n\n{blocks}"


def extra_user_texts(req: SummaryRequest) -> list[str]:
    """Texts sent after the history and before the prompt: reference, then previous summaries."""
    return [t for t in (reference_text(req), previous_summaries_text(req)) if t]


def chat_messages(req: SummaryRequest) -> list[dict[str, Any]]:
    """OpenAI-shaped conversation (no system): history, extra blocks, then the prompt."""
    messages: list[dict[str, Any]] = list(req.rendered)
    messages.extend({"role": "user", "content": text} for text in extra_user_texts(req))
    messages.append({"role": "user", "content": req.prompt})
    return messages
