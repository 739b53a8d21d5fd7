"""The offline writer's reading of a history: what was asked, done, run, failed and planned.

``Extractor`` walks the messages once (tools by the vocabulary in ``sidecar.toolcalls``, the
files' changes and the failure/fix pairing in ``_changes``); the functions after it turn what
it found, and what earlier summaries carried, into the summary's sections. ``extractive``
renders them within the token bound. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import sidecar.summarizers._changes as _changes
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
from sidecar.summarizers._text import first_line, one_line, to_json, trim
from sidecar.summarizers.base import (
    SummaryRequest,
)
from sidecar.summarizers.sections import (
    COMMANDS,
    CUT_NOTE,
    DIRECTIVES,
    ERRORS,
    FILES_READ,
    ITEM,
    Sections,
    cut,
)
from sidecar.toolcalls import outputs, shell
from sidecar.toolcalls.vocabulary import (
    EDITOR_TOOLS,
    OPEN_FILE_ACTIONS,
    call_kind,
    cell_shell,
    classify,
    code_text,
    is_machinery,
    is_test,
    main_argument,
    no_match,
    patch_text,
    shell_script,
    text_action_paths,
    todo_items,
    tool_kind,
    tool_name,
    tool_paths,
    unfinished,
)

# Per-item caps (characters).
OBJECTIVE_CHARS = 600
DIRECTIVE_CHARS = 300
STATE_LINE_CHARS = 300
ITEM_CHARS = 240
COMMAND_CHARS = 100
_NEXT_HINT = re.compile(
    r"\b(next|todo|remaining|still need|need to|will now|i will|i'll|then|should|plan)\b", re.I
)
# What the assistant says it is about to do: "Let me ...", "I'll ...", "Now I need to ...".
_INTENT = re.compile(
    r"^(?:(?:now|next|then|first|ok(?:ay)?|great|good|perfect)[,!.]?\s+)*"
    r"(?:let me|let's|i'll|i will|i'm going to|i am going to|i need to|we need to|i should|"
    r"we should|i'm now going to|i will now|next,? i)\b",
    re.I,
)
_SENTENCES = re.compile(r"\n+|(?<=[.!?])\s+")


# -- the walk ---------------------------------------------------------------------------------


def _is_plan(sentence: str) -> bool:
    """A sentence that states what comes next: an intent ("Let me ...") or a plan word."""
    text = one_line(sentence)
    return len(text) > 8 and bool(_INTENT.match(text) or _NEXT_HINT.search(text))


def _intent(text: str) -> str:
    """The last sentence of ``text`` saying what the assistant is about to do ("" if none)."""
    found = ""
    for chunk in _SENTENCES.split(text):
        item = ITEM.match(chunk)
        sentence = one_line(item.group(1) if item else chunk)
        if len(sentence) > 8 and _INTENT.match(sentence):
            found = sentence
    return found


def _shell_outcome(
    output: str, status: int | None, errored: bool, failed: bool, tests: bool
) -> str:
    """A shell call's outcome word: error, exit N, failed, passed, ok or ran."""
    if errored:
        return "error"
    if status is not None and status != 0:
        return f"exit {status}"
    if failed:
        return "failed"
    if tests:
        return "passed" if status == 0 or outputs.test_outcome(output) == "passed" else "ran"
    return "ok" if status == 0 else "ran"


def _whole_suite(tests: list[shell.Command]) -> bool:
    """Test commands naming no file, path or test id: the whole suite ran."""
    return bool(tests) and all(
        not any(("/" in w or "." in w or "::" in w) for w in c.argv[1:]) for c in tests
    )


# An edit tool's output that says the edit was not made (OpenHands "ERROR:\nNo replacement was
# performed", SWE-agent "Your proposed edit has introduced new syntax error(s)").
_EDIT_FAILED = re.compile(
    r"\A\s*(?:error\b|failed\b|failure\b)|no replacement was performed|"
    r"your proposed edit has introduced|edit was not applied",
    re.I,
)
_OPEN_FILE = re.compile(r"^\[File: (\S+) \(\d+ lines total\)\]", re.M)
_WRITE_VERBS = frozenset({"write", "create", "create_file", "write_file", "writefile"})


class Extractor:
    def __init__(self, sections: Sections) -> None:
        self.s = sections
        self.first_user: str = ""
        self.last_assistant_text: str = ""
        self.last_user_text: str = ""
        self.last_is_user = False
        self.todos: list[str] | None = None  # the newest plan's unfinished items
        self.earlier: list[str] = []  # summaries met inline (standard compaction sends them)
        self.changes = _changes.Changes()
        self.runs: list[_changes.Run] = []  # every finished command or tool call, in order
        self.intent: str = ""  # the last thing the assistant said it would do
        self.step = 0
        self.said = ""  # the assistant's text just before the current tool call
        self.opened = ""  # the file an editor without a path works on (SWE-agent)
        self.bodies = shell.Bodies()  # scripts and patches written, to follow when run

    def run(self, history: Sequence[WithParts]) -> None:
        for msg in history:
            if isinstance(msg.info, UserMessage):
                self._user(msg)
            elif msg.info.summary:
                self.earlier.extend(
                    p.text for p in msg.parts if isinstance(p, TextPart) and p.text.strip()
                )
            else:
                self._assistant(msg)

    def _why(self) -> str:
        return _changes.reason(self.said)

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
        self.said = ""
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
                    self.said = part.text
            elif isinstance(part, ToolPart):
                self.step += 1
                self._tool(part)
            elif isinstance(part, PatchPart):
                self.step += 1
                for f in part.files:
                    if f.strip():
                        self.changes.by_command(
                            f, "patch", self.step, self._why(), creates=False, deletes=False
                        )
        if texts:
            text = "\n".join(texts)
            self.last_assistant_text = text
            self.last_is_user = False
            self.intent = _intent(text) or self.intent
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

    def _shell(self, cmd: str, output: str, code: int | None, errored: bool) -> None:
        fx = shell.analyse(cmd)
        tests = [c for c in fx.commands if is_test(c)]
        kind = call_kind(fx.commands)
        runs = kind in ("runner", "test")
        # "pytest | tail": the status is tail's, so the output decides
        status = None if code == 0 and _masked(cmd, fx.commands) else code
        sigs = outputs.error_signatures(output) if errored or code or kind != "viewer" else []
        failed = (
            errored
            or (status is not None and status != 0)
            or (status is None and runs and bool(sigs))
        )
        if not errored and code == 1 and no_match(fx.commands, output):
            failed = False  # a search found nothing: no problem
        error = outputs.first_error_line(output) if failed else ""
        first = f"`{trim(cmd.split(chr(10), 1)[0], COMMAND_CHARS)}`"
        self.runs.append(
            _changes.Run(
                what=first,
                outcome=_shell_outcome(output, status, errored, failed, bool(tests)),
                error=error,
                failed=failed,
                test=bool(tests),
                key=_changes.command_key(cmd),
                full=_whole_suite(tests),
                step=self.step,
                files=_changes.test_files(tests, output) if tests else (),
                acts=kind in ("writer", "runner", "test"),
                last_error=(outputs.edge_signatures(output, 1) or [""])[-1] if failed else "",
            )
        )
        self.changes.read(fx.read)
        ok = not (errored or (code is not None and code != 0))
        self._shell_writes(fx, first, self.bodies.writes(fx, output) if ok else fx.redirected)

    def _shell_writes(self, fx: shell.Effects, first: str, written: list[str]) -> None:
        """The files a command line wrote (a failed line surely wrote only its redirection
        targets), each a change made by ``first``; the scripts it ran."""
        deleted = {
            shell.join(c.cwd, w)
            for c in fx.commands
            if c.program in ("rm", "unlink")
            for w in c.argv[1:]
            if not w.startswith("-")
        }
        why = self._why()
        for path in written:
            self.changes.by_command(
                path,
                first,
                self.step,
                why,
                creates=path in fx.redirected or path in fx.bodies,
                deletes=path in deleted,
            )
        for script, cwd in fx.scripts_run:
            self.changes.ran(shell.join(cwd, script))

    def _targets(self, name: str, data: dict[str, Any], output: str) -> list[str]:
        """The files a write-like call names: its path arguments, the files of its diff, the
        file a SWE-agent text action works on ("[File: f.py ...]" in its output)."""
        paths = tool_paths(data) or shell.diff_files(patch_text(data))
        found = _OPEN_FILE.search(output) if not paths else None
        return paths or ([found.group(1)] if found else _text_action_path(name, data, self.opened))

    def _failed_tool(self, part: ToolPart, data: dict[str, Any], error: str) -> None:
        name = tool_name(part.tool)
        writes = tool_kind(part.tool, data) == "write"
        target = ", ".join((self._targets(name, data, "") if writes else tool_paths(data))[:2])
        arg = target or trim(main_argument(part.tool, data), COMMAND_CHARS)
        self.runs.append(
            _changes.Run(
                what=f"{part.tool} {arg}".strip(),
                outcome="error",
                error=outputs.first_error_line(error) or first_line(error),
                failed=True,
                test=False,
                key=_tool_key(part.tool, data, arg),
                step=self.step,
            )
        )
        label = f"{part.tool}" + (f" {target}" if target else "")
        self.s.add(ERRORS, trim(f"{label}: {first_line(error, ITEM_CHARS)}", ITEM_CHARS))

    def _tool(self, part: ToolPart) -> None:
        name = tool_name(part.tool)
        state = part.state
        data = state.input if isinstance(state.input, dict) else {}
        kind = tool_kind(part.tool, data)
        if name == "think" and isinstance(data.get("thought"), str):
            self.said = data["thought"]  # OpenHands' think tool: the assistant's reasoning
            return
        if isinstance(state, ToolError):
            if kind in ("shell", "code"):
                cmd = _command(data) if kind == "shell" else code_text(data)
                self.s.add(COMMANDS, _command_item(cmd, "error", state.error))
                self._shell(cmd if kind == "shell" else "", state.error, None, True)
            else:
                self._failed_tool(part, data, state.error)
            return
        if not isinstance(state, ToolCompleted):
            return  # pending / running: interrupted, nothing happened for sure
        if kind == "shell" or (kind == "other" and _command(data) and not tool_paths(data)):
            cmd = _command(data)
            self._text_action(name, cmd, state.output)
            output = "" if state.time.compacted else state.output
            code = outputs.exit_status(state.output, state.metadata)
            failed = code is not None and code != 0
            self.s.add(COMMANDS, _command_item(cmd, f"exit {code}" if failed else "ok", output))
            self._shell(cmd, state.output, code, False)
            return
        if kind == "code":
            self._code(code_text(data), state.output, state.metadata)
            return
        if kind == "todo":
            items = todo_items(data)
            if items is not None:
                self.todos = [trim(t, ITEM_CHARS) for t in unfinished(items)]
            return
        if kind in ("write", "read"):
            self._file_tool(part, kind, data, state.output)

    def _file_tool(self, part: ToolPart, kind: str, data: dict[str, Any], output: str) -> None:
        """A completed tool that writes or reads files by name."""
        name = tool_name(part.tool)
        paths = tool_paths(data)
        arg = trim(main_argument(part.tool, data), COMMAND_CHARS)
        if kind == "write":
            if _EDIT_FAILED.search(output[:400]):
                self._failed_tool(part, data, output)
                return
            paths = self._targets(name, data, output)
            self._wrote(name, data, paths, patch_text(data))
            arg = ", ".join(paths[:2]) or arg
            self.runs.append(
                _changes.Run(
                    f"{part.tool} {arg}".strip(),
                    "ok",
                    "",
                    False,
                    False,
                    _tool_key(part.tool, data, arg),
                    step=self.step,
                )
            )
            if paths and name in ("create", "create_file"):
                self.opened = paths[-1]
        else:
            paths = paths or _text_action_path(name, data, "")
            key = _tool_key(part.tool, data, arg)
            self.runs.append(_changes.Run(f"{part.tool} {arg}", "ok", "", False, False, key))
            self.s.extend(FILES_READ, paths)
            self.changes.read(paths)
            if paths:
                self.opened = paths[-1]

    def _text_action(self, name: str, cmd: str, output: str) -> None:
        """SWE-agent's "open f.py" / "create f.py" typed as a command: the file it opens."""
        words = cmd.split()
        if len(words) > 1 and words[0] == name and name in ("open", "create", "goto"):
            self.opened = words[1]

    def _wrote(self, name: str, data: dict[str, Any], paths: list[str], patch: str) -> None:
        why = self._why()
        content = next(
            (v for k in _changes.CONTENT_KEYS if isinstance(v := data.get(k), str)), None
        )
        verb = str(data.get("command", "")).lower() if name in EDITOR_TOOLS else name
        if content is not None and len(paths) == 1:
            self.bodies.remember(paths[0], content)
        for path in paths:
            if content is not None and (verb in _WRITE_VERBS or len(paths) == 1):
                self.changes.wrote(path, content, self.step, why)
            elif verb in ("create", "create_file") and content is None:
                self.changes.wrote(path, "", self.step, why)
            else:
                self.changes.edited(path, _changes.edit_change(data, patch), self.step, why)

    def _code(self, code: str, output: str, metadata: dict[str, Any] | None) -> None:
        """A live interpreter's cell: its shell lines, its writes, its traceback."""
        lines = cell_shell(code)
        sigs = outputs.error_signatures(output)
        failed = "Traceback" in output or any(
            s.split(":", 1)[0].endswith(("Error", "Exception")) for s in sigs
        )
        first = f"`{trim(code.split(chr(10), 1)[0], COMMAND_CHARS)}`"
        self.s.add(COMMANDS, _command_item(code, "error" if failed else "ok", output))
        if lines.strip():
            self._shell(lines, output, 1 if failed else 0, False)
        else:
            self.runs.append(
                _changes.Run(
                    what=first,
                    outcome="error" if failed else "ok",
                    error=outputs.first_error_line(output) if failed else "",
                    failed=failed,
                    test=False,
                    key=first,
                    step=self.step,
                )
            )
        if not failed:
            for path in shell.script_writes(code):
                self.changes.by_command(
                    path, first, self.step, self._why(), creates=True, deletes=False
                )


def _text_action_path(name: str, data: dict[str, Any], opened: str) -> list[str]:
    """The file of a SWE-agent text action: "create f.py" names it, "edit 10:12" edits the open
    file."""
    command = data.get("command")
    named = text_action_paths(name, command) if isinstance(command, str) else []
    return named or ([opened] if name in OPEN_FILE_ACTIONS and opened else [])


def _command(data: dict[str, Any]) -> str:
    return shell_script(data) or to_json(data)


_PIPE = re.compile(r"(?<!\|)\|(?![|&])")


def _masked(script: str, commands: list[shell.Command]) -> bool:
    """Whether a pipeline hides a program's exit status behind a viewer (``make | tail``)."""
    if len(commands) < 2 or not _PIPE.search(script):
        return False
    kinds = [classify(c) for c in commands]
    return kinds[-1] in ("viewer", "search") and any(k in ("runner", "test") for k in kinds)


def _tool_key(tool: str, data: dict[str, Any], arg: str) -> str:
    """What a later call must match to answer a failed one: the same kind of action on the
    same file (a failed ``edit`` of a file is answered by a later ``write`` of it)."""
    return f"{tool_kind(tool, data)} {arg}"


def _command_item(cmd: str, outcome: str, output: str) -> str:
    head = f"$ {trim(cmd, 160)} → {outcome}"
    line = first_line(output, 100)
    return f"{head}: {line}" if line else head


def problems(ex: Extractor, carried: Iterable[str]) -> tuple[list[str], list[str]]:
    """Open problems (failures no later run answered, those carried from an earlier summary
    included) and "failure ⇒ fix" pairs for the answered ones."""
    runs = list(ex.runs)
    earlier: list[_changes.Run] = []
    for item in carried:
        what = item.split(" → ", 1)[0]
        if what.startswith("`"):
            key = _changes.command_key(what.strip("`"))
        else:
            tool, _, arg = what.partition(" ")
            key = _tool_key(tool, {}, arg)
        is_test = what.startswith("`") and _is_test_key(what.strip("`"))
        earlier.append(
            _changes.Run(
                what=what,
                outcome=item.split(" → ", 1)[1] if " → " in item else "failed",
                error="",
                failed=True,
                test=is_test,
                key=key,
                step=-1,
            )
        )
    still, resolved = _changes.pair(earlier + runs, ex.changes, outputs.BARE)
    lines = {id(r): item for r, item in zip(earlier, carried, strict=True)}
    open_ = [lines.get(id(r)) or trim(r.line(outputs.BARE), ITEM_CHARS) for r in still]
    return open_, resolved


def _is_test_key(key: str) -> bool:
    return any(is_test(c) for c in shell.parse(key))


def current_state(ex: Extractor, carried: str) -> str:
    """Where things stand, from what happened last: the last test run and the last command with
    their results, the last file changed, and the assistant's last words and stated intent."""
    lines: list[str] = []
    last_test = next((r for r in reversed(ex.runs) if r.test), None)
    last_cmd = next((r for r in reversed(ex.runs) if r.what.startswith("`")), None)
    if last_test is not None:
        lines.append(f"- Last test run: {trim(last_test.line(outputs.BARE), STATE_LINE_CHARS)}")
    if last_cmd is not None and last_cmd is not last_test:
        lines.append(f"- Last command: {trim(last_cmd.line(outputs.BARE), STATE_LINE_CHARS)}")
    if ex.changes.files:
        last = next(reversed(ex.changes.files.values()))
        lines.append(f"- Last change: {trim(last.what(), STATE_LINE_CHARS)}")
    if ex.last_assistant_text:
        lines.append(
            f"- Assistant's last message: {trim(ex.last_assistant_text, STATE_LINE_CHARS)}"
        )
    if ex.intent and one_line(ex.intent) != one_line(ex.last_assistant_text):
        lines.append(f"- Assistant said it would: {trim(ex.intent, STATE_LINE_CHARS)}")
    if not lines:
        return carried
    return "\n".join(lines)


INTENTION = "(the assistant's last stated intention, no plan was kept) "


def next_steps(ex: Extractor) -> list[str]:
    """The newest plan's unfinished items (todowrite, TodoWrite, update_plan ...); without a
    plan, the assistant's last stated intention, labelled as such. A user request nobody
    answered yet comes first."""
    steps: list[str] = []
    if ex.last_is_user and ex.last_user_text:
        steps.append("Answer the latest user request: " + trim(ex.last_user_text, ITEM_CHARS))
    if ex.todos:  # a plan with everything done leaves the assistant's intention
        return steps + ex.todos
    intent = ex.intent or _intent(ex.last_assistant_text)
    if not intent and ex.last_assistant_text:
        found = [one_line(c) for c in _SENTENCES.split(ex.last_assistant_text) if _is_plan(c)]
        intent = found[-1] if found else ""
    if intent:
        steps.append(INTENTION + trim(intent, ITEM_CHARS))
    return steps


_LEDGER_FIRST = re.compile(r"^### First user request\n- (.+)$", re.M)


def goal_of(req: SummaryRequest, carried: str, ex: Extractor) -> str:
    """The session's first request: the daemon's ledger carries it verbatim across compactions;
    else an earlier summary's goal; else the first request in this history."""
    found = _LEDGER_FIRST.search(req.ledger) if req.ledger else None
    if found:
        return cut(found.group(1), OBJECTIVE_CHARS)
    return carried or cut(one_line(ex.first_user), OBJECTIVE_CHARS)


def changed_course(goal: str, latest: str) -> bool:
    """A later request counts when it is not the goal again and says something (3+ words)."""
    a, b = (CUT_NOTE.sub("", one_line(t)).rstrip("…").lower() for t in (goal, latest))
    n = min(len(a), len(b))  # either may have been cut: the same request starts the same
    return bool(b) and len(b.split()) >= 3 and a[:n] != b[:n]
