"""What a tool's output says about how the call went: its exit status, its error lines and,
for a test run, its outcome.

Shared by the artifact ledger, the informative stubs and the offline writer, so that all three
agree on whether a call failed and how. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Literal

ERROR_CHARS = 160
# Every distinct error line of one output is kept (the ledger's budget bounds them, newest
# first); this many at most, the first (a compiler's root cause) and the newest.
SIGNATURES_MAX = 60
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

# (pattern, rank): the rank says how much a line tells -- a message at a place (3) over an
# error with its message (2) over a count, a status or a heading (1). ``first_error_line``
# picks the most telling line, so ``go build``'s ``undefined: fmt.Printn`` wins over the
# ``# example.com/x`` heading and a test's assertion over "1 failed".
_SIGNATURES: tuple[tuple[re.Pattern[str], int], ...] = (
    # Python/Java/JS exceptions: "KeyError: 'x'", "django.core.exceptions.FieldError: ...",
    # "java.lang.NullPointerException", "TypeError: x is not a function"
    (
        re.compile(
            r"^(?:[A-Za-z_][\w]*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|Failure)"
            r"(?:\[[^\]]*\])?:\s*\S.*$"
        ),
        3,
    ),
    (
        re.compile(
            r"^(?:[A-Za-z_][\w]*\.)*[A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|Failure)"
            r"(?:\[[^\]]*\])?:?$"
        ),
        1,
    ),
    # a message at a place: "./main.go:5:2: undefined: fmt.Printn", "a.py:1:1: F401 ...",
    # pytest --tb=line "/t/test_a.py:3: assert 1 == 2"; not warnings, notes or traceback frames
    (
        re.compile(
            r"^[^\s:]*[\w)]\.[A-Za-z]\w{0,5}:\d+(?::\d+)?:\s+"
            r"(?!(?:warning|note|info|hint|in)\b)(?![A-Z]\w*Warning\b)\S.*$",
            re.I,
        ),
        3,
    ),
    # compilers and linters: "src/a.ts(3,4): error TS2345: ...", "a.c:3:4: error: ...",
    # "error[E0308]: ...", "error: ...", "ERROR: ...", "fatal: ...", "FATAL ...", "Error: ..."
    (re.compile(r"^\S.{0,300}?:\s(?:fatal )?error\b.*$", re.I), 3),
    (re.compile(r"^(?:error|fatal|panic)\[[^\]]*\]:\s.*$", re.I), 3),
    (re.compile(r"^(?:error|fatal|panic):\s.*$", re.I), 2),
    (re.compile(r"^FAILED \S+ - .+$"), 3),  # pytest's short summary: the test and why
    (re.compile(r"^(?:ERROR|FATAL|FAILED|FAIL|ERR!)\b.*$"), 1),
    (re.compile(r"^Error\b.*$"), 2),
    # tools: "npm ERR! ...", "make: *** [x] Error 2", "E: Unable to locate package ...",
    # "bash: foo: command not found", "x: No such file or directory"
    (re.compile(r"^npm (?:ERR!|error)\s.*$"), 1),
    (re.compile(r"^(?:g?make(?:\[\d+\])?): \*\*\*.*$"), 1),
    (re.compile(r"^E: \S.*$"), 2),
    (re.compile(r"^.*: (?:command not found|No such file or directory|Permission denied)$"), 2),
    # test runners: "--- FAIL: TestX", "✕ renders", "● Suite > case", "Tests: 1 failed, 3 passed"
    (re.compile(r"^--- FAIL: .*$"), 2),
    (re.compile(r"^[✕✗\u00d7✘] .+$"), 2),
    (re.compile(r"^● .+$"), 2),
    (re.compile(r"^.*\b\d+ (?:failed|failing|errors?)\b.*$", re.I), 1),
    (re.compile(r"^Segmentation fault.*$"), 1),
)
_NOT_SIGNATURE = re.compile(r"\b0 (?:failed|errors?)\b")  # "0 failed, 12 passed" is good news
# ESLint's stylish rows: "  3:10  error  'x' is defined but never used  no-unused-vars", under
# a line naming the file; the row is told with its file.
_ESLINT_ROW = re.compile(r"^(\d+:\d+)\s+error\s+(.+?)\s*$")
_PATH_HEADING = re.compile(r"^(?:[A-Za-z]:)?[\w@.~/\\-]*[\w-]\.[A-Za-z]\w{0,5}$")
# Lines that only head what follows: "# example.com/x" (go build), "=== FAILURES ===".
_HEADING_LINE = re.compile(r"^(?:#\s|={3,}|-{3,}|_{3,}|Traceback \(most recent call last\)|<)")


# A line that is only the word ("Error", "FAILED:") names no error: it says nothing a failed
# command's status does not.
BARE = re.compile(r"^(?:error|errors|fatal|failed|fail|failure|exception|panic|err!?)[:!.]*$", re.I)


def _matches(output: str) -> list[tuple[str, int]]:
    """Every error-signature line of ``output`` with its rank, in order, repeats included."""
    found: list[tuple[str, int]] = []
    heading = ""
    for raw in output.splitlines():
        line = raw.strip()
        if len(line) < 4 or len(line) > 2_000:
            continue
        if _PATH_HEADING.match(line):
            heading = line
            continue
        row = _ESLINT_ROW.match(line)
        if row:
            where = f"{heading}:{row.group(1)}" if heading else row.group(1)
            found.append((_line(f"{where}: error {_WS.sub(' ', row.group(2))}", ERROR_CHARS), 3))
            continue
        if _NOT_SIGNATURE.search(line) or BARE.match(line):
            continue
        rank = next((r for p, r in _SIGNATURES if p.match(line)), 0)
        if rank:
            found.append((_line(line, ERROR_CHARS), rank))
    return found


def _ranked(output: str) -> list[tuple[str, int]]:
    """The distinct error-signature lines of ``output`` (first occurrence order), ranked."""
    found: dict[str, int] = {}
    for sig, rank in _matches(output):
        found[sig] = max(rank, found.get(sig, 0))
    return list(found.items())


def edge_signatures(output: str, n: int = 2) -> list[str]:
    """The first ``n`` error lines of ``output`` and the last ``n`` by last occurrence (a
    compiler's root cause, an exception after its traceback or a runner's final word)."""
    found = [sig for sig, _ in _matches(output)]
    head = list(dict.fromkeys(found))[:n]
    tail = list(dict.fromkeys(reversed(found)))[:n]
    return list(dict.fromkeys(head + tail[::-1]))


def error_signatures(output: str) -> list[str]:
    """Every distinct error-signature line of one tool output, in order (at most
    ``SIGNATURES_MAX``: the first and the newest)."""
    sigs = [s for s, _ in _ranked(output)]
    if len(sigs) > SIGNATURES_MAX:
        sigs = [sigs[0], *sigs[-(SIGNATURES_MAX - 1) :]]
    return sigs


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
    """The line that best says what went wrong: the most telling error line (a message at a
    place, an exception with its message) -- of exceptions the last, after its traceback; of
    the rest the first --, else the first line that is not a heading or an exit marker."""
    ranked = _ranked(output)
    if ranked:
        best = max(r for _, r in ranked)
        top = [s for s, r in ranked if r == best]
        last = top[-1]
        return last if last.split(":", 1)[0].endswith(("Error", "Exception")) else top[0]
    for raw in output.splitlines():
        line = raw.strip()
        if line and not EXIT.search(line) and not _HEADING_LINE.match(line):
            return _line(line, ERROR_CHARS)
    return ""


# -- test outcomes ------------------------------------------------------------------------------
# The one set of patterns that reads a test runner's verdict from its output, for a run whose
# exit status is unknown. Anchored to what runners print (pytest, unittest, go, jest, cargo), so
# a word in prose ("looks ok", "no Error here") is no verdict, and "0 failed" no failure.
TESTS_FAILED = re.compile(
    r"\b[1-9]\d* (?:failed|failing|errors?)\b|^(?:FAILED|FAIL|ERROR)\b|^--- FAIL\b"
    r"|\b(?:failures|errors)=[1-9]|^test result: FAILED\b",
    re.M,
)
TESTS_PASSED = re.compile(r"\b\d+ passed\b|^OK\b|\bAll tests passed\b|^ok\s|^PASS\b", re.M)


def test_outcome(output: str) -> Literal["passed", "failed", "ran"]:
    """A test run's verdict as its output states it: a failure anywhere wins over a pass."""
    if TESTS_FAILED.search(output):
        return "failed"
    return "passed" if TESTS_PASSED.search(output) else "ran"
