"""The offline writer's narrative, one section at a time, on a small constructed session:
deterministic, bounded, and never saying anything the session did not."""

from __future__ import annotations

from sidecar.model.messages import WithParts
from sidecar.summarizers._extract import ITEM_CHARS, STATE_LINE_CHARS
from sidecar.summarizers.base import COMPACTION_SYSTEM, DEFAULT_PROMPT, SummaryRequest
from sidecar.summarizers.extractive import summarize_extractive

from .helpers import assistant, text, tool, user

GOAL = "Make the CSV importer in src/importer.py accept semicolon-separated files."
PIVOT = "Forget semicolons for now: make the importer stream rows instead of loading all."
LEDGER = (
    "## Artifact ledger\n\n```ledger\n### First user request\n- "
    + GOAL
    + "\n### Latest user request\n- later\n```\n"
)
TRACE = "Traceback (most recent call last):\n  File 'x'\nValueError: bad delimiter ';'\n"


def request(history: list[WithParts], **kw: object) -> SummaryRequest:
    return SummaryRequest(
        system=COMPACTION_SYSTEM,
        prompt=DEFAULT_PROMPT,
        history=history,
        rendered=[],
        max_tokens=int(kw.pop("max_tokens", 4_000)),  # type: ignore[call-overload]
        **kw,  # type: ignore[arg-type]
    )


def section(summary: str, name: str) -> str:
    if f"## {name}\n" not in summary:
        return ""
    return summary.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0].strip()


def session() -> list[WithParts]:
    return [
        user(GOAL),
        assistant(
            "Let me look at the importer first.",
            tool("read", {"filePath": "src/importer.py"}, "import csv\n..."),
        ),
        assistant(
            tool("edit", {"filePath": "src/importer.py", "oldString": "a", "newString": "b"}, "ok"),
            tool("bash", {"command": "sed -i 's/,/;/' tests/data.csv"}, "", metadata={"exit": 0}),
            tool(
                "bash",
                {"command": "cd repo && pytest tests/test_importer.py"},
                TRACE + "1 failed in 0.1s",
                metadata={"exit": 1},
            ),
            tool(
                "bash",
                {"command": "python -m mypy src"},
                "src/x.py:1: error: bad",
                metadata={"exit": 1},
            ),
            tool("write", {"filePath": "README.md", "content": "x"}, error="permission denied"),
        ),
        assistant(
            tool(
                "bash",
                {"command": "python -m mypy src"},
                "Success: no issues",
                metadata={"exit": 0},
            ),
            tool(
                "todowrite",
                {
                    "todos": [
                        {"content": "handle quoted fields", "status": "pending"},
                        {"content": "read the importer", "status": "completed"},
                    ]
                },
                "ok",
            ),
            "The delimiter is detected now but the test still fails on quoted fields. "
            "Next I will handle quoted fields in parse_row().",
        ),
        user(PIVOT),
        assistant("I'll rewrite read_all() as a generator."),
    ]


def test_goal_is_the_first_request_not_the_oldest_of_the_span() -> None:
    summary = summarize_extractive(request(session()))
    assert section(summary, "Goal") == GOAL


def test_goal_comes_from_the_ledger_when_the_first_request_was_summarized_away() -> None:
    later = session()[-2:]  # only the pivot and its answer are left to summarize
    summary = summarize_extractive(request(later, ledger=LEDGER))
    assert section(summary, "Goal") == GOAL
    assert section(summary, "Latest request") == PIVOT


def test_latest_request_only_when_it_changed_course() -> None:
    assert section(summarize_extractive(request(session())), "Latest request") == PIVOT
    same = [user(GOAL), assistant("ok"), user("continue"), assistant("ok")]
    assert section(summarize_extractive(request(same)), "Latest request") == ""


def test_what_was_done_names_each_file_with_what_changed_it() -> None:
    done = section(summarize_extractive(request(session())), "What was done").splitlines()
    assert done == [
        "- src/importer.py — edited: `a` → `b`",
        "- tests/data.csv — by `sed -i 's/,/;/' tests/data.csv`",
    ]  # README.md: its write failed, nothing changed


def test_open_problems_are_failures_no_later_run_answered() -> None:
    problems = section(summarize_extractive(request(session())), "Open problems").splitlines()
    assert problems == [
        "- `cd repo && pytest tests/test_importer.py` → exit 1: ValueError: bad delimiter ';'",
        "- write README.md → error: permission denied",
    ]  # mypy failed, then passed: answered


def test_a_passing_rerun_or_a_full_suite_answers_a_failure() -> None:
    history = [
        *session(),
        assistant(tool("bash", {"command": "cd repo && pytest"}, "3 passed", metadata={"exit": 0})),
        assistant(tool("write", {"filePath": "README.md", "content": "y"}, "ok")),
    ]
    assert section(summarize_extractive(request(history)), "Open problems") == ""


def test_current_state_is_the_last_run_change_and_words() -> None:
    state = section(summarize_extractive(request(session())), "Current state").splitlines()
    assert state == [
        "- Last test run: `cd repo && pytest tests/test_importer.py` → exit 1: "
        "ValueError: bad delimiter ';'",
        "- Last command: `python -m mypy src` → ok",
        "- Last change: tests/data.csv — by `sed -i 's/,/;/' tests/data.csv`",
        "- Assistant's last message: I'll rewrite read_all() as a generator.",
    ]
    assert all(len(line) <= STATE_LINE_CHARS + 30 for line in state)


def test_current_state_says_what_the_assistant_said_it_would_do() -> None:
    history = [
        user(GOAL),
        assistant("The parser is in place. Now let me run the tests to check it. Back soon."),
    ]
    state = section(summarize_extractive(request(history)), "Current state")
    assert "- Assistant said it would: Now let me run the tests to check it." in state


def test_next_steps_are_the_latest_plans_unfinished_items() -> None:
    steps = section(summarize_extractive(request(session())), "Next steps").splitlines()
    assert steps == ["- handle quoted fields"]  # the plan wins over the last sentence
    assert "- read the importer" not in steps  # a completed todo is no next step


def test_no_filler_when_nothing_is_planned() -> None:
    summary = summarize_extractive(request([user(GOAL), assistant("Done: it works.")]))
    assert section(summary, "Next steps") == ""
    assert "Continue the work" not in summary


def test_narrative_is_deterministic_and_bounded() -> None:
    long = "x" * 5_000
    history = [
        user(GOAL),
        assistant(tool("bash", {"command": "make " + long}, long, metadata={"exit": 2}), long),
    ]
    a = summarize_extractive(request(history))
    assert a == summarize_extractive(request(history))
    problems = section(a, "Open problems").splitlines()
    assert len(problems) == 1 and len(problems[0]) <= ITEM_CHARS + 2
    for budget in (200, 600):
        assert (len(summarize_extractive(request(history, max_tokens=budget))) + 2) // 4 <= budget


def test_synthetic_texts_are_never_requests() -> None:
    history = [user(GOAL), assistant("ok"), user(text("Continue if you have next steps"))]
    summary = summarize_extractive(request(history))
    assert "Continue if you have" not in summary


def test_a_pipeline_that_hides_the_status_is_judged_by_its_output() -> None:
    """``python x.py | tail`` exits 0 with tail's status: the traceback says it failed."""
    history = [
        user(GOAL),
        assistant(
            tool(
                "bash", {"command": "python check.py 2>&1 | tail -5"}, TRACE, metadata={"exit": 0}
            ),
            tool("bash", {"command": "grep -rn semicolon src"}, "", metadata={"exit": 1}),
        ),
    ]
    summary = summarize_extractive(request(history))
    assert section(summary, "Open problems") == (
        "- `python check.py 2>&1 | tail -5` → failed: ValueError: bad delimiter ';'"
    )  # grep finding nothing (exit 1) is no problem
    assert "- Last command: `grep -rn semicolon src` → exit 1" in section(summary, "Current state")
