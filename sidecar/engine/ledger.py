"""The artifact ledger: what a compaction must never lose, extracted deterministically.

Summaries written by models are weakest on the *artifact trail* -- which files changed, what
failed and why, which tests ran, what the user asked. The ledger is that trail, built from the
stored parts with no model: files modified (edit/write/patch tools and shell writes, see
``sidecar.toolcalls.shell``), files read, failed commands with their exit status and first error
line, error signatures from tool outputs, tests run with their last status, and the first and the
latest user request verbatim up to ``compaction.taskBudget`` tokens (the task whole: a request cut
short loses what the user expects; a cut says where, at a sentence end).

It rolls across compactions: each summary ends with a fenced ``ledger`` block, which the next
compaction parses back (``parse``) and extends with the newly summarized history (``update``).
Growth is bounded (``bound``): the oldest entries go first, and each kind counts what it dropped.

Why the earlier cycles' ledger lives in the summary text rather than being recomputed from the
stored parts: the history before a compaction is exactly what the window no longer loads (a
full-history read per compaction would break the store's "a read touches only its window"),
imported sessions may carry summaries whose parts were never here, and what is parsed back is
what the next model and the user saw. The cost: a hand-edited summary edits the ledger.

Pure: no I/O, no clock; the same inputs give the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from sidecar.model.messages import UserMessage, WithParts
from sidecar.model.parts import (
    FilePart,
    PatchPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
)
from sidecar.model.tokens import estimate, js_length
from sidecar.summarizers.sections import ERRORS, FILES_MODIFIED, FILES_READ, cut, parse_summary
from sidecar.toolcalls import outputs, shell
from sidecar.toolcalls import vocabulary as tools
from sidecar.toolcalls.vocabulary import (
    EDITOR_TOOLS,
    READ_TOOLS,
    SHELL_TOOLS,
    WRITE_TOOLS,
    is_machinery,
    is_test,
    shell_script,
    tool_name,
    tool_paths,
)

FENCE = "```ledger"
TITLE = "## Artifact ledger"

# Per-entry bounds (characters).
PATH_CHARS = 200
COMMAND_CHARS = 140
ERROR_CHARS = 160
TASK_BUDGET = 2_000  # compaction.taskBudget's default (tokens, both requests together)
SAME = "(the first request again)"
# Of one output's error lines the first and last EDGE are evicted after all the others.
EDGE = 2
# Per-kind entry caps (the token bound of ``bound`` applies on top).
CAPS = {"modified": 400, "read": 400, "failed": 200, "errors": 200, "tests": 100}


class Failure(msgspec.Struct, frozen=True):
    command: str
    status: str  # "exit 2", "error", ...
    error: str = ""


class SuiteRun(msgspec.Struct, frozen=True):
    command: str
    status: str  # "passed", "failed", "exit 1", "ran"


class Ledger(msgspec.Struct, kw_only=True):
    """The stored form (serialised into the summary's fenced block). Lists run oldest first."""

    modified: list[str] = msgspec.field(default_factory=list)
    read: list[str] = msgspec.field(default_factory=list)
    failed: list[Failure] = msgspec.field(default_factory=list)
    errors: list[str] = msgspec.field(default_factory=list)
    tests: list[SuiteRun] = msgspec.field(default_factory=list)
    first_request: str = ""
    latest_request: str = ""
    dropped: dict[str, int] = msgspec.field(default_factory=dict)
    # Error signatures from the middle of one output (not among its first or last ``EDGE``):
    # the first to go when the ledger is over its budget. Not rendered (carried ones count
    # whole).
    inner: list[str] = msgspec.field(default_factory=list)

    def empty(self) -> bool:
        return not (
            self.modified
            or self.read
            or self.failed
            or self.errors
            or self.tests
            or self.first_request
            or self.latest_request
        )


# -- text helpers -------------------------------------------------------------------------------

_WS = re.compile(r"\s+")


def _line(text: str, limit: int) -> str:
    flat = _WS.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _touch(items: list[str], item: str) -> None:
    """Append ``item``; a repeated one moves to the newest position."""
    if not item:
        return
    if item in items:
        items.remove(item)
    items.append(item)


# Exit statuses and error signatures are read the same way by the stubs and the offline writer.
error_signatures = outputs.error_signatures
exit_status = outputs.exit_status
_first_error_line = outputs.first_error_line
_EXIT = outputs.EXIT


# -- tests --------------------------------------------------------------------------------------


def _test_status(code: int | None, output: str, failed: bool) -> str:
    if code is not None:
        return "passed" if code == 0 else f"failed (exit {code})"
    return "failed" if failed else outputs.test_outcome(output)


# -- building -----------------------------------------------------------------------------------


class _Builder:
    def __init__(self, base: Ledger, task_budget: int = TASK_BUDGET) -> None:
        self.task_chars = max(REQUEST_FLOOR, task_budget * 4)
        self.l = msgspec.structs.replace(
            base,
            modified=list(base.modified),
            read=list(base.read),
            failed=list(base.failed),
            errors=list(base.errors),
            tests=list(base.tests),
            dropped=dict(base.dropped),
            inner=list(base.inner),
        )
        self.bodies = shell.Bodies()  # files' text written this cycle (heredocs, write tools)
        self.opened = ""  # the last file opened or created (edit tools without a path)

    def modified(self, paths: Iterable[str]) -> None:
        for p in paths:
            path = _line(p, PATH_CHARS)
            _touch(self.l.modified, path)
            if path in self.l.read:  # "Files read" lists what was only read
                self.l.read.remove(path)

    def read(self, paths: Iterable[str]) -> None:
        for p in paths:
            path = _line(p, PATH_CHARS)
            if path not in self.l.modified:
                _touch(self.l.read, path)

    def user(self, msg: WithParts) -> None:
        texts = [
            p.text
            for p in msg.parts
            if isinstance(p, TextPart)
            and not p.synthetic
            and not p.ignored
            and p.text.strip()
            and not is_machinery(p.text)
        ]
        for p in msg.parts:
            if isinstance(p, FilePart):
                path = (p.source or {}).get("path") if p.source else None
                name = path if isinstance(path, str) and path else p.filename
                if name:
                    self.read([name])
        if not texts:
            return
        text = _WS.sub(" ", "\n".join(texts)).strip()
        if not self.l.first_request:
            self.l.first_request = cut(text, self.task_chars)
        self.l.latest_request = cut(text, self.task_chars)

    def assistant(self, msg: WithParts) -> None:
        for part in msg.parts:
            if isinstance(part, ToolPart):
                self.tool(part)
            elif isinstance(part, PatchPart):
                self.modified(f for f in part.files if f.strip())

    def tool(self, part: ToolPart) -> None:
        state = part.state
        if not isinstance(state, ToolCompleted | ToolError):
            return  # pending / running: nothing happened for sure
        name = tool_name(part.tool)
        data = state.input if isinstance(state.input, dict) else {}
        output = state.output if isinstance(state, ToolCompleted) else state.error
        errored = isinstance(state, ToolError)
        paths = tool_paths(data)
        kind = tools.tool_kind(part.tool, data)
        command = shell_script(data) if name not in EDITOR_TOOLS else ""
        text_action = bool(command.strip()) and not paths and name not in SHELL_TOOLS
        if kind == "shell" or (text_action and name not in READ_TOOLS | WRITE_TOOLS):
            self.shell(command, output, state.metadata, errored)
        elif kind == "code":
            self.code(tools.code_text(data), output, state.metadata, errored)
        elif errored:
            self.signatures(output)
            if not error_signatures(output) and output.strip():
                _touch(self.l.errors, _first_error_line(output))  # the tool's own words
        else:
            if text_action:
                paths = tools.text_action_paths(name, command)
            self._file_tool(name, kind, data, paths, output)

    def _file_tool(
        self, name: str, kind: str, data: dict[str, Any], paths: list[str], output: str
    ) -> None:
        """A completed tool that reads or writes files by name (an editor, write, read)."""
        if name in EDITOR_TOOLS:
            verb = str(data.get("command", "")).lower()
            if verb in ("view", "read", ""):
                self.read(paths)
            else:
                self.modified(paths)
                self._remember(paths, data)
        elif kind == "write":
            if not paths:
                paths = shell.diff_files(tools.patch_text(data))
            shown = _OPEN_FILE.search(output) if not paths else None
            if shown:  # SWE-agent: the tool names the file it edited
                paths = [shown.group(1)]
            if not paths and self.opened and name in tools.OPEN_FILE_ACTIONS:
                paths = [self.opened]
            self.modified(paths)
            self._remember(paths, data)
            if name in ("create", "create_file") and paths:
                self.opened = paths[-1]
        elif kind == "read":
            self.read(paths)
            if paths:
                self.opened = paths[-1]

    def code(self, code: str, output: str, metadata: dict[str, Any] | None, errored: bool) -> None:
        """A cell of a live interpreter: its writes, its ``!shell`` lines, its errors."""
        self.modified(shell.script_writes(code))
        lines = tools.cell_shell(code)
        if lines.strip():
            self.shell(lines, output, metadata, errored)
        else:
            self.signatures(output)

    def _remember(self, paths: list[str], data: dict[str, Any]) -> None:
        """Keep a whole file written by a tool: a script written now may be run later."""
        content = data.get("content", data.get("file_text"))
        if isinstance(content, str) and len(paths) == 1:
            self.bodies.remember(paths[0], content)

    def signatures(self, output: str) -> None:
        sigs = error_signatures(output)
        # the root cause and the final word; a line once at an output's edge stays there
        edges = set(outputs.edge_signatures(output, EDGE)) & set(sigs)
        edges |= {sig for sig in sigs if sig in self.l.errors and sig not in self.l.inner}
        for sig in sigs:
            _touch(self.l.errors, sig)
            if sig in self.l.inner:
                self.l.inner.remove(sig)
            if sig not in edges:
                self.l.inner.append(sig)

    def shell(
        self, command: str, output: str, metadata: dict[str, Any] | None, errored: bool
    ) -> None:
        fx = shell.analyse(command)
        code = exit_status(output, metadata)
        failed = errored or (code is not None and code != 0)
        if failed and not errored and code == 1 and tools.no_match(fx.commands, output):
            failed = False  # a search that found nothing did not fail
        written = self.bodies.writes(fx, output)
        # A failed line surely wrote only its redirection targets (``cat > f <<EOF ... && python
        # f`` that fails in python still created f); a failed ``sed -i`` may have written nothing.
        self.modified(fx.redirected if failed else written)
        self.read(fx.read)
        if failed or tools.runs_something(fx.commands):
            self.signatures(output)
        for cmd in fx.commands:
            if is_test(cmd):
                status = _test_status(code, output, errored)
                test = SuiteRun(command=_line(cmd.text, COMMAND_CHARS), status=status)
                self.l.tests = [t for t in self.l.tests if t.command != test.command]
                self.l.tests.append(test)
        if failed:
            first = _line(command.split("\n", 1)[0], COMMAND_CHARS)
            status = f"exit {code}" if code is not None else "error"
            entry = Failure(command=first, status=status, error=_first_error_line(output))
            self.l.failed = [f for f in self.l.failed if f.command != entry.command]
            self.l.failed.append(entry)


def update(base: Ledger, history: Sequence[WithParts], task_budget: int = TASK_BUDGET) -> Ledger:
    """``base`` extended with what ``history`` (oldest first) did; ``base`` is not changed.
    The first and latest requests share ``task_budget`` tokens (``fit_task``)."""
    b = _Builder(base, task_budget)
    for msg in history:
        if isinstance(msg.info, UserMessage):
            b.user(msg)
        else:
            b.assistant(msg)
    _cap(b.l)
    kept = set(b.l.errors)
    b.l.inner = [sig for sig in b.l.inner if sig in kept]
    fit_task(b.l, task_budget)
    return b.l


def fit_task(led: Ledger, task_budget: int) -> None:
    """The first and the latest request within ``task_budget`` tokens together: the latest is
    kept first (it is what the agent was doing), the first keeps at least a quarter of the
    budget (the goal must not vanish), each cut at a sentence end with a note."""
    chars = max(2 * REQUEST_FLOOR, task_budget * 4)
    first, latest = led.first_request, led.latest_request
    if latest == first:
        led.first_request = led.latest_request = cut(first, chars)
        return
    if len(first) + len(latest) <= chars:
        return
    reserve = min(len(first), chars // 4)
    led.latest_request = cut(latest, max(REQUEST_FLOOR, chars - reserve))
    led.first_request = cut(first, max(REQUEST_FLOOR, chars - len(led.latest_request)))


def _cap(led: Ledger) -> None:
    for kind, cap in CAPS.items():
        items: list[Any] = getattr(led, kind)
        if len(items) > cap:
            led.dropped[kind] = led.dropped.get(kind, 0) + len(items) - cap
            if kind == "errors":  # the middle of an output's errors goes first
                over = len(items) - cap
                inner = set(led.inner)
                gone = [s for s in items if s in inner][:over]
                gone += [s for s in items if s not in inner][: over - len(gone)]
                drop = set(gone)
                items[:] = [s for s in items if s not in drop]
                led.inner = [s for s in led.inner if s not in drop]
            else:
                del items[: len(items) - cap]


# -- rendering, bounding and parsing back -------------------------------------------------------

_HEADINGS = {
    "modified": "Files modified",
    "read": "Files read (and not modified)",
    "failed": "Failed commands",
    "errors": "Error signatures",
    "tests": "Tests run (last status)",
    "first": "First user request",
    "latest": "Latest user request",
}
_KIND_OF = {v: k for k, v in _HEADINGS.items()}
_OPEN_FILE = re.compile(r"^\[File: (\S+) \(\d+ lines total\)\]", re.M)
MORE_ERRORS = "More error lines (from the same outputs)"
_KIND_OF[MORE_ERRORS] = "inner"
_HEAD = re.compile(r"^### (.+?)(?: \((\d+) older dropped\))?$")
_FAILURE = re.compile(r"^\[(.+?)\] (.*?)(?: ⇒ (.*))?$")
_TEST = re.compile(r"^\[(.+?)\] (.*)$")
# Eviction order: the kind whose entries take most room loses its oldest first; modified files
# and the user requests are the last to go.
_EVICTABLE = ("read", "errors", "failed", "tests")


def _items(led: Ledger, kind: str) -> list[str]:
    if kind == "failed":
        return [
            f"[{f.status}] {f.command}" + (f" ⇒ {f.error}" if f.error else "") for f in led.failed
        ]
    if kind == "tests":
        return [f"[{t.status}] {t.command}" for t in led.tests]
    if kind == "first":
        return [led.first_request] if led.first_request else []
    if kind == "latest":
        if led.latest_request and led.latest_request == led.first_request:
            return [SAME]  # said once
        return [led.latest_request] if led.latest_request else []
    items: list[str] = getattr(led, kind)
    return items


def render(led: Ledger) -> str:
    """The fenced, machine-readable ledger block (empty string for an empty ledger; one that
    holds only counts of dropped entries still renders, so the counts survive)."""
    if led.empty() and not led.dropped:
        return ""
    lines = [TITLE, "", FENCE]
    inner = set(led.inner)
    for kind, heading in _HEADINGS.items():
        items = _items(led, kind)
        dropped = led.dropped.get(kind, 0)
        more: list[str] = []
        if kind == "errors" and inner:
            more = [i for i in items if i in inner]
            items = [i for i in items if i not in inner]
        if not items and not dropped and not more:
            continue
        lines.append(f"### {heading}" + (f" ({dropped} older dropped)" if dropped else ""))
        lines.extend(f"- {item}" for item in items)
        if more:  # read back as such: they go first again in a later cycle
            lines.append(f"### {MORE_ERRORS}")
            lines.extend(f"- {item}" for item in more)
    lines.append("```")
    return "\n".join(lines) + "\n"


def _victim(led: Ledger, kind: str) -> int:
    """Which entry of ``kind`` goes: the oldest, except that an error signature a failed
    command already quotes goes before any other (nothing is lost with it)."""
    if kind == "errors":
        quoted = {f.error for f in led.failed}
        for i, sig in enumerate(led.errors):
            if sig in quoted:
                return i
        inner = set(led.inner)
        for i, sig in enumerate(led.errors):
            if sig in inner:
                return i
    return 0


def bound(led: Ledger, max_tokens: int) -> Ledger:
    """A copy of ``led`` whose rendering fits ``max_tokens``: the kind taking most room loses
    its oldest entry first (see ``_victim``), modified files only when nothing else is left,
    the user requests shrink last."""
    out = update(led, [])  # a copy
    limit = max(0, max_tokens) * 4 + 1  # estimate(n chars) <= max_tokens  <=>  n <= 4*max + 1
    while (excess := js_length(render(out)) - limit) > 0:  # UTF-16 units, as ``estimate``
        if not _evict(out, excess):
            break
    while js_length(render(out)) > limit and (
        len(out.first_request) > 2 * REQUEST_FLOOR or len(out.latest_request) > 2 * REQUEST_FLOOR
    ):
        same = out.latest_request == out.first_request
        for attr in ("first_request", "latest_request"):
            value = getattr(out, attr)
            if len(value) > 2 * REQUEST_FLOOR:
                setattr(out, attr, cut(value, max(2 * REQUEST_FLOOR, len(value) // 2)))
        if same:
            out.latest_request = out.first_request
    return out


REQUEST_FLOOR = 40


def _evict(out: Ledger, excess: int) -> bool:
    """Drop entries worth about ``excess`` characters; ``False`` when nothing is left to drop."""
    sizes = {k: sum(len(i) + 3 for i in _items(out, k)) for k in (*_EVICTABLE, "modified")}
    while excess > 0:
        kinds = [k for k in _EVICTABLE if getattr(out, k)] or (["modified"] if out.modified else [])
        if not kinds:
            return False
        kind = max(kinds, key=lambda k: sizes[k])
        items: list[Any] = getattr(out, kind)
        at = _victim(out, kind)
        gone = len(_items(out, kind)[at]) + 3
        del items[at]
        sizes[kind] -= gone
        excess -= gone
        if not out.dropped.get(kind):
            excess += 20  # the "(N older dropped)" note appears
        out.dropped[kind] = out.dropped.get(kind, 0) + 1
    return True


def parse(text: str) -> Ledger | None:
    """The ledger in the last fenced ``ledger`` block of ``text``; ``None`` when there is none."""
    start = text.rfind("\n" + FENCE + "\n")
    if start < 0:
        if not text.startswith(FENCE + "\n"):
            return None
        start = -1
    body = text[start + 1 + len(FENCE) + 1 :]
    end = body.find("\n```")
    if end >= 0:
        body = body[:end]
    led = Ledger()
    kind = ""
    for line in body.splitlines():
        head = _HEAD.match(line)
        if head:
            kind = _KIND_OF.get(head.group(1), "")
            if kind and head.group(2):
                led.dropped[kind] = int(head.group(2))
            continue
        if not line.startswith("- ") or not kind:
            continue
        item = line[2:]
        if kind in ("modified", "read", "errors"):
            getattr(led, kind).append(item)
        elif kind == "inner":
            led.errors.append(item)
            led.inner.append(item)
        elif kind == "failed":
            m = _FAILURE.match(item)
            if m:
                led.failed.append(
                    Failure(command=m.group(2), status=m.group(1), error=m.group(3) or "")
                )
        elif kind == "tests":
            m = _TEST.match(item)
            if m:
                led.tests.append(SuiteRun(command=m.group(2), status=m.group(1)))
        elif kind == "first":
            led.first_request = item
        elif kind == "latest":
            led.latest_request = led.first_request if item == SAME else item
    return led


_BLOCK = re.compile(r"\n*(?:## Artifact ledger\n+)?```ledger\n.*?(?:\n```[ \t]*(?:\n|$)|$)", re.S)


def drop_block(text: str) -> str:
    """``text`` without its ledger block(s) (what a writer sees of an earlier summary)."""
    if FENCE not in text:
        return text
    return _BLOCK.sub("\n", text).rstrip()


def latest(summaries: Sequence[str]) -> Ledger:
    """The ledger of the newest summary that carries one (each is cumulative). A session whose
    summaries predate the ledger starts from the newest one's file and error sections."""
    for text in reversed(summaries):
        found = parse(text)
        if found is not None:
            return found
    newest = next((t for t in reversed(summaries) if t.strip()), "")
    if not newest:
        return Ledger()
    sections = parse_summary(newest).lists
    led = Ledger(
        modified=list(sections[FILES_MODIFIED]),
        read=[p for p in sections[FILES_READ] if p not in sections[FILES_MODIFIED]],
        errors=list(sections[ERRORS]),
    )
    _cap(led)
    return led


def task_tokens(led: Ledger) -> int:
    """The estimated size of the ledger's two requests as rendered (what ``taskBudget`` buys)."""
    lines = [f"### {_HEADINGS[k]}\n- {i}" for k in ("first", "latest") for i in _items(led, k)]
    return estimate("\n".join(lines)) if lines else 0


def tokens(block: str) -> int:
    """The estimated size of a rendered block (OpenCode's estimate, as the window counts it)."""
    return estimate(block)
