"""The artifact ledger: what it extracts from real tool-call shapes, how it rolls across
compactions through the summary text, and how it stays bounded."""

from __future__ import annotations

import pytest

from sidecar.engine import ledger
from sidecar.engine.ledger import Failure, Ledger, SuiteRun
from sidecar.engine.tokens import estimate
from sidecar.summarizers.extractive import ExtractiveSummarizer
from sidecar.toolcalls import shell
from sidecar.toolcalls import vocabulary as tools
from tests.summarizers.helpers import assistant, bash, patch, summarize_bounded, text, tool, user

TRACEBACK = """<returncode>1</returncode>
<output>
Traceback (most recent call last):
  File "/testbed/test_fix.py", line 12, in <module>
    main()
  File "/testbed/django/db/migrations/autodetector.py", line 1039, in create_altered_indexes
    new_indexes = new_model_state.options[option_name]
KeyError: 'indexes'
</output>"""

TSC = """> pi-monorepo@0.0.1 check
> biome check --write . && tsgo --noEmit

src/core/agent-session.ts(16,58): error TS2305: Module '"@x/core"' has no exported member 'Q'.
src/main.ts(499,20): error TS2304: Cannot find name 'join'.
npm error Lifecycle script `check` failed with error:


Command exited with code 2"""


def _history() -> list:  # type: ignore[type-arg]
    return [
        user("Fix the crash when _order is in an index."),
        assistant(
            tool("read", {"filePath": "/testbed/django/db/models/options.py"}, "…"),
            tool(
                "bash",
                {
                    "command": "cd /testbed && cat > fix.py << 'EOF'\n"
                    "with open('django/db/migrations/autodetector.py', 'w') as f:\n"
                    "    f.write(src)\nEOF\npython fix.py"
                },
                "<returncode>0</returncode>\n<output>\n</output>",
            ),
            bash("cd /testbed && python test_fix.py 2>&1", TRACEBACK),
            tool(
                "bash",
                {"command": "grep -rn 'error:' src/ | head"},  # a search: its hits are no errors
                "src/a.ts:12: error: handling of x\n",
            ),
            tool("edit", {"filePath": "src/a.ts", "oldString": "a", "newString": "b"}, "ok"),
            patch("src/patched.ts"),
        ),
        user("Now run the type check."),
        assistant(
            tool("bash", {"command": "cd /repo && npm run check"}, error=TSC),
            bash("python -m pytest tests/test_x.py -q", "3 passed in 0.2s", exit=0),
            bash("sed -i 's/x/y/' broken.py", "", exit=4),
        ),
    ]


def test_ledger_of_real_tool_call_shapes() -> None:
    led = ledger.update(Ledger(), _history())
    assert led.modified == [
        "/testbed/fix.py",
        "/testbed/django/db/migrations/autodetector.py",  # written by the script it ran
        "src/a.ts",
        "src/patched.ts",
    ]
    assert led.read == ["/testbed/django/db/models/options.py"]
    assert led.failed == [
        Failure(
            command="cd /testbed && python test_fix.py 2>&1",
            status="exit 1",
            error="KeyError: 'indexes'",
        ),
        Failure(
            command="cd /repo && npm run check",
            status="exit 2",
            error="src/core/agent-session.ts(16,58): error TS2305: Module '\"@x/core\"' has no "
            "exported member 'Q'.",
        ),
        Failure(command="sed -i 's/x/y/' broken.py", status="exit 4", error=""),
    ]
    assert led.errors == [
        "KeyError: 'indexes'",
        "src/core/agent-session.ts(16,58): error TS2305: Module '\"@x/core\"' has no exported "
        "member 'Q'.",
        "src/main.ts(499,20): error TS2304: Cannot find name 'join'.",
        "npm error Lifecycle script `check` failed with error:",
    ]
    assert led.tests == [
        SuiteRun(command="python test_fix.py 2>&1", status="failed (exit 1)"),
        SuiteRun(command="python -m pytest tests/test_x.py -q", status="passed"),
    ]
    assert "broken.py" not in led.modified  # the failed sed wrote nothing we can be sure of
    assert led.first_request == "Fix the crash when _order is in an index."
    assert led.latest_request == "Now run the type check."


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (TRACEBACK, ["KeyError: 'indexes'"]),
        (
            "cc -c x.c\nx.c:3:10: fatal error: y.h: No such file or directory\n"
            "make: *** [Makefile:192: build] Error 2",
            [
                "x.c:3:10: fatal error: y.h: No such file or directory",
                "make: *** [Makefile:192: build] Error 2",
            ],
        ),
        (
            "Reading package lists... Done\nE: Unable to locate package llvm-dev",
            ["E: Unable to locate package llvm-dev"],
        ),
        (
            "FAILED tests/test_a.py::test_b - AssertionError: 1 != 2\n1 failed, 4 passed in 0.3s",
            [
                "FAILED tests/test_a.py::test_b - AssertionError: 1 != 2",
                "1 failed, 4 passed in 0.3s",
            ],
        ),
        (
            "error[E0308]: mismatched types\n --> src/main.rs:4:5",
            ["error[E0308]: mismatched types"],
        ),
        ("bash: tsgo: command not found", ["bash: tsgo: command not found"]),
        (
            "--- FAIL: TestParse (0.00s)\nFAIL\tpkg/x 0.01s",
            ["--- FAIL: TestParse (0.00s)", "FAIL pkg/x 0.01s"],
        ),
        ("all good\n0 failed, 12 passed", []),
        ("    raise KeyError('x')\nclass FieldError(Exception):", []),  # source code, not errors
    ],
)
def test_error_signatures(output: str, expected: list[str]) -> None:
    assert ledger.error_signatures(output) == expected


@pytest.mark.parametrize(
    ("output", "metadata", "code"),
    [
        ("<returncode>2</returncode>\n<output>x</output>", None, 2),
        ("...\n\nCommand exited with code 1", None, 1),
        ("done\n[The command completed with exit code 127.]", None, 127),
        ("anything", {"exit": 3}, 3),
        ("anything", {"exitCode": 0}, 0),
        ("no marker here", None, None),
        ('{"output":"boom","metadata":{"exit_code":1,"duration_seconds":0.1}}', None, 1),
        ("Exit code: 2\nWall time: 0.3 seconds\nOutput:\nx", None, 2),
        # a marker in the middle of a long file shown by cat is not this command's status
        ("x\n" * 1000 + "Command exited with code 9\n" + "y\n" * 1000, None, None),
    ],
)
def test_exit_status(output: str, metadata: dict[str, int] | None, code: int | None) -> None:
    assert ledger.exit_status(output, metadata) == code


def test_round_trip_through_the_summary_text() -> None:
    led = ledger.update(Ledger(dropped={"read": 3}), _history())
    block = ledger.render(led)
    summary = f"# Summary\n\nprose\n\n{block}"
    assert block.startswith("## Artifact ledger\n\n```ledger\n") and block.endswith("```\n")
    assert "### Files read (and not modified) (3 older dropped)" in block
    assert ledger.parse(summary) == led
    assert ledger.drop_block(summary) == "# Summary\n\nprose"
    assert ledger.drop_block("no block\n") == "no block\n"
    assert ledger.parse("no ledger here") is None
    assert ledger.latest(["old", summary, "model prose without a block"]) == led


def test_it_rolls_across_compactions_and_evicts_oldest_first() -> None:
    cycle1 = ledger.update(Ledger(), [assistant(tool("write", {"filePath": "first.py"}, "ok"))])
    carried = ledger.parse(ledger.render(cycle1))
    assert carried is not None
    reads = [tool("read", {"filePath": f"src/file_{i:03d}.py"}, "x") for i in range(200)]
    cycle2 = ledger.update(carried, [user("go on"), assistant(*reads)])
    assert cycle2.modified == ["first.py"]
    assert cycle2.first_request == "go on" and cycle2.latest_request == "go on"
    bounded_ = ledger.bound(cycle2, 600)
    assert estimate(ledger.render(bounded_)) <= 600
    assert bounded_.modified == ["first.py"]  # modified files go last
    kept = bounded_.read
    assert kept == [f"src/file_{i:03d}.py" for i in range(200 - len(kept), 200)]  # newest kept
    assert bounded_.dropped == {"read": 200 - len(kept)}
    # the dropped count survives the next round trip and keeps growing
    again = ledger.parse(ledger.render(bounded_))
    assert again is not None
    more = [tool("read", {"filePath": f"lib/more_{i:02d}.py"}, "") for i in range(50)]
    cycle3 = ledger.bound(ledger.update(again, [assistant(*more)]), 600)
    assert cycle3.dropped == {"read": 250 - len(cycle3.read)}  # every entry ever: kept or counted
    assert cycle3.read[-1] == "lib/more_49.py"


async def test_every_summary_ends_with_the_rolling_ledger() -> None:
    writer = ExtractiveSummarizer()

    async def compact(history: list, previous: list[str]) -> str:  # type: ignore[type-arg]
        result = await summarize_bounded(
            writer,
            history,
            previous,
            max_tokens=2_000,
            max_input_tokens=None,
        )
        return result.text

    first = await compact(
        [
            user("Refactor the parser."),
            assistant(bash("sed -i 's/a/b/' src/parser.py", "")),
        ],
        [],
    )
    assert first.count("```ledger") == 1
    assert "\n## Files modified" not in first  # the extractive writer leaves them to the ledger
    second = await compact([user("Now the lexer."), assistant(text("Done."))], [first])
    third = await compact([user("Tests?"), assistant(text("All pass."))], [first, second])
    for summary in (second, third):
        led = ledger.parse(summary)
        assert led is not None
        assert led.modified == ["src/parser.py"]
        assert led.first_request == "Refactor the parser."
        assert summary.count("```ledger") == 1
    assert ledger.parse(third).latest_request == "Tests?"  # type: ignore[union-attr]
    assert estimate(third) <= 2_000


def test_a_script_written_by_a_tool_then_run_from_the_shell_is_followed() -> None:
    script = "from pathlib import Path\nPath('conf/settings.py').write_text(new)\n"
    led = ledger.update(
        Ledger(),
        [
            assistant(
                tool("write", {"filePath": "/work/app/fix_settings.py", "content": script}, ""),
                bash("cd /work/app && python3 fix_settings.py", "done"),
            )
        ],
    )
    assert led.modified == ["/work/app/fix_settings.py", "/work/app/conf/settings.py"]


def test_apply_patch_through_the_shell() -> None:
    command = (
        "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n"
        "*** Add File: src/new.py\n+x\n*** End Patch\nEOF"
    )
    led = ledger.update(Ledger(), [assistant(tool("shell", {"command": command}, "Done!"))])
    assert led.modified == ["src/app.py", "src/new.py"]


@pytest.mark.parametrize(
    ("command", "is_test"),
    [
        ("python -m pytest tests/ -x", True),
        ("uv run pytest -k parser", True),
        ("npx vitest run src/a.test.ts", True),
        ("pnpm exec jest --ci", True),
        ("npm run test:unit", True),
        ("npm test", True),
        ("cargo test --all", True),
        ("go test ./...", True),
        ("python tests/runtests.py migrations", True),
        ("python reproduce_issue.py", False),
        ("npm run build", False),
        ("uv run python manage.py migrate", False),
        ("git commit -m 'fix tests'", False),
    ],
)
def test_test_commands(command: str, is_test: bool) -> None:
    [cmd] = shell.parse(command)
    assert tools.is_test(cmd) is is_test


def test_eviction_drops_errors_already_quoted_by_a_failed_command_first() -> None:
    failures = [
        Failure(command=f"make s{i}", status="exit 2", error=f"E{i}: the build broke in step {i}")
        for i in range(3)
    ]
    unrelated = [f"Z{j}: an older error nobody quoted, number {j}" for j in range(6)]
    quoted = [f.error for f in failures]
    led = Ledger(failed=failures, errors=unrelated + quoted)  # errors: the largest kind
    smaller = ledger.bound(led, ledger.tokens(ledger.render(led)) - 3)
    dropped = smaller.dropped["errors"]
    assert 1 <= dropped <= len(quoted)
    assert smaller.errors == unrelated + quoted[dropped:]  # the quoted went, oldest first
    block = ledger.render(smaller)
    assert all(e in block for e in unrelated + quoted)  # so no error text left the block


def test_other_agents_tool_shapes() -> None:
    codex = tool(
        "shell",
        {"command": ["bash", "-lc", "cd app && sed -i 's/a/b/' main.py"]},
        '{"output":"","metadata":{"exit_code":0}}',
    )
    cline = tool("write_to_file", {"path": "src/new.ts", "content": "x"}, "ok")
    gemini = tool("read_file", {"absolute_path": "/w/README.md"}, "text")
    led = ledger.update(Ledger(), [assistant(codex, cline, gemini)])
    assert led.modified == ["app/main.py", "src/new.ts"]
    assert led.read == ["/w/README.md"]


def test_a_summary_written_before_the_ledger_seeds_it() -> None:
    legacy = (
        "# Summary of the conversation so far\n\n## Files read\n- docs/a.md\n- src/x.py\n\n"
        "## Files modified\n- src/x.py\n\n## Errors\n- bash: KeyError: 'k'\n"
    )
    led = ledger.latest([legacy])
    assert led == Ledger(modified=["src/x.py"], read=["docs/a.md"], errors=["bash: KeyError: 'k'"])
    assert ledger.latest(["model prose only"]) == Ledger()
    assert ledger.latest([]) == Ledger()
