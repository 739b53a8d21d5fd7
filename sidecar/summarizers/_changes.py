"""What the offline writer says was done: changes rather than files, and problems with their fixes.

Each changed file is told once, with what changed in it -- an edit's first changed line (old ->
new), a write's role (a new file and its size), the command that changed it -- and the reason the
assistant gave just before (a sentence saying why). Files written only to reproduce or probe
(created, then run or deleted, never edited again) are told apart from the fix.

A failure is answered by a later success of the same thing: the same command (its ``cd`` and
viewer pipes aside), a test run naming the same test file (or the whole suite), the same tool on
the same file. An answered failure is paired with what changed between the two runs.

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sidecar.summarizers._text import one_line, trim
from sidecar.toolcalls import shell
from sidecar.toolcalls.commands import classify, is_test

SIDE_CHARS = 80  # each side of an edit's "old -> new"
REASON_CHARS = 220
PAIR_CHARS = 520
LAST_ERROR_CHARS = 110
HOWS = 3  # the commands named per changed file (the newest)

OLD_KEYS = ("oldString", "old_string", "old_str", "search", "old", "old_text")
NEW_KEYS = (
    "newString",
    "new_string",
    "new_str",
    "replace",
    "new",
    "replacement",
    "new_text",
    "text",
)
CONTENT_KEYS = ("content", "file_text", "contents")

# A sentence that says why: "because", "so that", "the issue is", "to fix", "root cause".
_WHY = re.compile(
    r"\b(?:because|since|so that|in order to|to (?:fix|handle|avoid|make sure|ensure|support|"
    r"prevent|allow|resolve|address|correct)|the (?:issue|problem|bug|root cause|cause|fix) "
    r"(?:is|was|here)|which (?:causes|caused|means)|otherwise|instead of|this (?:fixes|ensures|"
    r"prevents|makes)|root cause)\b",
    re.I,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def reason(text: str) -> str:
    """The last sentence of ``text`` that says why ("" when none does)."""
    found = ""
    for chunk in _SENTENCE.split(text):
        sentence = one_line(_LIST_ITEM.sub("", chunk))
        if len(sentence) > 12 and _WHY.search(sentence) and not sentence.startswith("```"):
            found = sentence
    return trim(found, REASON_CHARS) if found else ""


def _side(text: str) -> str:
    return "`" + trim(text.strip(), SIDE_CHARS).replace("`", "'") + "`"


def line_change(old: str, new: str) -> str:
    """The first changed line of ``old`` -> ``new``: "`a` → `b`", "+ `b`" or "- `a`"."""
    a = [ln for ln in old.splitlines() if ln.strip()]
    b = [ln for ln in new.splitlines() if ln.strip()]
    i = 0
    while i < len(a) and i < len(b) and a[i].strip() == b[i].strip():
        i += 1
    if i < len(a) and i < len(b):
        return f"{_side(a[i])} → {_side(b[i])}"
    if i < len(b):
        return f"+ {_side(b[i])}"
    if i < len(a):
        return f"- {_side(a[i])}"
    return ""


def _first(data: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((v for k in keys if isinstance(v := data.get(k), str)), None)


def edit_change(data: dict[str, Any], patch: str = "") -> str:
    """What one edit call changed, as its first changed line ("" when it cannot be told)."""
    edits = data.get("edits")
    if isinstance(edits, list) and edits and isinstance(edits[0], dict):
        data = edits[0]
    old, new = _first(data, OLD_KEYS), _first(data, NEW_KEYS)
    if new is not None:
        return line_change(old or "", new)
    if patch:
        removed = next((ln[1:] for ln in patch.splitlines() if _minus(ln)), "")
        added = next((ln[1:] for ln in patch.splitlines() if _plus(ln)), "")
        return line_change(removed, added) if removed or added else ""
    command = data.get("command")
    if isinstance(command, str) and "\n" in command:  # SWE-agent "edit 10:12\n<text>\nend_of_edit"
        head, _, body = command.partition("\n")
        body = body.rsplit("end_of_edit", 1)[0]
        lines = head.split()[1:2]
        change = line_change("", body)
        return f"lines {lines[0]}: {change}" if lines and change else change
    return ""


def _minus(line: str) -> bool:
    return line.startswith("-") and not line.startswith("---")


def _plus(line: str) -> bool:
    return line.startswith("+") and not line.startswith("+++")


def size_of(text: str) -> str:
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return f"{lines} line{'s' if lines != 1 else ''}, {len(text):,} chars"


@dataclass
class Change:
    """One file's changes in this history."""

    path: str
    created: bool = False  # its first change made it (a write of a file not seen before)
    seen: bool = False  # read or edited before: a write of it rewrites it
    edits: int = 0
    diff: str = ""  # the newest edit's first changed line
    size: str = ""  # the newest write's size
    new: bool = False  # the newest write created it
    commands: list[str] = field(default_factory=list)
    runs: int = 0
    deleted: bool = False
    changed_after: bool = False  # edited (not rewritten) after it was created
    reason: str = ""

    def scratch(self) -> bool:
        """Written only to reproduce or probe: created then deleted, or created and run and
        never edited again."""
        return self.created and (self.deleted or (self.runs > 0 and not self.changed_after))

    def what(self) -> str:
        said: list[str] = []
        if self.new and self.size:
            said.append(f"new file ({self.size})")
        elif self.size:
            said.append(f"rewritten ({self.size})")
        if self.edits:
            times = f" {self.edits} times" if self.edits > 1 else ""
            said.append(f"edited{times}" + (f": {self.diff}" if self.diff else ""))
        if self.commands:
            said.append("by " + ", ".join(self.commands))
        if self.runs:
            said.append(f"run {self.runs} times" if self.runs > 1 else "run")
        if self.deleted:
            said.append("deleted")
        text = f"{self.path} — " + "; ".join(said) if said else self.path
        return text + (f" (why: {self.reason})" if self.reason else "")


class Changes:
    """The files changed in a history, newest change last, and a log of when."""

    def __init__(self) -> None:
        self.files: dict[str, Change] = {}
        self.seen: set[str] = set()
        self.log: list[tuple[int, str]] = []  # (step, path) per change, in order

    def _get(self, path: str) -> Change:
        change = self.files.pop(path, None) or Change(path=path, seen=path in self.seen)
        self.files[path] = change  # the newest change last
        return change

    def read(self, paths: list[str]) -> None:
        self.seen.update(paths)

    def find(self, path: str) -> str | None:
        """The changed file ``path`` names: itself, or the one whose path ends like it."""
        if path in self.files:
            return path
        tail = "/" + path.lstrip("./")
        found = [p for p in self.files if p.endswith(tail) or path.endswith("/" + p.lstrip("./"))]
        return found[0] if len(found) == 1 else None

    def wrote(self, path: str, content: str, step: int, why: str) -> None:
        c = self._get(path)
        fresh = not c.seen and not c.edits and not c.size and not c.commands
        c.created = c.created or fresh
        c.new = fresh or (c.created and not c.changed_after)
        c.size = size_of(content)
        self._done(c, step, why)

    def edited(self, path: str, diff: str, step: int, why: str) -> None:
        c = self._get(path)
        c.edits += 1
        c.diff = diff or c.diff
        c.changed_after = c.changed_after or c.created
        self._done(c, step, why)

    def by_command(
        self, path: str, command: str, step: int, why: str, *, creates: bool, deletes: bool
    ) -> None:
        c = self._get(path)
        if deletes:
            c.deleted = True
        else:
            fresh = creates and not c.seen and not c.edits and not c.size and not c.commands
            c.created = c.created or fresh
            if not fresh and c.created:
                c.changed_after = True
            c.commands = [*[x for x in c.commands if x != command][-(HOWS - 1) :], command]
        self._done(c, step, why)

    def ran(self, path: str) -> None:
        found = self.find(path)
        if found is not None:
            self.files[found].runs += 1

    def _done(self, c: Change, step: int, why: str) -> None:
        self.seen.add(c.path)
        if why:
            c.reason = why
        self.log.append((step, c.path))

    def between(self, start: int, end: int) -> list[Change]:
        """The files changed after step ``start`` and before step ``end``, newest last."""
        paths = dict.fromkeys(p for s, p in self.log if start < s < end)
        return [self.files[p] for p in paths if p in self.files]


# -- problems and their fixes -------------------------------------------------------------------


@dataclass
class Run:
    """One finished command or tool call, as the narrative tells it."""

    what: str  # "`pytest -q`" or "edit src/a.py"
    outcome: str  # "passed", "exit 1", "error", "ok", "ran"
    error: str  # its most telling error line ("" when none)
    failed: bool
    test: bool
    key: str  # what a later run must match to answer a failure
    full: bool = False  # a test run over the whole suite: answers every test failure
    step: int = 0
    files: tuple[str, ...] = ()  # test files it ran (or that failed in it)
    acts: bool = False  # it ran or wrote something (not only showed or searched)
    last_error: str = ""  # the output's last error line, when it is not ``error``

    def line(self, bare: re.Pattern[str], *, last: bool = False) -> str:
        said = self.error and not bare.match(self.error)  # "error: Error" says nothing
        text = f"{self.what} → {self.outcome}" + (f": {self.error}" if said else "")
        if last and self.last_error and self.last_error != self.error:
            text += f" … {trim(self.last_error, LAST_ERROR_CHARS)}"
        return text


_WRAPPER = re.compile(r"^(?:timeout\s+\S+|nice|stdbuf\s+\S+|time)\s+")


def command_key(script: str) -> str:
    """What makes two command lines "the same command": the programs they run, without ``cd``,
    viewer pipes (``| tail``), redirections or ``timeout`` wrappers."""
    try:
        commands = shell.parse(script)
    except (RecursionError, IndexError, ValueError):
        commands = []
    kept = [
        " ".join(c.argv)
        for c in commands
        if c.argv and c.program not in ("cd", "pushd", "popd") and classify(c) != "viewer"
    ]
    key = " && ".join(_WRAPPER.sub("", k) for k in kept)
    return "`" + (key or one_line(script.split("\n", 1)[0])) + "`"


_FAILED_TEST = re.compile(r"^(?:FAILED|ERROR)\s+([^\s:]+\.\w+)(?:::\S*)?", re.M)


def test_files(commands: list[shell.Command], output: str) -> tuple[str, ...]:
    """The test files a test run names (its arguments) or reports failing."""
    named = [
        w.split("::", 1)[0]
        for c in commands
        if is_test(c)
        for w in c.argv[1:]
        if not w.startswith("-") and re.search(r"\.\w+(?:::|$)", w)
    ]
    failing = [m.group(1) for m in _FAILED_TEST.finditer(output)]
    return tuple(dict.fromkeys(named + failing))


def _same_file(a: str, b: str) -> bool:
    a, b = a.lstrip("./"), b.lstrip("./")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def answers(later: Run, failure: Run) -> bool:
    """Whether the successful ``later`` run answers ``failure``."""
    if later.failed:
        return False
    if later.key == failure.key:
        return True
    if failure.test and later.test and later.outcome == "passed":
        if later.full:
            return True
        return bool(failure.files) and all(
            any(_same_file(f, g) for g in later.files) for f in failure.files
        )
    return False


def pair(runs: list[Run], changes: Changes, bare: re.Pattern[str]) -> tuple[list[Run], list[str]]:
    """The failures no later run answered, and "failure ⇒ fix" lines for those answered (the
    files changed in between, else a plain rerun), oldest first; a failure repeated before it
    was answered counts once (its newest form)."""
    open_: dict[str, Run] = {}
    resolved: dict[str, str] = {}
    for run in runs:
        if run.failed:
            open_.pop(run.key, None)
            open_[run.key] = run
            continue
        for key, failure in list(open_.items()):
            if not answers(run, failure):
                continue
            del open_[key]
            fixes = changes.between(failure.step, run.step)
            done = [
                r.what
                for r in runs
                if failure.step < r.step < run.step and not r.failed and r.key != run.key and r.acts
            ]
            said = [_fix(c) for c in fixes[-2:]] + [f"running {c}" for c in done[-1:]]
            fix = "after " + "; ".join(said) if said else "on a rerun"
            line = f"{failure.line(bare, last=True)} ⇒ fixed {fix}: {run.what} → {run.outcome}"
            resolved.pop(key, None)
            resolved[key] = trim(line, PAIR_CHARS)
    return list(open_.values()), list(resolved.values())


def _fix(c: Change) -> str:
    if c.edits and c.diff:
        return f"{c.path} edited: {c.diff}"
    if c.commands:
        return f"{c.path} changed by {c.commands[-1]}"
    if c.size:
        return f"{c.path} written"
    return c.path
