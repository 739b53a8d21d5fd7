"""Does compaction keep what matters? Recall of the agent's artifact trail in the final window,
against a keep-the-newest-messages truncation baseline of the same size, in one run.

Each transcript of ``--transcripts DIR`` is replayed in-process into a real SQLite store through
the engine service (standard compaction, extractive writer -- or with ``--writer forgetful`` an
OpenAI-compatible server on 127.0.0.1 whose summaries name nothing --, prune on) with a
model window of ``--context`` tokens (default 32,000; ``--output`` 4,000). Each assistant message is
written with ``tokens.input`` = the estimated size of the window it would have been sent, and the
engine's automatic check runs after it. At the end a closing compaction is requested
(``session/compact``, what a hand-off to a fresh session does) and the window read back from the
store is "the final window" (``--no-closing``: the window where the replay ends, i.e. the last
summary plus the messages after it).

Each transcript is replayed twice (``--stub both``, the default): with OpenCode's placeholder for
pruned outputs and with ``compaction.prunedStub: "informative"``, whose one-line stubs count as
window text and window tokens.

Artifact kinds are computed from the transcript here, by this file's own rules, independently of
``sidecar/engine/ledger.py`` and ``shell.py`` (regular expressions over the raw tool inputs and
outputs; no shell parsing):

- ``modified``: paths given to edit/write/create tools; shell redirection targets (``>``,
  ``>>``), ``tee``, ``sed -i``, ``mv``, ``cp``, ``rm``, ``touch``, ``git checkout --`` operands.
- ``read``: paths given to read/view/open tools; ``cat``/``head``/``tail``/``sed -n`` operands.
- ``failed``: commands whose tool call errored or whose output reports a non-zero exit status
  (the command's first line is the key).
- ``errors``: per tool output of a call that does not only show text (some command of it is not
  grep/cat/..., or writes a file), the first and the last line that looks like an error
  (exception, ``error:``, ``FAILED``, ...).
- ``tests``: command segments that run a test runner or a ``test_*.py``-style script.
- ``first`` / ``latest``: the first and the latest user text.

Tool calls that failed modify or read nothing. An artifact is recalled when its key (whitespace
collapsed, at most 60 characters; 120 for paths, 100 for user requests) occurs in the text of
the window (all text, tool inputs and outputs, summaries). For each transcript it prints the
ledger's figures and, on the next line, the baseline's: the newest transcript messages that fit
in as many tokens as the final window. Compression is 1 - window tokens / history tokens;
"grew" counts compactions after which the context was not smaller.

Beside the ledger recall, **probes** ask what someone continuing the work must know, each
answered by the history as it stands at a compaction and scored present or absent in the window
right after that compaction (every automatic one and the closing one), beside keep-newest
truncation of the same size at the same point (this file's own rules again):

- ``task``: the expected behaviour, a sentence of the first request (the first that says
  "should", "expected", "must", "instead", ...; else its longest sentence);
- ``fix-file``: the file that holds the fix: the newest file changed by an edit (edit tools,
  ``sed -i``, ``patch``) that the session did not create; else the newest file written;
- ``error-fix``: the newest error that was fixed (a failed command whose later run with the same
  command passed) and what fixed it (a file changed in between, else a command run in between);
  both must be in the window;
- ``todo``: the first unfinished item of the newest todo list (todowrite, TodoWrite,
  update_plan).

A probe kind is "-" where no compaction had an answer for it. The run ends with one line per
stub mode summing each kind over every transcript (target: every kind >= 90%).

    python bench/recall.py [--context 32000] [--output 4000] [--transcripts DIR] [--no-closing]
                           [--stub opencode|informative|both]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from _host import Host  # bench/ is the script's own directory on sys.path

from sidecar.engine import render
from sidecar.engine.compactor import Request
from sidecar.engine.render import Stub
from sidecar.engine.service import Engine
from sidecar.engine.tokens import estimate, estimate_messages
from sidecar.engine.window import load_window
from sidecar.model.config import build
from sidecar.model.ids import new_id, now_ms
from sidecar.model.messages import (
    AssistantMessage,
    MessageTime,
    ModelRef,
    UserMessage,
    WithParts,
)
from sidecar.model.parts import Part, ReasoningPart, TextPart, ToolCompleted, ToolError, ToolPart
from sidecar.model.parts import ToolTime as _ToolTime
from sidecar.model.session import Session, SessionTime
from sidecar.model.tokens import CacheTokens, Tokens
from sidecar.model.transcript import TMessage, TPart, Transcript, load
from sidecar.store import Store

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = next(
    (d / "shared" / "transcripts" for d in ROOT.parents if (d / "shared" / "transcripts").is_dir()),
    ROOT.parent / "shared" / "transcripts",
)
KINDS = ("modified", "read", "failed", "errors", "tests", "first", "latest")
KEY_CHARS = 60
PATH_KEY_CHARS = 120
REQUEST_KEY_CHARS = 100
CONTINUE = "Continue if you have next steps"

# -- ground truth: the artifact trail of a transcript (this file's own rules) --------------------

_WS = re.compile(r"\s+")


def norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def key(text: str, n: int = KEY_CHARS) -> str:
    return norm(text)[:n].rstrip()


WRITE_TOOL = re.compile(
    r"^(?:edit|write|create|multiedit|multi_edit|str_replace|insert|apply_patch|write_file|"
    r"create_file|edit_file|notebookedit)$",
    re.I,
)
READ_TOOL = re.compile(r"^(?:read|view|open|read_file|cat|view_file|open_file)$", re.I)
EDITOR_TOOL = re.compile(r"^(?:str_replace_editor|str_replace_based_edit_tool|text_editor)$", re.I)
PATH_KEYS = ("file_path", "filePath", "path", "filename", "file", "notebook_path")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[^\n]*\n.*?\n\s*\2\s*(?:\n|$)", re.S)
EXIT_MARK = re.compile(
    r"<returncode>(-?\d+)</returncode>|exited with code (-?\d+)|exit code (-?\d+)", re.I
)
ERROR_LINE = re.compile(
    r"^(?:[\w.]+(?:Error|Exception)(?::.*)?"
    r"|.*: error(?: TS\d+)?[:\[ ].*"
    r"|error(?:\[\w+\])?: .*"
    r"|(?:FAILED|FAIL|ERROR)\b.*"
    r"|npm (?:ERR!|error) .*"
    r"|g?make(?:\[\d+\])?: \*\*\*.*"
    r"|E: .*"
    r"|fatal: .*"
    r"|.*: command not found"
    r"|.*: No such file or directory)$"
)
VIEWER_PROGS = frozenset(
    "cd grep egrep rg ag cat sed head tail less nl find ls tree wc echo printf diff awk".split()
)
VIEWER_GIT = frozenset({"grep", "log", "show", "diff", "status", "blame"})
TEST_SEG = re.compile(
    r"\b(?:pytest|py\.test|tox|jest|vitest|mocha|(?:npm|yarn|pnpm|bun)(?: run)? test|"
    r"cargo test|go test|make (?:test|check)|-m (?:pytest|unittest)|runtests\.py)\b"
    r"|\b(?:python\d?|node|bash|sh) \S*(?:test_\w*|\w*_test|\w*tests?)\.(?:py|js|sh)\b"
)


@dataclass
class Truth:
    kinds: dict[str, dict[str, None]] = field(default_factory=lambda: {k: {} for k in KINDS})

    def add(self, kind: str, value: str, n: int = KEY_CHARS) -> None:
        if kind in ("modified", "read"):
            n = PATH_KEY_CHARS
        k = key(value, n)
        if len(k) >= 2:
            self.kinds[kind][k] = None


def _segments(command: str) -> list[list[str]]:
    """Simple commands as word lists: ``shlex`` with punctuation splitting (stdlib), heredoc
    bodies removed first; redirections stay in the word list as ``>``/``>>`` words."""
    bare = HEREDOC.sub("\n", command)  # heredoc bodies are data, not commands
    bare = bare.replace("\\\n", " ").replace("\n", " ; ")  # a newline ends a command
    lex = shlex.shlex(bare, posix=True, punctuation_chars=";&|<>()")
    lex.whitespace_split = True
    out: list[list[str]] = [[]]
    try:
        for tok in lex:
            if tok in ("&&", "||", ";", "|", "&", "(", ")", ";;", "|&"):
                out.append([])
            else:
                out[-1].append(tok)
    except ValueError:  # unbalanced quotes: whatever was read so far
        pass
    return [seg for seg in out if seg]


def _shell_truth(t: Truth, command: str) -> None:
    for words in _segments(command):
        # redirection targets: ">" / ">>" (any fd), not /dev/*, not "&1"
        plain: list[str] = []
        i = 0
        while i < len(words):
            w = words[i]
            if w in (">", ">>", ">|") and i + 1 < len(words):
                target = words[i + 1]
                if plain and plain[-1].isdigit():
                    plain.pop()  # "2>" was split as "2", ">"
                if not target.startswith(("/dev/", "&")) and not any(c in target for c in "$*?>&"):
                    t.add("modified", target)
                i += 2
                continue
            if w in ("<", "<<", "<<<", "<<-", ">&") and i + 1 < len(words):
                i += 2
                continue
            plain.append(w)
            i += 1
        while plain and "=" in plain[0] and not plain[0].startswith("-"):
            plain.pop(0)  # VAR=value prefixes
        if not plain:
            continue
        prog = plain[0].rsplit("/", 1)[-1]
        args = [  # operands; variables and globs name no file we could check
            w for w in plain[1:] if w and not w.startswith("-") and not any(c in w for c in "$*?")
        ]
        if prog == "tee":
            for w in args:
                t.add("modified", w)
        elif prog == "sed" and any(w.startswith("-i") for w in plain[1:]) and len(args) >= 2:
            t.add("modified", args[-1])
        elif prog == "mv" and len(args) >= 2:
            for w in args:
                t.add("modified", w)
        elif prog == "cp" and len(args) >= 2:
            t.add("modified", args[-1])
        elif prog in ("rm", "touch"):
            for w in args:
                if not any(c in w for c in "*?"):
                    t.add("modified", w)
        elif prog == "git" and plain[1:2] == ["checkout"] and "--" in plain:
            for w in plain[plain.index("--") + 1 :]:
                t.add("modified", w)
        elif prog in ("cat", "head", "tail") and args:
            for w in args:
                if not w.lstrip("+").isdigit() and not any(c in w for c in "*?"):
                    t.add("read", w)
        elif prog == "sed" and "-n" in plain and len(args) >= 2:
            t.add("read", args[-1])
        if TEST_SEG.search(" ".join(plain)):
            # the words as typed, up to the first that needed quotes (its quoting is unknown)
            shown = []
            for w in plain:
                if any(c in w for c in " \t'\"\\$*?"):
                    break
                shown.append(w)
            t.add("tests", " ".join(shown))


def _only_views(command: str) -> bool:
    """Whether every command of a call only shows text (a viewer with no file redirection):
    ``cat > f <<EOF ... EOF`` then ``python f`` runs something, ``cat f | tail`` does not."""
    for words in _segments(command):
        for i, w in enumerate(words[:-1]):
            if w in (">", ">>", ">|") and not words[i + 1].startswith(("/dev/", "&")):
                return False
        plain = [w for w in words if w not in ("<<", "<<-", "<", ">", ">>", ">&")]
        while plain and "=" in plain[0] and not plain[0].startswith("-"):
            plain.pop(0)
        if not plain:
            continue
        prog = plain[0].rsplit("/", 1)[-1]
        if prog == "git":
            sub = next((w for w in plain[1:] if not w.startswith("-")), "")
            if sub not in VIEWER_GIT:
                return False
        elif prog not in VIEWER_PROGS or (prog == "sed" and any(w.startswith("-i") for w in plain)):
            return False
    return True


SEARCH_PROGS = frozenset({"grep", "egrep", "rg", "ag", "find"})


def _only_searches(command: str) -> bool:
    """A call of searches (and viewers) only: its exit 1 means nothing was found."""
    progs = {
        next((w for w in seg if "=" not in w), "").rsplit("/", 1)[-1] for seg in _segments(command)
    }
    return bool(progs & SEARCH_PROGS) and _only_views(command)


def _errors(out: str) -> list[str]:
    return [ln.strip() for ln in out.splitlines() if ERROR_LINE.match(ln.strip())]


def _path(data: dict[str, Any]) -> str:
    for k in PATH_KEYS:
        v = data.get(k)
        if isinstance(v, str) and v.strip():
            return v.strip()
    return ""


def truth(messages: Iterable[TMessage]) -> Truth:
    t = Truth()
    users: list[str] = []
    for m in messages:
        if m.role == "user":
            text = "\n".join(p.text for p in m.parts if p.type == "text" and p.text.strip())
            if text.strip() and norm(text) != CONTINUE:
                users.append(text)
            continue
        for p in m.parts:
            if p.type != "tool":
                continue
            data, out = p.input, p.output
            command = data.get("command") if isinstance(data.get("command"), str) else None
            path = _path(data) if p.status == "completed" else ""  # a failed edit edits nothing
            if EDITOR_TOOL.match(p.tool) and path:
                t.add("read" if data.get("command") == "view" else "modified", path)
                continue
            if WRITE_TOOL.match(p.tool) and path:
                t.add("modified", path)
                continue
            if READ_TOOL.match(p.tool) and path:
                t.add("read", path)
                continue
            if command is None:
                continue
            if p.tool == "create" and len(command.split()) > 1:  # SWE-agent text actions
                t.add("modified", command.split()[1])
            elif p.tool == "open" and len(command.split()) > 1:
                t.add("read", command.split()[1])
            else:
                _shell_truth(t, command)
            codes = [int(next(g for g in m.groups() if g)) for m in EXIT_MARK.finditer(out)]
            found_nothing = codes[-1:] == [1] and _only_searches(command) and not _errors(out)
            if p.status == "error" or (codes and codes[-1] != 0 and not found_nothing):
                t.add("failed", command.split("\n", 1)[0])
            if p.status == "error" or not _only_views(command):
                lines = [ln.strip() for ln in out.splitlines() if ERROR_LINE.match(ln.strip())]
                for line in {lines[0], lines[-1]} if lines else ():
                    t.add("errors", line)
    if users:
        t.add("first", users[0], REQUEST_KEY_CHARS)
        t.add("latest", users[-1], REQUEST_KEY_CHARS)
    return t


# -- probes: what someone continuing the work must know (this file's own rules) ----------------

PROBES = ("task", "fix-file", "error-fix", "todo")
EXPECT = re.compile(
    r"\b(?:should|expected|expect|must|instead|want|needs? to|ought to|would like|so that|"
    r"make (?:it|sure)|fails?|crash(?:es)?|wrong)\b",
    re.I,
)
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
EDIT_TOOL = re.compile(
    r"^(?:edit|multiedit|multi_edit|str_replace|insert|apply_patch|edit_file)$", re.I
)
CREATE_TOOL = re.compile(r"^(?:write|create|create_file|write_file)$", re.I)
TODO_TOOL = re.compile(r"^(?:todowrite|todo_write|update_plan|update_todos)$", re.I)
DONE_STATUS = frozenset({"completed", "complete", "done", "cancelled", "canceled"})
CMD_PREFIX = re.compile(r"^(?:cd\s+\S+\s*(?:&&|;)\s*)+")
CMD_SUFFIX = re.compile(r"\s*(?:2>&1|\|\s*(?:head|tail)\b.*)\s*$")


def expected_sentence(text: str) -> str:
    """The sentence of a request that says what is expected."""
    sentences = [norm(x) for x in SENTENCE.split(text) if len(norm(x).split()) >= 5]
    hits = [x for x in sentences if EXPECT.search(x)]
    if hits:
        return hits[0]
    return max(sentences, key=len, default="")


def command_of(command: str) -> str:
    """A command as "the same command" is told: its text without ``cd ... &&`` and a trailing
    ``2>&1`` / ``| tail``."""
    return CMD_SUFFIX.sub("", CMD_PREFIX.sub("", norm(command))).strip()


@dataclass
class Probes:
    answers: dict[str, list[str]] = field(default_factory=dict)  # kind -> keys, all needed


def probes(messages: list[TMessage]) -> Probes:
    """The probes the history ``messages`` answers."""
    out = Probes()
    users = [
        "\n".join(p.text for p in m.parts if p.type == "text") for m in messages if m.role == "user"
    ]
    users = [u for u in users if u.strip() and norm(u) != CONTINUE]
    if users and (sentence := expected_sentence(users[0])):
        out.answers["task"] = [key(sentence, REQUEST_KEY_CHARS)]
    created: set[str] = set()
    edited: list[str] = []
    written: list[str] = []
    runs: list[tuple[str, bool, str, int]] = []  # (command, failed, error line, index)
    changes: list[tuple[int, str]] = []  # (index, path)
    todos: list[str] | None = None
    opened = ""  # SWE-agent text actions: "open f.py" / "create f.py", then "edit 3:4"
    for i, m in enumerate(messages):
        for p in (x for x in m.parts if x.type == "tool"):
            data, ok = p.input, p.status == "completed"
            words = str(data.get("command", "")).split()
            if p.tool in ("open", "create") and len(words) > 1 and words[0] == p.tool:
                opened = words[1]
            if WRITE_TOOL.match(p.tool) and not _path(data) and words[:1] == [p.tool]:
                shown = re.search(r"^\[File: (\S+) \(", p.output, re.M)
                target = shown.group(1) if shown else opened
                if ok and target and "error" not in p.output.split("\n", 1)[0].lower():
                    (created.add if p.tool == "create" else edited.append)(target)
                    written.append(target)
                    changes.append((i, target))
                continue
            if TODO_TOOL.match(p.tool):
                items = data.get("todos", data.get("plan"))
                if isinstance(items, list):
                    todos = [
                        str(t.get("content", t.get("step", "")))
                        for t in items
                        if isinstance(t, dict) and str(t.get("status", "")) not in DONE_STATUS
                    ]
                continue
            path = _path(data)
            verb = data.get("command")
            if (
                ok
                and path
                and (
                    EDIT_TOOL.match(p.tool)
                    or (EDITOR_TOOL.match(p.tool) and verb in ("str_replace", "insert"))
                )
            ):
                if not p.output.lstrip().upper().startswith("ERROR"):
                    edited.append(path)
                    changes.append((i, path))
                continue
            if (
                ok
                and path
                and (CREATE_TOOL.match(p.tool) or (EDITOR_TOOL.match(p.tool) and verb == "create"))
            ):
                if path not in edited:
                    created.add(path)
                written.append(path)
                changes.append((i, path))
                continue
            command = data.get("command") if isinstance(data.get("command"), str) else None
            if command is None or path:
                continue
            t = Truth()
            _shell_truth(t, command)
            for target in t.kinds["modified"]:
                changes.append((i, target))
                written.append(target)
                if re.search(r"\bsed\s+-i|\bpatch\b|\bgit apply\b", command):
                    edited.append(target)
                elif re.search(
                    r"(?:>|\btee)\s*\S*" + re.escape(target.rsplit("/", 1)[-1]), command
                ):
                    created.add(target)
            codes = [int(next(g for g in mm.groups() if g)) for mm in EXIT_MARK.finditer(p.output)]
            errs = _errors(p.output)
            failed = (
                p.status == "error"
                or (codes[-1:] != [0] and bool(codes))
                or (not codes and bool(errs))
            )
            if codes[-1:] == [1] and _only_searches(command) and not errs:
                failed = False
            runs.append((command_of(command), failed, errs[-1] if errs else "", i))
    fix = next((f for f in reversed(edited) if f not in created), "") or next(reversed(written), "")
    if fix:
        out.answers["fix-file"] = [key(fix, PATH_KEY_CHARS)]
    pair = _fixed(runs, changes)
    if pair:
        out.answers["error-fix"] = pair
    if todos:
        out.answers["todo"] = [key(todos[0], REQUEST_KEY_CHARS)]
    return out


def _fixed(runs: list[tuple[str, bool, str, int]], changes: list[tuple[int, str]]) -> list[str]:
    """The newest error fixed, and what fixed it: [error key, fix key]."""
    found: list[str] = []
    for j, (command, failed, _, at) in enumerate(runs):
        if failed:
            continue
        earlier = [r for r in runs[:j] if r[0] == command]
        if not earlier or not earlier[-1][1] or not earlier[-1][2]:
            continue
        _, _, error, start = earlier[-1]
        between = [path for i, path in changes if start < i <= at]
        commands = [
            r[0]
            for r in runs
            if start < r[3] < at and not r[1] and r[0] != command and not _only_views(r[0])
        ]
        what = between[-1] if between else (commands[-1] if commands else command)
        found = [key(error), key(what, PATH_KEY_CHARS if between else KEY_CHARS)]
    return found


def probe_score(p: Probes, text: str) -> dict[str, tuple[int, int]]:
    return {
        k: (int(all(a in text for a in p.answers[k])), 1) if k in p.answers else (0, 0)
        for k in PROBES
    }


def _add(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> None:
    for k, (hit, total) in b.items():
        h, t = a.get(k, (0, 0))
        a[k] = (h + hit, t + total)


def window_text(msgs: Iterable[WithParts], stub: Stub = "opencode") -> str:
    """All text the window sends; a pruned output counts as what is sent in its place."""
    out: list[str] = []

    def strings(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                strings(v)
        elif isinstance(value, list):
            for v in value:
                strings(v)

    for m in msgs:
        for p in m.parts:
            if isinstance(p, TextPart | ReasoningPart):
                out.append(p.text)
            elif isinstance(p, ToolPart):
                strings(p.state.input)
                if isinstance(p.state, ToolCompleted) and p.state.time.compacted is None:
                    out.append(p.state.output)
                elif isinstance(p.state, ToolCompleted):
                    out.append(render.stub(p, stub))
                elif isinstance(p.state, ToolError):
                    out.append(p.state.error)
    return norm("\n".join(out))


def recall(t: Truth, text: str) -> dict[str, tuple[int, int]]:
    return {k: (sum(1 for a in t.kinds[k] if a in text), len(t.kinds[k])) for k in KINDS}


# -- replay ---------------------------------------------------------------------------------------


FORGETFUL_TEXT = "We worked on the task; details were lost."


class ForgetfulModel:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 whose every summary is one
    sentence naming no file, command or error: the worst model a writer could be. With it,
    whatever the final window recalls comes from the ledger alone."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.requests = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                await reader.readexactly(length)
                self.requests += 1
                body = msgspec.json.encode(
                    {
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": FORGETFUL_TEXT},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 10},
                    }
                )
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def assistant_turn(
    t: Transcript, index: int, sid: str, parent: str, created: int, prompt: int, model: ModelRef
) -> tuple[AssistantMessage, list[Part]]:
    """Transcript message ``index`` as a finished assistant step: ``tool-calls`` when it
    called tools and another assistant step follows, its prompt tokens the window's size."""
    m = t.messages[index]
    mid = new_id("msg")
    parts = [to_part(p, sid, mid, created) for p in m.parts]
    nxt = t.messages[index + 1] if index + 1 < len(t.messages) else None
    tools = any(p.type == "tool" for p in m.parts)
    finish = "tool-calls" if tools and nxt and nxt.role == "assistant" else "stop"
    output = sum(estimate(p.text) for p in m.parts)
    info = AssistantMessage(
        id=mid,
        session_id=sid,
        parent_id=parent,
        time=MessageTime(created=created, completed=created + 1),
        provider_id=model.provider_id,
        model_id=model.model_id,
        mode="build",
        agent="build",
        finish=finish,
        tokens=Tokens(input=prompt, output=output, cache=CacheTokens()),
    )
    return info, parts


class Clock:
    """Creation times for replayed messages: ascending, never behind the wall clock, and after
    everything the engine stored (a compaction stamps what it adds with its own clock)."""

    def __init__(self, engine: Engine, store: Store, sid: str, start: int) -> None:
        self.engine, self.store, self.sid, self.last = engine, store, sid, start

    def tick(self) -> int:
        self.last = max(self.last + 1, now_ms())
        return self.last

    async def settle(self) -> None:
        """Let the engine finish its automatic work, then move past what it stored."""
        await self.engine.settle()
        msgs = await self.store.window(self.sid)
        if msgs:
            self.last = max(self.last, max(m.info.time.created for m in msgs))


def to_part(p: TPart, sid: str, mid: str, t: int) -> Part:
    pid = new_id("prt")
    if p.type == "text":
        return TextPart(id=pid, session_id=sid, message_id=mid, text=p.text)
    if p.type == "reasoning":
        return ReasoningPart(id=pid, session_id=sid, message_id=mid, text=p.text)
    time_ = _ToolTime(start=t, end=t)
    state: ToolCompleted | ToolError
    if p.status == "error":
        state = ToolError(input=p.input, error=p.output or "Tool execution aborted", time=time_)
    else:
        state = ToolCompleted(input=p.input, output=p.output, title=p.tool, time=time_)
    call = p.callID or new_id("prt")
    return ToolPart(id=pid, session_id=sid, message_id=mid, call_id=call, tool=p.tool, state=state)


@dataclass
class Run:
    name: str
    history: int = 0  # tokens of every message, as written
    final: int = 0
    compactions: int = 0
    grew: int = 0
    errors: list[str] = field(default_factory=list)
    ours: dict[str, tuple[int, int]] = field(default_factory=dict)
    base: dict[str, tuple[int, int]] = field(default_factory=dict)
    base_tokens: int = 0
    probes: dict[str, tuple[int, int]] = field(default_factory=dict)
    probes_base: dict[str, tuple[int, int]] = field(default_factory=dict)
    probed: int = 0  # compactions probed


async def replay(t: Transcript, args: argparse.Namespace, stub: Stub = "opencode") -> Run:
    run = Run(name=t.session)
    model = ModelRef(provider_id="replay", model_id=t.model)
    layer: dict[str, Any] = {
        "models": {f"replay/{t.model}": {"context": args.context, "output": args.output}},
        "compaction": {"prunedStub": stub},
    }
    forgetful = ForgetfulModel() if args.writer == "forgetful" else None
    if forgetful is not None:
        url = await forgetful.start()
        layer["summarizer"] = {"provider": "openai", "model": "forgetful", "baseURL": url}
    cfg = build([layer])
    written: list[WithParts] = []
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        store = await Store.open(Path(tmp) / "bench.db", synchronous="OFF")
        host = Host()
        engine = Engine(store, host, lambda: cfg)
        try:
            now = now_ms()
            session = Session(
                id=new_id("ses"), title=t.session, time=SessionTime(created=now, updated=now)
            )
            await store.put_session(session)
            sid, parent = session.id, ""
            clock = Clock(engine, store, sid, now)

            async def window() -> list[WithParts]:
                return list(await load_window(store, session))

            def size(msgs: list[WithParts]) -> int:  # as sent: informative stubs included
                return estimate_messages(msgs) + render.stub_extra(msgs, stub)

            def count(seen: int, before: int, after: int) -> bool:
                compacted = False
                for method, params in host.events[seen:]:
                    if method == "session/compacted":
                        run.compactions += 1
                        run.grew += after >= before
                        compacted = True
                    elif method == "session/status" and params.status == "error":
                        run.errors.append(str(params.error))
                return compacted

            async def probe(upto: int) -> None:
                """Score the probes the history up to message ``upto`` answers, in the window
                now and in the newest written messages of the same size."""
                now = await window()
                asked = probes(t.messages[: upto + 1])
                seen = window_text(now, stub)
                _add(run.probes, probe_score(asked, seen))
                if args.show and args.show in t.session:
                    for k, keys in asked.answers.items():
                        for a in keys:
                            if a not in seen:
                                print(f"   probe {k} at message {upto} missed: {a!r}")
                room, used, kept = size(now), 0, []
                for w in reversed(written):
                    cost = estimate_messages([w])
                    if used + cost > room:
                        break
                    kept.append(w)
                    used += cost
                _add(run.probes_base, probe_score(asked, window_text(kept[::-1])))
                run.probed += 1

            for index, m in enumerate(t.messages):
                created = clock.tick()
                info: UserMessage | AssistantMessage
                if m.role == "user":
                    info = UserMessage(
                        id=new_id("msg"),
                        session_id=sid,
                        time=MessageTime(created=created),
                        model=model,
                        agent="build",
                    )
                    parent = info.id
                    parts = [to_part(p, sid, info.id, created) for p in m.parts]
                else:
                    prompt = size(await window())
                    info, parts = assistant_turn(t, index, sid, parent, created, prompt, model)
                written.append(WithParts(info=info, parts=parts))
                await store.put_many([(info, _enc(info))], [(p, _enc(p)) for p in parts])
                if isinstance(info, AssistantMessage):
                    before = size(await window())
                    seen = len(host.events)
                    engine.message_stored(info)
                    engine.end_turn(sid)  # as the runner's session/idle does
                    await clock.settle()
                    if count(seen, before, size(await window())):
                        await probe(index)
            # The closing compaction: the window a fresh session would start from.
            before = size(await window())
            seen = len(host.events)
            if not args.no_closing:
                await engine.compact(Request(session_id=sid))
                await clock.settle()
            final = await window()
            run.final = size(final)
            if count(seen, before, run.final) or args.no_closing:
                await probe(len(t.messages) - 1)
            text = window_text(final, stub)
            if args.show and args.show in t.session:
                for w in final:
                    for p in w.parts:
                        if isinstance(p, TextPart):
                            print(p.text)
                gt_ = truth(t.messages)
                for k in KINDS:
                    for a in gt_.kinds[k]:
                        if a not in text:
                            print(f"   missed {k}: {a!r}")
        finally:
            await engine.close()
            await store.close()
            if forgetful is not None:
                await forgetful.close()
    run.history = sum(estimate_messages([w]) for w in written)
    gt = truth(t.messages)
    run.ours = recall(gt, text)
    # Baseline: the newest messages that fit in the same number of tokens.
    kept: list[WithParts] = []
    used = 0
    for w in reversed(written):
        cost = estimate_messages([w])
        if used + cost > run.final:
            break
        kept.insert(0, w)
        used += cost
    run.base_tokens = used
    run.base = recall(gt, window_text(kept))
    return run


def _enc(value: Any) -> bytes:
    return msgspec.json.encode(value)


def _cells(
    figures: dict[str, tuple[int, int]], kinds: tuple[str, ...] = KINDS, target: float = 95
) -> tuple[str, bool]:
    cells = []
    ok = True
    for k in kinds:
        hit, total = figures.get(k, (0, 0))
        if total == 0:
            cells.append(f"{k} -")
            continue
        share = 100 * hit / total
        ok = ok and share >= target
        cells.append(f"{k} {share:.0f}% ({hit}/{total})")
    return ", ".join(cells), ok


def replay_args(doc: str, context: int, output: int) -> argparse.ArgumentParser:
    """The options of every transcript-replay bench: the model's window and the transcripts."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--context", type=int, default=context)
    ap.add_argument("--output", type=int, default=output)
    ap.add_argument("--transcripts", type=Path, default=DEFAULT_DIR)
    return ap


def main() -> None:
    ap = replay_args(__doc__, 32_000, 4_000)
    ap.add_argument(
        "--no-closing",
        action="store_true",
        help="measure the window where the replay ends (summary + newer messages) instead",
    )
    ap.add_argument(
        "--writer",
        choices=("extractive", "forgetful"),
        default="extractive",
        help="forgetful: a loopback OpenAI-compatible model whose summaries name nothing",
    )
    ap.add_argument(
        "--stub",
        choices=("opencode", "informative", "both"),
        default="both",
        help="compaction.prunedStub of the replay; both (default): one replay with each",
    )
    ap.add_argument("--only", default="", help="replay only transcripts whose name has this")
    ap.add_argument("--show", default="", help="print the final window of this transcript")
    args = ap.parse_args()
    paths = [p for p in sorted(args.transcripts.glob("*.jsonl")) if args.only in p.stem]
    if not paths:
        sys.exit(f"no transcripts in {args.transcripts}")
    print(
        f"recall bench: window {args.context:,} tokens (output {args.output:,}), standard "
        f"compaction, {args.writer} writer, "
        + ("final window where the replay ends" if args.no_closing else "closing compaction")
        + f"; pruned stubs: {args.stub}; baseline = newest messages in as many tokens"
    )
    failed = 0
    stubs: list[Stub] = ["opencode", "informative"] if args.stub == "both" else [args.stub]
    totals: dict[str, dict[str, tuple[int, int]]] = {st: {} for st in stubs}
    base_totals: dict[str, dict[str, tuple[int, int]]] = {st: {} for st in stubs}
    for path, stub in ((p, st) for p in paths for st in stubs):
        t = load(path)
        run = asyncio.run(replay(t, args, stub))
        if len(stubs) > 1:
            run.name = f"{run.name} [{stub} stubs]"
        compress = 100 * (1 - run.final / run.history) if run.history else 0.0
        auto = run.compactions - (0 if args.no_closing else 1)  # the closing one is requested
        long_enough = auto > 0
        cells, ok = _cells(run.ours)
        base_cells, _ = _cells(run.base)
        goal = long_enough and ok and compress >= 90 and run.grew == 0
        verdict = ("goal met" if goal else "goal NOT met") if long_enough else "too short"
        failed += long_enough and not goal
        print(
            f"{run.name}: history {run.history:,} tok, window {run.final:,} tok, compression "
            f"{compress:.1f}%, compactions {run.compactions} ({auto} automatic), grew "
            f"{run.grew}, errors {len(run.errors)}; ledger recall: {cells}; {verdict}"
        )
        base_compress = 100 * (1 - run.base_tokens / run.history) if run.history else 0.0
        print(
            f"{run.name}: baseline keep-newest {run.base_tokens:,} tok, compression "
            f"{base_compress:.1f}%; baseline recall: {base_cells}"
        )
        probe_cells, _ = _cells(run.probes, PROBES, 90)
        probe_base, _ = _cells(run.probes_base, PROBES, 90)
        print(
            f"{run.name}: probes at {run.probed} compaction(s): {probe_cells}; "
            f"baseline keep-newest: {probe_base}"
        )
        _add(totals[stub], run.probes)
        _add(base_totals[stub], run.probes_base)
        for e in run.errors[:3]:
            print(f"   error: {e}")
    for stub in stubs:
        cells, ok = _cells(totals[stub], PROBES, 90)
        base_cells, _ = _cells(base_totals[stub], PROBES, 90)
        print(
            f"all transcripts [{stub} stubs]: probes {cells}; "
            f"{'goal met' if ok else 'goal NOT met'} (every kind >= 90%); "
            f"baseline keep-newest: {base_cells}"
        )
        failed += not ok
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
