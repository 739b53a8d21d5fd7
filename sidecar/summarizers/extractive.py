"""The offline default writer: a structured summary extracted from the parts themselves.

No network, no model, no clock: the same request always gives the same bytes. The summary is
markdown with fixed sections so that a later cycle can parse it back and merge it (a rolling
summary, seed 003): lists are unioned oldest first, so a file modified in the first cycle is still
named after any number of merges, and the text is bounded by ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sidecar.model.messages import WithParts
from sidecar.model.parts import (
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
)
from sidecar.model.tokens import Tokens
from sidecar.summarizers._extract import (
    DIRECTIVE_CHARS,
    OBJECTIVE_CHARS,
    Extractor,
    changed_course,
    current_state,
    goal_of,
    next_steps,
    problems,
)
from sidecar.summarizers._text import estimate_tokens, one_line, to_json, trim
from sidecar.summarizers.base import (
    DEFAULT_PROMPT,
    Progress,
    SummaryRequest,
    SummaryResult,
)
from sidecar.summarizers.sections import (
    COMMANDS,
    CONTEXT,
    DIRECTIVES,
    DONE,
    EARLIER,
    ERRORS,
    FILES_MODIFIED,
    FILES_READ,
    LATEST,
    LEDGER_SECTIONS,
    LISTS,
    NEXT,
    OBJECTIVE,
    OPEN,
    ORDER,
    PARAGRAPHS,
    RESOLVED,
    SCRATCH,
    STATE,
    Sections,
    cut,
    parse_summary,
)
from sidecar.toolcalls import shell

PROVIDER_ID = "extractive"
MODEL_ID = "extractive-v1"
TITLE = "# Summary of the conversation so far"
EMPTY_TEXT = (
    "The conversation so far has no user requests, assistant replies or tool activity to summarize."
)
MIN_MAX_TOKENS = 16

# Trimmed before the paragraphs and before "Files modified", which goes last of all; the
# fixes and the next steps only once the other lists are gone (what a successor needs most).
TRIMMABLE = tuple(name for name in LISTS if name != FILES_MODIFIED)
KEPT_LONGER = frozenset({RESOLVED, NEXT})

# Per-item and per-list caps (the token bound applies on top).
LIST_CAPS = {
    DIRECTIVES: 60,
    CONTEXT: 20,
    DONE: 40,
    SCRATCH: 15,
    RESOLVED: 8,
    FILES_READ: 80,
    COMMANDS: 40,
    ERRORS: 25,
    OPEN: 12,
    EARLIER: 5,
    NEXT: 8,
}


def shell_modified_files(command: str) -> list[str]:
    """Files a shell command line writes (the one shell parser: ``sidecar.toolcalls.shell``)."""
    return shell.analyse(command).written


# -- rendering and the token bound -------------------------------------------------------------


@dataclass
class _Doc:
    objective: str
    state: str
    lists: dict[str, list[str]]
    omitted: dict[str, int]
    latest: str = ""

    def render(self) -> str:
        lines = [TITLE, ""]
        texts = {OBJECTIVE: self.objective, LATEST: self.latest, STATE: self.state}
        for name in ORDER:
            if name in PARAGRAPHS:
                text = texts[name]
                if text:
                    lines += [f"## {name}", "\\" + text if text.startswith("#") else text, ""]
                continue
            items = self.lists[name]
            skipped = self.omitted.get(name, 0)
            if not items:  # a fully trimmed list is dropped, note included
                continue
            lines.append(f"## {name}")
            if skipped:
                lines.append(
                    f"- ({skipped} older {'entry' if skipped == 1 else 'entries'} omitted)"
                )
            lines += [f"- {item}" for item in items]
            lines.append("")
        return "\n".join(lines).rstrip() + "\n"


def _cap_lists(doc: _Doc) -> None:
    for name, cap in LIST_CAPS.items():
        items = doc.lists[name]
        if len(items) > cap:
            doc.omitted[name] = doc.omitted.get(name, 0) + len(items) - cap
            del items[: len(items) - cap]


def _list_chars(doc: _Doc, name: str) -> int:
    return sum(len(item) + 3 for item in doc.lists[name])


def _fit(doc: _Doc, max_tokens: int) -> str:
    """Trim ``doc`` until its estimate fits: the longest trimmable list loses its oldest entry
    first; then the paragraphs shrink; "Files modified" loses entries only after all that; a hard
    cut is the last resort."""
    text = doc.render()
    if estimate_tokens(text) <= max_tokens:
        return text
    budget = max_tokens * 4 + 1  # estimate(n chars) <= max_tokens  <=>  n <= 4*max_tokens + 1
    _trim_lists(doc, len(text) - budget, budget)
    text = doc.render()
    if estimate_tokens(text) <= max_tokens or _shrink_paragraphs(doc, max_tokens):
        return doc.render()
    # Only now do modified files go, oldest first.
    text = doc.render()
    modified = doc.lists[FILES_MODIFIED]
    while estimate_tokens(text) > max_tokens and modified:
        excess, n = len(text) - budget, 0
        while n < len(modified) and excess > 0:
            excess -= len(modified[n]) + 3
            n += 1
        del modified[:n]
        doc.omitted[FILES_MODIFIED] = doc.omitted.get(FILES_MODIFIED, 0) + n
        text = doc.render()
    if estimate_tokens(text) > max_tokens:
        text = text[: budget - 2].rstrip() + "…\n"
    return text


def _trim_lists(doc: _Doc, excess: int, budget: int) -> None:
    """Oldest entries off the longest trimmable list until ``excess`` characters went (tracked
    incrementally, re-checked against the real render)."""
    sizes = {name: _list_chars(doc, name) for name in TRIMMABLE}
    while excess > 0:
        candidates = [n for n in TRIMMABLE if doc.lists[n] and n not in KEPT_LONGER] or [
            n for n in TRIMMABLE if doc.lists[n]
        ]
        if not candidates:
            break
        name = max(candidates, key=lambda n: (sizes[n], -TRIMMABLE.index(n)))
        item = doc.lists[name].pop(0)
        sizes[name] -= len(item) + 3
        excess -= len(item) + 3
        if doc.omitted.get(name, 0) == 0:
            excess += 30  # the "(N older entries omitted)" line appears
        doc.omitted[name] = doc.omitted.get(name, 0) + 1
        if excess <= 0 or not doc.lists[name]:  # an emptied list loses its whole section
            excess = len(doc.render()) - budget


def _shrink_paragraphs(doc: _Doc, max_tokens: int) -> bool:
    """Shorten the paragraphs, the current state first, then the latest request, the goal;
    whether ``doc`` fits now."""
    for attr, caps in (("state", (600, 200, 0)), ("latest", (200, 0)), ("objective", (200, 80))):
        for cap in caps:
            value = getattr(doc, attr)
            if len(value) <= cap and cap:
                continue
            setattr(doc, attr, _shorten(value, cap) if cap else "")
            if estimate_tokens(doc.render()) <= max_tokens:
                return True
    return False


def _shorten(text: str, cap: int) -> str:
    """``text`` cut to ``cap`` characters, whole lines first (the current state's lines)."""
    lines = text.split("\n")
    while len(lines) > 1 and len("\n".join(lines)) > cap:
        lines.pop()
    return trim(lines[0], cap) if len("\n".join(lines)) > cap else "\n".join(lines)


def _extra_context(prompt: str) -> str:
    """Hook context appended to the default prompt (``prompt`` = default + context strings)."""
    stripped = prompt.strip()
    base = DEFAULT_PROMPT.strip()
    if stripped.startswith(base):
        return stripped[len(base) :].strip()
    return ""


def _history_chars(history: Sequence[WithParts]) -> int:
    total = 0
    for msg in history:
        for part in msg.parts:
            if isinstance(part, TextPart):
                total += len(part.text)
            elif isinstance(part, ToolPart):
                total += len(to_json(part.state.input))
                if isinstance(part.state, ToolCompleted):
                    total += len(part.state.output)
                elif isinstance(part.state, ToolError):
                    total += len(part.state.error)
    return total


def _carry(sections: Sections, earlier: list[Sections]) -> dict[str, list[str]]:
    """Each list's entries from earlier summaries, put before this history's own in
    ``sections``; returns what was carried, per list."""
    carried: dict[str, list[str]] = {}
    for name in LISTS:
        old: dict[str, None] = {}
        for e in earlier:
            # an earlier latest request is one of the user's directives once a newer one came
            later = [trim(e.latest, DIRECTIVE_CHARS)] if name == DIRECTIVES and e.latest else []
            for item in [*e.lists[name], *later]:
                old.pop(item, None)
                old[item] = None
        carried[name] = list(old)
        # older entries first; one met again in this history moves to the newest position
        new = sections.lists[name]
        sections.lists[name] = {i: None for i in carried[name] if i not in new} | new
    return carried


def summarize_extractive(req: SummaryRequest) -> str:
    """The summary text of ``req`` (pure function)."""
    sections = Sections()
    ex = Extractor(sections)
    ex.run(req.history)
    # Earlier summaries: merge requests first (collapse), then those met inline (standard).
    earlier = [parse_summary(p) for p in [*req.previous_summaries, *ex.earlier] if p.strip()]
    objective = next((e.objective for e in earlier if e.objective), "")
    latest = next((e.latest for e in reversed(earlier) if e.latest), "")
    state = next((e.state for e in reversed(earlier) if e.state), "")
    carried = _carry(sections, earlier)
    extra = _extra_context(req.prompt)
    if extra:
        sections.add(CONTEXT, trim(extra, 600))
    # Steps and problems carried over are replaced by the newest ones when there are.
    sections.lists[NEXT] = {}
    still, resolved = problems(ex, carried[OPEN])
    sections.lists[OPEN] = {i: None for i in still}
    sections.extend(RESOLVED, resolved)
    objective = goal_of(req, objective, ex)
    if objective:
        sections.lists[DIRECTIVES].pop(trim(objective, DIRECTIVE_CHARS), None)
    if ex.last_user_text:
        latest = cut(one_line(ex.last_user_text), OBJECTIVE_CHARS)
    if not changed_course(objective, latest):
        latest = ""
    if latest:
        sections.lists[DIRECTIVES].pop(trim(latest, DIRECTIVE_CHARS), None)
    for change in ex.changes.files.values():
        sections.add(SCRATCH if change.scratch() else DONE, change.what())
        sections.add(FILES_MODIFIED, change.path)
    state = current_state(ex, state)
    steps = next_steps(ex) if req.history else []
    sections.extend(NEXT, steps or carried[NEXT])
    lists = {name: list(sections.lists[name]) for name in LISTS}
    if req.ledger:  # the engine's artifact ledger follows this text: no second copy of it
        for name in LEDGER_SECTIONS:
            lists[name] = []
    if not objective and not state and not any(lists.values()):
        return EMPTY_TEXT
    doc = _Doc(objective=objective, latest=latest, state=state, lists=lists, omitted={})
    _cap_lists(doc)
    return _fit(doc, max(MIN_MAX_TOKENS, req.max_tokens))


class ExtractiveSummarizer:
    """Offline, deterministic writer; the engine passes typed history (``wire_format`` parts)."""

    provider_id = PROVIDER_ID
    model_id = MODEL_ID
    wire_format: Literal["parts"] = "parts"

    def input_limit(self) -> int | None:
        return None

    async def summarize(
        self, req: SummaryRequest, progress: Progress | None = None
    ) -> SummaryResult:
        text = summarize_extractive(req)
        if progress is not None:
            progress(len(text))
        history_tokens = (_history_chars(req.history) + 2) // 4
        tokens = Tokens(
            input=history_tokens + sum(estimate_tokens(s) for s in req.previous_summaries),
            output=estimate_tokens(text),
        )
        return SummaryResult(text=text, tokens=tokens, provider_id=PROVIDER_ID, model_id=MODEL_ID)

    async def aclose(self) -> None:
        return None
