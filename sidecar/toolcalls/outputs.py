"""What a tool's output says about how the call went: its exit status and its error lines.

Shared by the artifact ledger, the informative stubs and the offline writer, so that all three
agree on whether a call failed and how. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

ERROR_CHARS = 160
# Of one output's error lines the first ones (a compiler's root cause) and the last ones (a
# Python exception after its traceback, a test summary) are kept.
SIGNATURES_HEAD = 2
SIGNATURES_TAIL = 2
_WS = re.compile(r"\s+")


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (whitespace collapsed), at most ``limit`` characters."""
    flat = _WS.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


_line = one_line


EXIT = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>"
    r"|(?:command |process )?exited with (?:exit )?(?:code|status) (-?\d+)"
    r"|completed with exit code (-?\d+)"
    r"|^exit(?:_code| code| status):? (-?\d+)\s*$"
    r"|\"exit_code\":\s*(-?\d+)",
    re.I | re.M,
)
EXIT_SCAN = 400  # markers are looked for only this near either end, never in the middle of a file

_SIGNATURES = (
    # Python/Java/JS exceptions: "KeyError: 'x'", "django.core.exceptions.FieldError: ...",
    # "java.lang.NullPointerException", "TypeError: x is not a function"
    re.compile(
        r"^(?:[A-Za-z_][\w]*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|Failure)"
        r"(?:\[[^\]]*\])?(?::.*)?$"
    ),
    # compilers and linters: "src/a.ts(3,4): error TS2345: ...", "a.c:3:4: error: ...",
    # "error[E0308]: ...", "error: ...", "ERROR: ...", "fatal: ...", "FATAL ...", "Error: ..."
    re.compile(r"^\S.{0,300}?:\s(?:fatal )?error\b.*$", re.I),
    re.compile(r"^(?:error|fatal|panic)(?:\[[^\]]*\])?:\s.*$", re.I),
    re.compile(r"^(?:ERROR|FATAL|FAILED|FAIL|ERR!)\b.*$"),
    re.compile(r"^Error\b.*$"),
    # tools: "npm ERR! ...", "make: *** [x] Error 2", "E: Unable to locate package ...",
    # "bash: foo: command not found", "x: No such file or directory"
    re.compile(r"^npm (?:ERR!|error)\s.*$"),
    re.compile(r"^(?:g?make(?:\[\d+\])?): \*\*\*.*$"),
    re.compile(r"^E: \S.*$"),
    re.compile(r"^.*: (?:command not found|No such file or directory|Permission denied)$"),
    # test runners: "--- FAIL: TestX", "✕ renders", "● Suite > case", "Tests: 1 failed, 3 passed"
    re.compile(r"^--- FAIL: .*$"),
    re.compile(r"^[✕✗\u00d7✘] .+$"),
    re.compile(r"^● .+$"),
    re.compile(r"^.*\b\d+ (?:failed|failing|errors?)\b.*$", re.I),
    re.compile(r"^Segmentation fault.*$"),
)
_NOT_SIGNATURE = re.compile(r"\b0 (?:failed|errors?)\b")  # "0 failed, 12 passed" is good news


# A line that is only the word ("Error", "FAILED:") names no error: it says nothing a failed
# command's status does not.
BARE = re.compile(r"^(?:error|errors|fatal|failed|fail|failure|exception|panic|err!?)[:!.]*$", re.I)


def error_signatures(output: str) -> list[str]:
    """The first and the last error-signature lines of one tool output, distinct."""
    found: list[str] = []
    for raw in output.splitlines():
        line = raw.strip()
        if len(line) < 4 or len(line) > 2_000 or _NOT_SIGNATURE.search(line) or BARE.match(line):
            continue
        if any(p.match(line) for p in _SIGNATURES):
            found.append(_line(line, ERROR_CHARS))
    head = list(dict.fromkeys(found))[:SIGNATURES_HEAD]
    tail = list(dict.fromkeys(reversed(found)))[:SIGNATURES_TAIL]  # by last occurrence
    return list(dict.fromkeys(head + tail[::-1]))


def exit_status(output: str, metadata: dict[str, Any] | None) -> int | None:
    """The exit status a tool result reports (metadata first, then the usual output markers)."""
    meta = metadata or {}
    for key in ("exit", "exitCode", "exit_code", "returncode"):
        value = meta.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    found: int | None = None
    ends = (
        output if len(output) <= 2 * EXIT_SCAN else output[:EXIT_SCAN] + "\n" + output[-EXIT_SCAN:]
    )
    for m in EXIT.finditer(ends):
        digits = next(g for g in m.groups() if g is not None)
        found = int(digits)
    return found


def first_error_line(output: str) -> str:
    sigs = error_signatures(output)
    if sigs:
        return sigs[-1] if sigs[-1].split(":", 1)[0].endswith(("Error", "Exception")) else sigs[0]
    for raw in output.splitlines():
        line = raw.strip()
        if line and not EXIT.search(line) and line not in ("<output>", "</output>"):
            return _line(line, ERROR_CHARS)
    return ""
