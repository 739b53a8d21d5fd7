"""Shell commands by what they do: viewers, searches, writers, runners, tests.

A shell call is classified command by command (``classify``) over what
``sidecar.toolcalls.shell`` parses: a call is a viewer only if every command in it is
(``call_kind``), so ``cat > check.py <<EOF ... EOF`` followed by ``python check.py`` is a runner
whose errors count. The tool half of the vocabulary (which tools read, write, run shells) is
``vocabulary``.

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Literal

from sidecar.toolcalls import outputs, shell

CommandKind = Literal["viewer", "search", "writer", "runner", "test"]
# Weakest to strongest: a call is as strong as its strongest command.
_STRENGTH: dict[str, int] = {"viewer": 0, "search": 1, "writer": 2, "runner": 3, "test": 4}

# Commands that only show text, and those that only look for it.
VIEWERS = frozenset(
    {
        "cat",
        "sed",
        "head",
        "tail",
        "less",
        "more",
        "nl",
        "bat",
        "batcat",
        "view",
        "ls",
        "tree",
        "wc",
        "echo",
        "printf",
        "diff",
        "awk",
        "file",
        "stat",
        "du",
        "df",
        "jq",
        "pwd",
        "sort",
        "uniq",
        "cut",
        "tr",
        "column",
        "xxd",
        "od",
        "hexdump",
        "which",
        "type",
        "whoami",
        "date",
        "basename",
        "dirname",
        "realpath",
        "readlink",
        "true",
        "false",
        ":",
        "cd",
        "pushd",
        "popd",
        "export",
        "set",
        "unset",
        "clear",
        "sleep",
    }
)
SEARCHERS = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "fd", "fdfind"})
# Commands that change files when they run (more by redirection or -i: see ``shell.analyse``).
WRITERS = frozenset(
    {
        "tee",
        "touch",
        "rm",
        "rmdir",
        "unlink",
        "truncate",
        "shred",
        "mv",
        "cp",
        "install",
        "rsync",
        "ln",
        "dd",
        "mkdir",
        "chmod",
        "chown",
        "patch",
        "ed",
        "ex",
    }
)
_QUIET_GIT = frozenset({"grep", "log", "show", "diff", "status", "blame", "branch", "remote"})
_GIT_WRITES = frozenset({"apply", "am", "checkout", "restore", "rm", "mv", "add", "stash", "reset"})
_PASS_THROUGH = frozenset({"xargs", "timeout", "nice", "stdbuf", "ionice"})
_FILE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})

_TEST_WORDS = frozenset(
    {
        "pytest",
        "py.test",
        "tox",
        "nox",
        "jest",
        "vitest",
        "mocha",
        "ava",
        "rspec",
        "phpunit",
        "ctest",
    }
)
_TEST_SUBCOMMANDS = {
    "npm": ("test", "t"),
    "yarn": ("test",),
    "pnpm": ("test",),
    "bun": ("test",),
    "cargo": ("test", "nextest"),
    "go": ("test",),
    "make": ("test", "check", "tests"),
    "mvn": ("test", "verify"),
    "gradle": ("test",),
    "./gradlew": ("test",),
    "dotnet": ("test",),
    "swift": ("test",),
    "mix": ("test",),
    "deno": ("test",),
}
_TEST_SCRIPT = re.compile(
    r"(?:^|/)(?:test_[\w.-]*|[\w-]*_test|[\w-]*tests?|runtests)\.(?:py|sh|js|ts)$"
)
# Runners that start another program: "npx vitest run", "uv run pytest", "pnpm exec jest".
_WRAPPERS = frozenset(
    {
        "npx",
        "bunx",
        "pnpx",
        "uvx",
        "uv",
        "poetry",
        "pipenv",
        "pdm",
        "hatch",
        "rye",
        "pnpm",
        "yarn",
        "bun",
        "timeout",
        "xargs",
    }
)


def _unwrapped(argv: list[str]) -> list[str]:
    while argv and argv[0].rsplit("/", 1)[-1] in _WRAPPERS:
        rest = [w for w in argv[1:] if not w.startswith("-")]
        if argv[0].rsplit("/", 1)[-1] == "timeout" and rest:
            rest = rest[1:]  # timeout 60 pytest
        if rest and rest[0] in ("run", "exec", "dlx", "x", "tool"):
            rest = rest[1:]
        if not rest:
            break
        argv = rest
    return argv


def is_test(cmd: shell.Command) -> bool:
    """Whether ``cmd`` runs tests: a test runner, a package manager's test script, or a
    ``test_*.py``-style script."""
    if _runs_tests(cmd.argv):
        return True
    inner = _unwrapped(cmd.argv)
    return inner != cmd.argv and _runs_tests(inner)


def _runs_tests(argv: list[str]) -> bool:
    if not argv:
        return False
    prog = argv[0].rsplit("/", 1)[-1]
    if prog in _TEST_WORDS:
        return True
    if prog in _TEST_SUBCOMMANDS or argv[0] in _TEST_SUBCOMMANDS:
        subs = _TEST_SUBCOMMANDS.get(argv[0], _TEST_SUBCOMMANDS.get(prog, ()))
        words = [w for w in argv[1:] if not w.startswith("-")]
        if words and words[0] == "run" and len(words) > 1:
            return words[1].split(":")[0] in ("test", "tests")
        return bool(words) and words[0] in subs
    if shell.is_interpreter(prog):
        args = argv[1:]
        if "-m" in args:
            i = args.index("-m")
            return i + 1 < len(args) and args[i + 1] in (
                "pytest",
                "unittest",
                "nose",
                "nose2",
                "tox",
            )
        ops = [w for w in args if not w.startswith("-")]
        return bool(ops) and bool(_TEST_SCRIPT.search(ops[0]))
    return bool(_TEST_SCRIPT.search(argv[0]))


def classify(cmd: shell.Command) -> CommandKind:
    """What one simple command does: only shows text, looks for text, writes files, runs a
    program, or runs tests. Unknown programs are runners (their output may hold errors)."""
    if is_test(cmd):
        return "test"
    argv = cmd.argv
    prog = cmd.program
    if prog in _PASS_THROUGH and (started := _started(cmd)) is not None:
        return classify(started)
    if not argv:  # a bare redirection ("> f"): truncates a file
        return "writer" if any(r.op in _FILE_REDIRECTS for r in cmd.redirects) else "viewer"
    writes = any(
        r.op in _FILE_REDIRECTS and r.target and not r.target.startswith(("/dev/", "&"))
        for r in cmd.redirects
    )
    if prog == "git":
        return _git_kind(argv, writes)
    if prog in SEARCHERS:
        if prog == "find" and any(w in ("-exec", "-execdir", "-delete") for w in argv):
            return "runner"
        return "writer" if writes else "search"
    if prog in VIEWERS:
        if shell.in_place(cmd):
            return "writer"
        return "writer" if writes else "viewer"
    if prog in WRITERS or shell.in_place(cmd):
        return "writer"
    return "runner"


def _started(cmd: shell.Command) -> shell.Command | None:
    """The command a pass-through program starts ("xargs wc -l", "timeout 60 make")."""
    rest = [w for w in cmd.argv[1:] if not w.startswith("-")]
    if cmd.program == "timeout" and rest:
        rest = rest[1:]
    return shell.Command(words=rest, redirects=cmd.redirects, cwd=cmd.cwd) if rest else None


def _git_kind(argv: list[str], writes: bool) -> CommandKind:
    words = [w for w in argv[1:] if not w.startswith("-")]
    sub = words[0] if words else ""
    if sub == "grep":
        return "search"
    if sub in _QUIET_GIT or not sub:
        return "writer" if writes else "viewer"
    return "writer" if sub in _GIT_WRITES else "runner"


def strongest(kinds: list[CommandKind]) -> CommandKind:
    """The kind of a whole call: a viewer only if every command is one."""
    return max(kinds, key=lambda k: _STRENGTH[k]) if kinds else "viewer"


def call_kind(commands: list[shell.Command]) -> CommandKind:
    return strongest([classify(c) for c in commands])


def runs_something(commands: list[shell.Command]) -> bool:
    """Whether a call's output is a program's own (its errors are the session's), i.e. not
    only viewers and searches whose output quotes files."""
    return _STRENGTH[call_kind(commands)] >= _STRENGTH["writer"]


def no_match(commands: list[shell.Command], output: str) -> bool:
    """Exit 1 of a call that only searches and shows (``grep``, ``rg``, ``find``): nothing was
    found, nothing failed -- unless its output says otherwise."""
    kinds = {classify(c) for c in commands}
    return (
        "search" in kinds and kinds <= {"search", "viewer"} and not outputs.error_signatures(output)
    )
