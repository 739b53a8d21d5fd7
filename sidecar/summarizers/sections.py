"""The summary's vocabulary, shared by the writer that produces summaries (``extractive``)
and the readers that take them apart (``sidecar.engine.ledger``, the next compaction): the
section names, a summary parsed back into ``Sections``, and ``cut``, the sentence-end cut a
request is kept in (its note is read back by the next cut). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sidecar.summarizers._text import one_line, trim

# Section names, in output order. Paragraph sections hold one text; the rest are lists.
OBJECTIVE = "Goal"  # the session's first request
LATEST = "Latest request"  # a later request that changed course
DIRECTIVES = "User directives"
CONTEXT = "Additional context"
DONE = "What was done"  # each changed file once, with what changed in it and why
SCRATCH = "Scratch files (reproduce / probe)"  # created, then run or deleted, never edited
FILES_READ = "Files read"
FILES_MODIFIED = "Files modified"
COMMANDS = "Commands run"
ERRORS = "Errors"
OPEN = "Open problems"  # failures no later passing run of the same thing answered
RESOLVED = "Resolved"  # each answered failure with what made it pass
EARLIER = "Earlier summaries"
STATE = "Current state"
NEXT = "Next steps"
ORDER = (
    OBJECTIVE,
    LATEST,
    DIRECTIVES,
    CONTEXT,
    DONE,
    SCRATCH,
    FILES_READ,
    FILES_MODIFIED,
    COMMANDS,
    ERRORS,
    OPEN,
    RESOLVED,
    EARLIER,
    STATE,
    NEXT,
)
PARAGRAPHS = frozenset({OBJECTIVE, LATEST, STATE})
LEDGER_SECTIONS = (FILES_READ, FILES_MODIFIED, COMMANDS, ERRORS)  # what the ledger carries
LISTS = tuple(name for name in ORDER if name not in PARAGRAPHS)

EARLIER_CHARS = 600  # an earlier summary's prose, kept as one "Earlier summaries" entry

_OMITTED = re.compile(r"^\(\d+ older entr(?:y|ies) omitted\)$")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.*)$")
_ALIASES = {name.lower(): name for name in ORDER} | {
    "objective": OBJECTIVE,
    "latest user request": LATEST,
    "what we did": DONE,
    "open issues": OPEN,
    "resolved problems": RESOLVED,
    "fixed": RESOLVED,
    "scratch files": SCRATCH,
    "known issues": OPEN,
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


@dataclass
class Sections:
    objective: str = ""
    latest: str = ""
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
    "Earlier summaries" entry so that nothing silently disappears. "Current state" keeps its
    lines; the other paragraphs are read as one line."""
    sections = Sections()
    current: str | None = None
    paragraph: dict[str, list[str]] = {name: [] for name in PARAGRAPHS}
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
        elif current == STATE:
            paragraph[current].append(line.strip())
        elif current in PARAGRAPHS:
            item = ITEM.match(line)
            paragraph[current].append(item.group(1) if item else line)
        else:
            item = ITEM.match(line)
            sections.add(current, item.group(1) if item else line)
    sections.objective = one_line(" ".join(paragraph[OBJECTIVE]))
    sections.latest = one_line(" ".join(paragraph[LATEST]))
    sections.state = "\n".join(paragraph[STATE])
    prose = one_line(" ".join(stray))
    if prose:  # prose outside the known sections (a model-written summary): keep its gist
        sections.add(EARLIER, trim(prose, EARLIER_CHARS))
    return sections


_CUT = " [… cut here: {n:,} more characters of this request not kept]"
# The note ``cut`` ends a cut request with (how many characters were left out).
CUT_NOTE = re.compile(r" \[… cut here: ([\d,]+) more characters of this request not kept\]$")
_SENTENCE_END = re.compile(r"[.!?:;](?=\s)|\s(?=[-*•]\s|\d+[.)]\s)")


def cut(text: str, chars: int) -> str:
    """``text`` in at most ``chars`` characters: whole, or cut at the last sentence end that
    fits (else a word end), followed by a note of where and how much was cut -- never a
    silent cut in the middle of a sentence."""
    if len(text) <= chars:
        return text
    earlier = CUT_NOTE.search(text)  # cut before: count from the whole request
    lost = int(earlier.group(1).replace(",", "")) if earlier else 0
    body = text[: earlier.start()] if earlier else text
    room = max(0, chars - len(_CUT.format(n=len(body) + lost)))
    head = body[:room]
    ends = [m.end() for m in _SENTENCE_END.finditer(head) if m.end() >= room // 2]
    if ends:
        head = head[: ends[-1]]
    elif " " in head[room // 2 :]:
        head = head[: head.rfind(" ")]
    head = head.rstrip()
    return head + _CUT.format(n=len(body) - len(head) + lost)
