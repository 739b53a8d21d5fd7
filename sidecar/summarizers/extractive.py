"""The offline default writer: a structured summary extracted from the parts themselves.

No network, no model, no clock: the same request always gives the same bytes. The summary is
markdown with fixed sections so that a later cycle can parse it back and merge it (a rolling
summary, seed 003): lists are unioned oldest first, so a file modified in the first cycle is still
named after any number of merges, and the text is bounded by ``max_tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import (
    FilePart,
    PatchPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
)
from sidecar.model.tokens import Tokens
from sidecar.summarizers._text import estimate_tokens, first_line, one_line, to_json, trim
from sidecar.summarizers.base import (
    DEFAULT_PROMPT,
    Progress,
    SummaryRequest,
    SummaryResult,
)
from sidecar.toolcalls import shell
from sidecar.toolcalls.vocabulary import (
    EDITOR_TOOLS,
    READ_TOOLS,
    SHELL_TOOLS,
    TODO_TOOLS,
    WRITE_TOOLS,
    is_machinery,
    patch_text,
    shell_script,
    tool_name,
    tool_paths,
)

PROVIDER_ID = "extractive"
MODEL_ID = "extractive-v1"
TITLE = "# Summary of the conversation so far"
EMPTY_TEXT = (
    "The conversation so far has no user requests, assistant replies or tool activity to summarize."
)
MIN_MAX_TOKENS = 16

# Section names, in output order. Paragraph sections hold one text; the rest are lists.
OBJECTIVE = "Objective"
DIRECTIVES = "User directives"
CONTEXT = "Additional context"
FILES_READ = "Files read"
FILES_MODIFIED = "Files modified"
COMMANDS = "Commands run"
ERRORS = "Errors"
EARLIER = "Earlier summaries"
STATE = "Current state"
NEXT = "Next steps"
ORDER = (
    OBJECTIVE,
    DIRECTIVES,
    CONTEXT,
    FILES_READ,
    FILES_MODIFIED,
    COMMANDS,
    ERRORS,
    EARLIER,
    STATE,
    NEXT,
)
PARAGRAPHS = frozenset({OBJECTIVE, STATE})
LEDGER_SECTIONS = (FILES_READ, FILES_MODIFIED, COMMANDS, ERRORS)  # what the ledger carries
LISTS = tuple(name for name in ORDER if name not in PARAGRAPHS)
# Trimmed before the paragraphs and before "Files modified", which goes last of all.
TRIMMABLE = tuple(name for name in LISTS if name != FILES_MODIFIED)

# Per-item and per-list caps (the token bound applies on top).
OBJECTIVE_CHARS = 400
DIRECTIVE_CHARS = 300
STATE_CHARS = 1_500
ITEM_CHARS = 240
EARLIER_CHARS = 600
LIST_CAPS = {
    DIRECTIVES: 60,
    CONTEXT: 20,
    FILES_READ: 80,
    COMMANDS: 40,
    ERRORS: 25,
    EARLIER: 5,
    NEXT: 8,
}
NEXT_FROM_TEXT = 4

_OMITTED = re.compile(r"^\(\d+ older entr(?:y|ies) omitted\)$")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.*)$")
_ALIASES = {name.lower(): name for name in ORDER} | {
    "goal": OBJECTIVE,
    "task": OBJECTIVE,
    "objectives": OBJECTIVE,
    "user requests": DIRECTIVES,
    "directives": DIRECTIVES,
    "user preferences": DIRECTIVES,
    "modified files": FILES_MODIFIED,
    "files changed": FILES_MODIFIED,
    "changed files": FILES_MODIFIED,
    "files edited": FILES_MODIFIED,
    "read files": FILES_READ,
    "commands": COMMANDS,
    "errors encountered": ERRORS,
    "current status": STATE,
    "state": STATE,
    "next step": NEXT,
    "todo": NEXT,
    "todos": NEXT,
}

_NEXT_HINT = re.compile(
    r"\b(next|todo|remaining|still need|need to|will now|i will|i'll|then|should|plan)\b", re.I
)


def shell_modified_files(command: str) -> list[str]:
    """Files a shell command line writes (the one shell parser: ``sidecar.toolcalls.shell``)."""
    return shell.analyse(command).written


# -- extraction ---------------------------------------------------------------------------------


@dataclass
class Sections:
    objective: str = ""
    state: str = ""
    lists: dict[str, dict[str, None]] = field(default_factory=lambda: {n: {} for n in LISTS})

    def add(self, name: str, item: str) -> None:
        item = one_line(item)
        if item and not _OMITTED.match(item):
            bucket = self.lists[name]
            bucket.pop(item, None)  # a repeated item moves to the newest position
            bucket[item] = None

    def extend(self, name: str, items: Iterable[str]) -> None:
        for item in items:
            self.add(name, item)


def parse_summary(text: str) -> Sections:
    """Sections of an earlier summary (ours or a model's markdown); unknown prose is kept as one
    "Earlier summaries" entry so that nothing silently disappears."""
    sections = Sections()
    current: str | None = None
    paragraph: dict[str, list[str]] = {OBJECTIVE: [], STATE: []}
    stray: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("\\#"):  # an escaped paragraph that starts with "#"
            line = line[1:]
            heading = None
        else:
            heading = _HEADING.match(line)
        if heading:
            current = _ALIASES.get(one_line(heading.group(1)).rstrip(":").lower())
            continue
        if not line.strip():
            continue
        if current is None:
            stray.append(line)
        elif current in PARAGRAPHS:
            item = _ITEM.match(line)
            paragraph[current].append(item.group(1) if item else line)
        else:
            item = _ITEM.match(line)
            sections.add(current, item.group(1) if item else line)
    sections.objective = one_line(" ".join(paragraph[OBJECTIVE]))
    sections.state = one_line(" ".join(paragraph[STATE]))
    prose = one_line(" ".join(stray))
    if prose:  # prose outside the known sections (a model-written summary): keep its gist
        sections.add(EARLIER, trim(prose, EARLIER_CHARS))
    return sections


class _Extractor:
    def __init__(self, sections: Sections) -> None:
        self.s = sections
        self.first_user: str = ""
        self.last_assistant_text: str = ""
        self.last_user_text: str = ""
        self.last_is_user = False
        self.todos: list[str] | None = None

    def run(self, history: Sequence[WithParts]) -> None:
        for msg in history:
            if isinstance(msg.info, UserMessage):
                self._user(msg)
            else:
                self._assistant(msg)

    def _user(self, msg: WithParts) -> None:
        texts: list[str] = []
        for part in msg.parts:
            if isinstance(part, TextPart):
                if part.ignored or part.synthetic or not part.text.strip():
                    continue
                if is_machinery(part.text):
                    continue
                texts.append(part.text)
            elif isinstance(part, FilePart):
                path = (part.source or {}).get("path") if part.source else None
                name = path if isinstance(path, str) and path else part.filename
                if name:
                    self.s.add(FILES_READ, name)
            elif isinstance(part, SubtaskPart):
                what = part.description or part.prompt
                if what.strip():
                    self.s.add(DIRECTIVES, "(subtask) " + trim(what, DIRECTIVE_CHARS))
        if not texts:
            return
        joined = "\n".join(texts)
        if not self.first_user:
            self.first_user = joined
        self.last_user_text = joined
        self.last_is_user = True
        for text in texts:
            self.s.add(DIRECTIVES, trim(text, DIRECTIVE_CHARS))

    def _assistant(self, msg: WithParts) -> None:
        info = msg.info
        assert isinstance(info, AssistantMessage)
        texts: list[str] = []
        for part in msg.parts:
            if isinstance(part, TextPart):
                if not part.ignored and not part.synthetic and part.text.strip():
                    texts.append(part.text)
            elif isinstance(part, ToolPart):
                self._tool(part)
            elif isinstance(part, PatchPart):
                self.s.extend(FILES_MODIFIED, (f for f in part.files if f.strip()))
        if texts:
            self.last_assistant_text = "\n".join(texts)
            self.last_is_user = False
        elif any(isinstance(p, ToolPart) for p in msg.parts):
            self.last_is_user = False
        if info.error is not None:
            data = info.error.data or {}
            detail = data.get("message") if isinstance(data, dict) else None
            self.s.add(
                ERRORS,
                trim(
                    f"assistant {info.error.name}" + (f": {detail}" if detail else ""), ITEM_CHARS
                ),
            )

    def _tool(self, part: ToolPart) -> None:
        name = tool_name(part.tool)
        state = part.state
        data = state.input if isinstance(state.input, dict) else {}
        if isinstance(state, ToolError):
            target = ", ".join(tool_paths(data)[:2])
            if name in SHELL_TOOLS:
                cmd = _command(data)
                self.s.add(COMMANDS, _command_item(cmd, "error", state.error))
            label = f"{part.tool}" + (f" {target}" if target else "")
            self.s.add(ERRORS, trim(f"{label}: {first_line(state.error, ITEM_CHARS)}", ITEM_CHARS))
            return
        if not isinstance(state, ToolCompleted):
            return  # pending / running: interrupted, nothing happened for sure
        if name in SHELL_TOOLS:
            cmd = _command(data)
            meta = state.metadata or {}
            code = meta.get("exit", meta.get("exitCode", meta.get("exit_code")))
            failed = isinstance(code, int) and code != 0
            outcome = f"exit {code}" if failed else "ok"
            output = "" if state.time.compacted else state.output
            self.s.add(COMMANDS, _command_item(cmd, outcome, output))
            if not failed:
                self.s.extend(FILES_MODIFIED, shell_modified_files(cmd))
            return
        if name in TODO_TOOLS:
            todos = data.get("todos")
            if isinstance(todos, list):
                self.todos = [
                    trim(str(t.get("content", "")), ITEM_CHARS)
                    for t in todos
                    if isinstance(t, dict)
                    and str(t.get("status", "pending")) not in ("completed", "cancelled", "done")
                    and str(t.get("content", "")).strip()
                ]
            return
        paths = tool_paths(data)
        if name in EDITOR_TOOLS:
            verb = str(data.get("command", "")).lower()
            target = FILES_READ if verb in ("view", "read", "") else FILES_MODIFIED
            self.s.extend(target, paths)
        elif name in WRITE_TOOLS or "patch" in name:
            self.s.extend(FILES_MODIFIED, paths or shell.diff_files(patch_text(data)))
        elif name in READ_TOOLS:
            self.s.extend(FILES_READ, paths)


def _command(data: dict[str, Any]) -> str:
    return shell_script(data) or to_json(data)


def _command_item(cmd: str, outcome: str, output: str) -> str:
    head = f"$ {trim(cmd, 160)} → {outcome}"
    line = first_line(output, 100)
    return f"{head}: {line}" if line else head


def _next_steps(ex: _Extractor) -> list[str]:
    steps: list[str] = []
    if ex.last_is_user and ex.last_user_text:
        steps.append("Answer the latest user request: " + trim(ex.last_user_text, ITEM_CHARS))
    if ex.todos:
        steps.extend(ex.todos)
    if ex.last_assistant_text:
        found = 0
        for chunk in re.split(r"\n+|(?<=[.!?])\s+", ex.last_assistant_text):
            line = _ITEM.match(chunk)
            text = one_line(line.group(1) if line else chunk)
            if len(text) > 8 and _NEXT_HINT.search(text):
                steps.append(trim(text, ITEM_CHARS))
                found += 1
                if found >= NEXT_FROM_TEXT:
                    break
    return steps


# -- rendering and the token bound -------------------------------------------------------------


@dataclass
class _Doc:
    objective: str
    state: str
    lists: dict[str, list[str]]
    omitted: dict[str, int]

    def render(self) -> str:
        lines = [TITLE, ""]
        for name in ORDER:
            if name in PARAGRAPHS:
                text = self.objective if name == OBJECTIVE else self.state
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
    excess = len(text) - budget  # tracked incrementally, re-checked against the real render
    sizes = {name: _list_chars(doc, name) for name in TRIMMABLE}
    while excess > 0:
        candidates = [n for n in TRIMMABLE if doc.lists[n]]
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
            text = doc.render()
            excess = len(text) - budget
    text = doc.render()
    if estimate_tokens(text) <= max_tokens:
        return text
    # Then the paragraphs shrink: the current state first, then the objective.
    for attr, caps in (("state", (600, 200, 0)), ("objective", (200, 80))):
        for cap in caps:
            value = getattr(doc, attr)
            if len(value) <= cap and cap:
                continue
            setattr(doc, attr, trim(value, cap) if cap else "")
            text = doc.render()
            if estimate_tokens(text) <= max_tokens:
                return text
    # Only now do modified files go, oldest first.
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


def summarize_extractive(req: SummaryRequest) -> str:
    """The summary text of ``req`` (pure function)."""
    sections = Sections()
    objective = ""
    state = ""
    for previous in req.previous_summaries:
        if not previous or not previous.strip():
            continue
        parsed = parse_summary(previous)
        objective = objective or parsed.objective
        state = parsed.state or state
        for name in LISTS:
            sections.extend(name, parsed.lists[name])
    extra = _extra_context(req.prompt)
    if extra:
        sections.add(CONTEXT, trim(extra, 600))
    # Steps carried over from earlier summaries are replaced by the newest ones when there are.
    carried_next = list(sections.lists[NEXT])
    sections.lists[NEXT] = {}
    ex = _Extractor(sections)
    ex.run(req.history)
    objective = objective or trim(ex.first_user, OBJECTIVE_CHARS)
    if objective:
        sections.lists[DIRECTIVES].pop(trim(objective, DIRECTIVE_CHARS), None)
    if ex.last_assistant_text:
        state = trim(ex.last_assistant_text, STATE_CHARS)
    steps = _next_steps(ex) if req.history else []
    sections.extend(NEXT, steps or carried_next)
    lists = {name: list(sections.lists[name]) for name in LISTS}
    if req.ledger:  # the engine's artifact ledger follows this text: no second copy of it
        for name in LEDGER_SECTIONS:
            lists[name] = []
    if not objective and not state and not any(lists.values()):
        return EMPTY_TEXT
    if not lists[NEXT]:
        lists[NEXT] = ["Continue the work described under Current state."] if state else []
    doc = _Doc(objective=objective, state=state, lists=lists, omitted={})
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
