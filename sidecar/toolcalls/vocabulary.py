"""The tool vocabulary: which agent tools read, write, search and run shells, and their argument
names -- one table for the artifact ledger, the extractive writer and the informative stubs.

Agents name the same action differently (``Edit``, ``str_replace``, ``mcp__fs__write_file``;
``bash``, ``run_terminal_cmd``, ``container.exec``), and take the file as ``filePath``,
``file_path``, ``path`` ... What a shell call's commands do is ``commands`` (``classify``,
``is_test``...), named here too so the vocabulary is one import.

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from sidecar.model.conversation import COMPACTION_TEXT, CONTINUE_TEXT, DEFAULT_PROMPT
from sidecar.toolcalls import shell
from sidecar.toolcalls.commands import CommandKind as CommandKind
from sidecar.toolcalls.commands import call_kind as call_kind
from sidecar.toolcalls.commands import classify as classify
from sidecar.toolcalls.commands import is_test as is_test
from sidecar.toolcalls.commands import no_match as no_match
from sidecar.toolcalls.commands import runs_something as runs_something
from sidecar.toolcalls.commands import strongest as strongest

# -- tool names ---------------------------------------------------------------------------------

PATH_KEYS = (
    "filePath",
    "file_path",
    "filepath",
    "path",
    "filename",
    "file",
    "target_file",
    "notebook_path",
    "targetFile",
    "absolute_path",
    "relative_path",
    "uri",
)
PATH_LIST_KEYS = ("paths", "files", "filePaths", "file_paths")
COMMAND_KEYS = ("command", "cmd", "script", "commandLine", "args")
PATCH_KEYS = ("patchText", "patch", "input", "diff")
SEARCH_KEYS = ("pattern", "query", "regex", "glob", "q")
READ_TOOLS = frozenset(
    {
        "read",
        "view",
        "cat",
        "open",
        "read_file",
        "readfile",
        "view_file",
        "open_file",
        "read_many_files",
        "readmanyfiles",
        "notebook_read",
    }
)
WRITE_TOOLS = frozenset(
    {
        "edit",
        "write",
        "patch",
        "multiedit",
        "multi_edit",
        "apply_patch",
        "applypatch",
        "create",
        "create_file",
        "write_file",
        "writefile",
        "edit_file",
        "editfile",
        "replace",
        "insert",
        "str_replace",
        "search_replace",
        "notebook_edit",
        "notebookedit",
        "delete_file",
        "rename_file",
        "move_file",
        "append_file",
        "replace_in_file",
        "write_to_file",
        "apply_diff",
        "insert_content",
        "search_and_replace",
    }
)
# Editors whose ``command`` argument says what they do (``view`` reads, the rest write).
EDITOR_TOOLS = frozenset(
    {"str_replace_editor", "str_replace_based_edit_tool", "text_editor", "editor"}
)
SEARCH_TOOLS = frozenset(
    {
        "grep",
        "glob",
        "search",
        "find",
        "find_file",
        "search_file",
        "search_dir",
        "codebase_search",
        "file_search",
        "grep_search",
        "list",
        "ls",
        "list_dir",
        "list_directory",
    }
)
SHELL_TOOLS = frozenset(
    {
        "bash",
        "shell",
        "sh",
        "zsh",
        "terminal",
        "run_command",
        "run_shell",
        "execute_command",
        "exec",
        "run_terminal_cmd",
        "run_in_terminal",
        "powershell",
        "cmd",
        "local_shell",
        "container.exec",
        "exec_command",
        "execute_bash",
        "shell_command",
        "run_shell_command",
        "run_bash",
        "bash_tool",
    }
)
# Tools that run code in a live interpreter (OpenHands' IPython cell, notebooks): the code's
# writes (``open('f', 'w')``), its ``!shell`` lines and its tracebacks count.
CODE_TOOLS = frozenset(
    {
        "execute_ipython_cell",
        "ipython",
        "jupyter",
        "run_python",
        "execute_python",
        "python_exec",
        "code_interpreter",
        "run_code",
        "execute_code",
    }
)
CODE_KEYS = ("code", "source", "cell")
# Plans: todowrite / TodoWrite (``todos``: content + status), Codex's update_plan (``plan``:
# step + status), and the like.
TODO_TOOLS = frozenset(
    {"todowrite", "todo_write", "update_todos", "todo", "update_plan", "todo_list", "plan"}
)
TODO_LIST_KEYS = ("todos", "plan", "items", "tasks", "steps")
TODO_TEXT_KEYS = ("content", "step", "text", "title", "task", "description")
_DONE = frozenset({"completed", "complete", "done", "cancelled", "canceled", "skipped"})
# User texts that are machinery, not requests (OpenCode's own continuation prompts).
SKIP_USER_TEXTS = frozenset(
    {
        COMPACTION_TEXT.lower(),
        CONTINUE_TEXT.lower(),
        re.sub(r"\s+", " ", DEFAULT_PROMPT).strip().lower().rstrip("."),
    }
)


def is_machinery(text: str) -> bool:
    """Whether a user text is one of those prompts rather than a request."""
    return re.sub(r"\s+", " ", text).strip().lower().rstrip(".") in SKIP_USER_TEXTS


def tool_name(name: str) -> str:
    """``mcp__server__Edit`` / ``functions.edit`` / ``Edit`` -> ``edit``."""
    name = name.strip().lower()
    for sep in ("__", "."):
        if sep in name and name not in SHELL_TOOLS:
            name = name.rsplit(sep, 1)[-1]
    return name


def tool_paths(data: Any) -> list[str]:
    """The file paths a tool call's arguments name (single key first, then lists and edits)."""
    if not isinstance(data, dict):
        return []
    out: list[str] = []
    for key in PATH_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            out.append(value.strip())
            break
    for key in PATH_LIST_KEYS:
        value = data.get(key)
        if isinstance(value, list):
            out.extend(v.strip() for v in value if isinstance(v, str) and v.strip())
    edits = data.get("edits")  # multiedit-style: [{filePath, ...}, ...]
    if isinstance(edits, list):
        for edit in edits:
            out.extend(p for p in tool_paths(edit) if p not in out)
    return out


def tool_command(data: dict[str, Any]) -> str:
    """The command line of a tool call's arguments ("" when there is none)."""
    for key in COMMAND_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value:
            return " ".join(str(v) for v in value)
    return ""


def shell_script(data: dict[str, Any]) -> str:
    """The command line of a shell tool call; an argv such as ``["bash", "-lc", "cd x && make"]``
    (Codex) is its script, not the words joined."""
    command = data.get("command", data.get("cmd"))
    if (
        isinstance(command, list)
        and len(command) >= 3
        and all(isinstance(w, str) for w in command)
        and command[-2] in ("-c", "-lc", "-ic", "-lic", "-Command")
    ):
        return str(command[-1])
    return tool_command(data)


def patch_text(data: dict[str, Any]) -> str:
    """The diff or apply_patch envelope a patch tool was given ("" when none)."""
    return next((v for k in PATCH_KEYS if isinstance(v := data.get(k), str)), "")


ToolKind = Literal["read", "write", "search", "shell", "code", "todo", "other"]

# Words in the names of tools the table does not know (``mcp__github__create_or_update_file``,
# ``mcp__ide__getDiagnostics``) that say whether they change or show a file.
_WRITE_WORDS = re.compile(
    r"(?:^|[_\-.])(?:write|edit|create|update|replace|patch|insert|append|delete|remove|move|"
    r"rename|save|put|modify)(?:$|[_\-.]|[A-Z])|(?:write|edit|create|update|replace|patch|insert|"
    r"append|delete|remove|move|rename|save|modify)(?=[A-Z_]|$)",
)
_READ_WORDS = re.compile(
    r"(?:^|[_\-.])(?:read|view|open|get|cat|show|fetch)(?:$|[_\-.]|[A-Z])|^(?:read|view|open|get)"
)
_CONTENT_KEYS = (
    "content",
    "contents",
    "file_text",
    "new_string",
    "newString",
    "new_str",
    "edits",
    "text",
    "diff",
    "patch",
)


def tool_kind(name: str, data: dict[str, Any]) -> ToolKind:
    """What a (non-shell-looking) tool call does, from its name and arguments. A tool the table
    does not know (an ``mcp__*`` server's, Codex's ``exec_command``) is judged by its
    arguments: a command line runs a shell, code runs an interpreter, a file with new content
    or a diff is a write, a file named by a reading verb is a read."""
    tool = tool_name(name)
    if tool in SHELL_TOOLS:
        return "shell"
    if tool in CODE_TOOLS:
        return "code"
    if tool in TODO_TOOLS:
        return "todo"
    if tool in EDITOR_TOOLS:
        verb = str(data.get("command", "")).lower()
        return "read" if verb in ("view", "read", "") else "write"
    if tool in WRITE_TOOLS or "patch" in tool:
        return "write"
    if tool in READ_TOOLS:
        return "read"
    if tool in SEARCH_TOOLS:
        return "search"
    return _inferred(name, data)


def _inferred(name: str, data: dict[str, Any]) -> ToolKind:
    raw = name.strip().rsplit("__", 1)[-1]
    paths = tool_paths(data)
    if not paths and isinstance(data.get("command", data.get("cmd")), str | list):
        return "shell" if shell_script(data).strip() else "other"
    if not paths and any(isinstance(data.get(k), str) for k in CODE_KEYS):
        return "code"
    if paths and any(k in data for k in _CONTENT_KEYS):
        return "write"
    if shell.diff_files(patch_text(data)):
        return "write"
    if paths and _WRITE_WORDS.search(raw):
        return "write"
    if paths and _READ_WORDS.search(raw):
        return "read"
    if any(isinstance(data.get(k), list) for k in ("todos", "plan")):
        return "todo"
    return "other"


def code_text(data: dict[str, Any]) -> str:
    """The code a code tool ran ("" when none)."""
    return next((v for k in CODE_KEYS if isinstance(v := data.get(k), str)), "")


_CELL_SHELL = re.compile(r"^\s*!(.+)$", re.M)
_CELL_MAGIC = re.compile(r"^%%(?:bash|sh|script \w+)\s*\n(.*)", re.S)


def cell_shell(code: str) -> str:
    """The shell lines of an IPython cell: ``!cmd`` lines and a ``%%bash`` cell's body."""
    magic = _CELL_MAGIC.match(code.lstrip())
    if magic:
        return magic.group(1)
    return "\n".join(m.group(1) for m in _CELL_SHELL.finditer(code))


def todo_items(data: dict[str, Any]) -> list[tuple[str, str]] | None:
    """A plan tool's items as (text, status), in order; ``None`` when ``data`` holds no list."""
    for key in TODO_LIST_KEYS:
        value = data.get(key)
        if isinstance(value, list):
            out: list[tuple[str, str]] = []
            for item in value:
                if isinstance(item, str) and item.strip():
                    out.append((item, "pending"))
                elif isinstance(item, dict):
                    text = next(
                        (v for k in TODO_TEXT_KEYS if isinstance(v := item.get(k), str)), ""
                    )
                    if text.strip():
                        out.append((text, str(item.get("status", "pending")).lower()))
            return out
    return None


def unfinished(items: list[tuple[str, str]]) -> list[str]:
    """The items not done yet: the one in progress first, then the pending ones, in order."""
    open_ = [(t, st) for t, st in items if st not in _DONE]
    return [t for t, st in open_ if st in ("in_progress", "in-progress", "active")] + [
        t for t, st in open_ if st not in ("in_progress", "in-progress", "active")
    ]


# SWE-agent's text actions that work on the file opened last when they name none.
OPEN_FILE_ACTIONS = frozenset({"edit", "insert", "replace", "str_replace"})
_LINE_RANGE = re.compile(r"^\d+(?::\d+)?$")


def text_action_paths(name: str, command: str) -> list[str]:
    """The file a SWE-agent text action typed as a command names: "create f.py" and
    "open f.py 40" name it as the second word; "edit 287:295" is a line range of the open
    file, no path."""
    words = command.split()
    named = len(words) > 1 and words[0] == name and not _LINE_RANGE.match(words[1])
    return [words[1]] if named else []


def main_argument(name: str, data: dict[str, Any]) -> str:
    """The one argument that says what a call was about: its file, command, or search pattern."""
    kind = tool_kind(name, data)
    if kind == "shell":
        return shell_script(data)
    paths = tool_paths(data)
    if paths:
        return paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1})"
    if kind == "write":
        files = shell.diff_files(patch_text(data))
        if files:
            return files[0] if len(files) == 1 else f"{files[0]} (+{len(files) - 1})"
    for key in SEARCH_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return tool_command(data)
