"""The tool vocabulary: each command of a compound shell call classified on its own, and the
errors of any call that runs something reaching the artifact ledger."""

from __future__ import annotations

import pytest

from sidecar.engine import ledger
from sidecar.toolcalls import shell
from sidecar.toolcalls import vocabulary as tools
from tests.summarizers.helpers import assistant, tool, user

TRACE = (
    "Traceback (most recent call last):\n"
    '  File "check.py", line 3, in <module>\n'
    "    print(load()['x'])\n"
    "KeyError: 'x'\n"
)


def kinds(script: str) -> list[str]:
    return [tools.classify(c) for c in shell.parse(script)]


# (script, the kind of each command, the call's kind, an output with errors, the error line)
SHAPES = [
    pytest.param(
        "cat > check.py << 'EOF'\nimport json\nprint(load()['x'])\nEOF\npython check.py",
        ["writer", "runner"],
        "runner",
        TRACE,
        "KeyError: 'x'",
        id="heredoc-then-run",
    ),
    pytest.param(
        "cd repo && pytest -x tests/test_a.py",
        ["viewer", "test"],
        "test",
        "E   AssertionError: assert 1 == 2\nFAILED tests/test_a.py::test_one - AssertionError\n"
        "1 failed in 0.1s",
        "FAILED tests/test_a.py::test_one - AssertionError",
        id="cd-then-pytest",
    ),
    pytest.param(
        "python - << EOF\nfrom app import main\nmain()\nEOF",
        ["runner"],
        "runner",
        'Traceback (most recent call last):\n  File "<stdin>", line 2\nImportError: no main\n',
        "ImportError: no main",
        id="python-stdin-heredoc",
    ),
    pytest.param(
        "sed -i 's/old/new/' src/a.py && git diff",
        ["writer", "viewer"],
        "writer",
        "sed: -e expression #1, char 9: unterminated `s' command\nerror: sed failed",
        "error: sed failed",
        id="sed-i-then-git-diff",
    ),
    pytest.param(
        "python manage.py migrate 2>&1 | tail -20",
        ["runner", "viewer"],
        "runner",
        "  Applying app.0002... \ndjango.db.utils.OperationalError: no such table: app_x\n",
        "django.db.utils.OperationalError: no such table: app_x",
        id="pipeline-ending-in-tail",
    ),
]


@pytest.mark.parametrize(("script", "each", "call", "output", "error"), SHAPES)
def test_each_command_is_classified_on_its_own(
    script: str, each: list[str], call: str, output: str, error: str
) -> None:
    assert kinds(script) == each
    assert tools.call_kind(shell.parse(script)) == call
    assert tools.runs_something(shell.parse(script))


@pytest.mark.parametrize(("script", "each", "call", "output", "error"), SHAPES)
def test_errors_of_a_call_that_runs_something_reach_the_ledger(
    script: str, each: list[str], call: str, output: str, error: str
) -> None:
    """No exit status in the output: the errors are found because the call runs something."""
    led = ledger.update(
        ledger.Ledger(), [user("fix it"), assistant(tool("bash", {"command": script}, output))]
    )
    assert error in led.errors


@pytest.mark.parametrize(("script", "each", "call", "output", "error"), SHAPES)
def test_a_failed_call_is_a_failed_command_with_its_error(
    script: str, each: list[str], call: str, output: str, error: str
) -> None:
    led = ledger.update(
        ledger.Ledger(),
        [assistant(tool("bash", {"command": script}, output, metadata={"exit": 1}))],
    )
    assert [f.command for f in led.failed] == [script.split("\n", 1)[0]]
    assert led.failed[0].status == "exit 1" and led.failed[0].error
    assert error in led.errors


@pytest.mark.parametrize(
    ("script", "each"),
    [
        ("cat src/a.py | head -50", ["viewer", "viewer"]),
        ("cd src && grep -rn 'error:' . | head", ["viewer", "search", "viewer"]),
        ("git log --oneline | head -5; git status", ["viewer", "viewer", "viewer"]),
        ("find . -name '*.py' | xargs wc -l", ["search", "viewer"]),
        ("sed -n '1,40p' x.py", ["viewer"]),
        ("ls -la\nnl -ba a.py | sed -n '10,20p'", ["viewer", "viewer", "viewer"]),
    ],
)
def test_a_call_is_a_viewer_only_if_every_command_is(script: str, each: list[str]) -> None:
    assert kinds(script) == each
    assert not tools.runs_something(shell.parse(script))
    led = ledger.update(
        ledger.Ledger(),
        [assistant(tool("bash", {"command": script}, "src/a.py:3: error: quoted text\n"))],
    )
    assert led.errors == []  # what a viewer shows quotes files: no error of the session


@pytest.mark.parametrize(
    ("script", "kind"),
    [
        ("echo hi > out.txt", "writer"),
        ("tee log.txt", "writer"),
        ("git apply fix.patch", "writer"),
        ("git commit -m x", "runner"),
        ("make", "runner"),
        ("npm test", "test"),
        ("uv run pytest -q", "test"),
        ("timeout 60 pytest", "test"),
        ("go build ./...", "runner"),
        ("find . -name '*.pyc' -delete", "runner"),
        ("./configure", "runner"),
        ("bash run_tests.sh", "test"),
    ],
)
def test_single_command_kinds(script: str, kind: str) -> None:
    assert kinds(script) == [kind]


def test_the_ledger_and_the_extractive_writer_share_one_vocabulary() -> None:
    from sidecar.engine import ledger as ledger_module
    from sidecar.summarizers import _extract, extractive

    assert ledger_module.SHELL_TOOLS is tools.SHELL_TOOLS
    assert _extract.tool_kind is tools.tool_kind
    assert extractive.shell_modified_files("sed -i 's/a/b/' x.py") == ["x.py"]


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("edit", {"filePath": "src/a.py", "oldString": "a"}, "src/a.py"),
        ("bash", {"command": "pytest -q"}, "pytest -q"),
        ("shell", {"command": ["bash", "-lc", "cd x && make"]}, "cd x && make"),
        ("grep", {"pattern": "TODO", "path": "src"}, "src"),
        ("glob", {"pattern": "**/*.py"}, "**/*.py"),
        ("apply_patch", {"input": "*** Begin Patch\n*** Update File: a.py\n"}, "a.py"),
        ("mcp__fs__read_file", {"paths": ["a", "b"]}, "a (+1)"),
    ],
)
def test_main_argument(name: str, data: dict[str, object], expected: str) -> None:
    assert tools.main_argument(name, data) == expected
