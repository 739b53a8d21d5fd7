"""Issue 35's shapes: each is recorded by the artifact ledger (files modified, errors kept) and
told by the offline writer's narrative -- one test per shape."""

from __future__ import annotations

import pytest

from sidecar.engine import ledger
from sidecar.engine.ledger import Ledger
from sidecar.model.messages import WithParts
from sidecar.model.parts import ToolPart
from sidecar.toolcalls import outputs
from tests.summarizers.helpers import assistant, offline_summary, tool, user

PATCH = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


_summary = offline_summary


def _section(summary: str, name: str) -> str:
    if f"## {name}\n" not in summary:
        return ""
    return summary.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]


def _bash(command: str, output: str = "", code: int = 0, name: str = "bash") -> ToolPart:
    return tool(name, {"command": command}, output, metadata={"exit": code})


# (shape, the calls, the file the ledger must list as modified)
WRITES: list[tuple[str, list[ToolPart], str]] = [
    ("black", [_bash("black src/fmt.py")], "src/fmt.py"),
    ("ruff --fix", [_bash("ruff check --fix src/lint.py")], "src/lint.py"),
    ("ruff format", [_bash("ruff format src/lint2.py")], "src/lint2.py"),
    ("prettier --write", [_bash("npx prettier --write web/app.tsx")], "web/app.tsx"),
    ("gofmt -w", [_bash("gofmt -w cmd/main.go")], "cmd/main.go"),
    ("bash -c sed -i", [_bash("bash -c \"sed -i 's/a/b/' pkg/nested.py\"")], "pkg/nested.py"),
    (
        "find -exec sed -i",
        [_bash("find src -name '*.py' -exec sed -i 's/old/new/g' {} \\;")],
        "src/**/*.py",
    ),
    (
        "xargs sed -i",
        [_bash("grep -rl old_name lib | xargs sed -i 's/old_name/new_name/'")],
        "lib/** (files containing 'old_name')",
    ),
    (
        "python -c open(w)",
        [_bash("python -c \"open('conf/gen.ini', 'w').write('[x]')\"")],
        "conf/gen.ini",
    ),
    ("ed", [_bash("ed -s doc/notes.txt <<'EOF'\n1d\nw\nq\nEOF")], "doc/notes.txt"),
    ("awk -i inplace", [_bash("awk -i inplace '{print $1}' data/cols.tsv")], "data/cols.tsv"),
    (
        "git apply of a patch written before",
        [
            tool("write", {"filePath": "fix.patch", "content": PATCH}, "ok"),
            _bash("git apply fix.patch"),
        ],
        "src/app.py",
    ),
    (
        "git apply of an unknown patch",
        [_bash("git apply other.patch")],
        "other.patch (applied patch)",
    ),
    (
        "git apply -v output",
        [
            _bash(
                "git apply -v third.patch",
                "Checking patch lib/x.py...\nApplied patch lib/x.py cleanly.",
            )
        ],
        "lib/x.py",
    ),
    (
        "execute_ipython_cell",
        [
            tool(
                "execute_ipython_cell",
                {"code": "with open('out/cell.txt', 'w') as f:\n    f.write('x')"},
                "",
            )
        ],
        "out/cell.txt",
    ),
    (
        "mcp__ tool with a path and content",
        [
            tool(
                "mcp__github__create_or_update_file",
                {"path": "docs/api.md", "content": "# API"},
                "ok",
            )
        ],
        "docs/api.md",
    ),
    (
        "Codex exec_command {cmd}",
        [tool("exec_command", {"cmd": "sed -i 's/1/2/' src/codex.rs"}, "", metadata={"exit": 0})],
        "src/codex.rs",
    ),
    (
        "apply_patch envelope",
        [
            tool(
                "apply_patch",
                {
                    "input": "*** Begin Patch\n*** Update File: src/env.py\n"
                    "@@\n-a = 1\n+a = 2\n*** End Patch"
                },
                "Done!",
            )
        ],
        "src/env.py",
    ),
]


@pytest.mark.parametrize(("shape", "calls", "path"), WRITES, ids=[w[0] for w in WRITES])
def test_a_file_changed_by_the_shape_is_in_the_ledger_and_the_narrative(
    shape: str, calls: list[ToolPart], path: str
) -> None:
    history = [user("tidy the code"), assistant(*calls)]
    assert path in ledger.update(Ledger(), history).modified
    summary = _summary(history)
    told = _section(summary, "What was done") + _section(
        summary, "Scratch files (reproduce / probe)"
    )
    assert path in told


def _errors_of(history: list[WithParts]) -> list[str]:
    return ledger.update(Ledger(), history).errors


GO_BUILD = "# example.com/x\n./main.go:5:2: undefined: fmt.Printn\n"
ESLINT = (
    "/w/src/a.js\n  3:10  error  'x' is defined but never used  no-unused-vars\n"
    "  5:1   error  Missing semicolon  semi\n\n✖ 2 problems (2 errors, 0 warnings)\n"
)
TB_LINE = (
    "============ FAILURES ============\n/t/tests/test_a.py:3: assert 1 == 2\n"
    "=========== short test summary info ============\n"
    "FAILED tests/test_a.py::test_one - assert 1 == 2\n1 failed in 0.1s\n"
)


@pytest.mark.parametrize(
    ("command", "output", "informative"),
    [
        ("go build ./...", GO_BUILD, "./main.go:5:2: undefined: fmt.Printn"),
        (
            "npx eslint src",
            ESLINT,
            "/w/src/a.js:3:10: error 'x' is defined but never used no-unused-vars",
        ),
        ("pytest --tb=line tests", TB_LINE, "/t/tests/test_a.py:3: assert 1 == 2"),
    ],
    ids=["go build heading", "eslint rows", "pytest --tb=line"],
)
def test_the_informative_line_wins_over_a_heading(
    command: str, output: str, informative: str
) -> None:
    assert outputs.first_error_line(output) == informative
    history = [user("build it"), assistant(_bash(command, output, 1))]
    led = ledger.update(Ledger(), history)
    assert informative in led.errors
    assert led.failed[-1].error == informative
    assert informative in _section(_summary(history), "Open problems")


def test_every_distinct_error_of_one_output_is_kept() -> None:
    lines = [f"src/m{i}.c:{i + 1}:1: error: thing {i}" for i in range(9)]
    repeated = [user("build"), assistant(_bash("make", "\n".join([*lines, *lines[:3]]), 2))]
    assert ledger.update(Ledger(), repeated).errors == lines  # a repeat counts once
    history = [user("build"), assistant(_bash("make", "\n".join(lines), 2))]
    led = ledger.update(Ledger(), history)
    assert led.errors == lines
    # over the ledger's budget the middle lines go first: the root cause and the final word stay
    small = ledger.bound(led, ledger.tokens(ledger.render(led)) - 40)
    assert lines[0] in ledger.render(small)  # the failed command quotes it
    assert {lines[1], lines[-2], lines[-1]} <= set(small.errors)
    assert len(small.errors) < len(lines)
    # read back from the summary text, the middle lines are still known as such
    again = ledger.parse(ledger.render(led))
    assert again is not None and again.errors[:4] == [lines[0], lines[1], lines[-2], lines[-1]]
    assert set(again.inner) == set(lines[2:-2])


def test_an_ipython_cells_traceback_is_an_error_and_a_problem() -> None:
    output = (
        "---------------------------------------------------------------------------\n"
        "NameError                                 Traceback (most recent call last)\n"
        "Cell In[1], line 1\n----> 1 undefined_name\n\n"
        "NameError: name 'undefined_name' is not defined"
    )
    history = [
        user("explore"),
        assistant(tool("execute_ipython_cell", {"code": "undefined_name"}, output)),
    ]
    assert "NameError: name 'undefined_name' is not defined" in _errors_of(history)
    problems = _section(_summary(history), "Open problems")
    assert "NameError: name 'undefined_name' is not defined" in problems


def test_an_unknown_tools_error_is_kept() -> None:
    failing = tool(
        "mcp__db__run_query", {"sql": "select 1"}, error="psycopg.errors.UndefinedTable: relation x"
    )
    history = [user("query"), assistant(failing)]
    assert "psycopg.errors.UndefinedTable: relation x" in _errors_of(history)
    assert "UndefinedTable" in _section(_summary(history), "Open problems")


def test_codex_exec_command_failures_are_failed_commands() -> None:
    call = tool(
        "exec_command",
        {"cmd": "cargo build"},
        "error[E0425]: cannot find value `x`",
        metadata={"exit": 101},
    )
    led = ledger.update(Ledger(), [user("build"), assistant(call)])
    assert led.failed[-1].command == "cargo build"
    assert led.failed[-1].error == "error[E0425]: cannot find value `x`"
