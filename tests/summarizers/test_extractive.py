"""The offline extractive writer: structure, determinism, merging and the token bound."""

from __future__ import annotations

import msgspec
import pytest

from sidecar.model.messages import MessageError, WithParts
from sidecar.summarizers.base import (
    COMPACTION_SYSTEM,
    DEFAULT_PROMPT,
    SummaryRequest,
)
from sidecar.summarizers.extractive import (
    EMPTY_TEXT,
    ExtractiveSummarizer,
    shell_modified_files,
    summarize_extractive,
)
from sidecar.summarizers.sections import parse_summary

from .helpers import assistant, patch, text, tool, user


def request(history, *, max_tokens=2_000, previous=(), prompt=DEFAULT_PROMPT) -> SummaryRequest:
    return SummaryRequest(
        system=COMPACTION_SYSTEM,
        prompt=prompt,
        history=list(history),
        rendered=[],
        max_tokens=max_tokens,
        previous_summaries=list(previous),
    )


def session_one():
    return [
        user("Add retry logic to the HTTP client in src/http.py. Use exponential backoff."),
        assistant(
            "I'll look at the client first.",
            tool("read", {"filePath": "/repo/src/http.py"}, "def get(url): ..."),
            tool("glob", {"pattern": "**/*.py"}, "src/http.py\nsrc/app.py"),
        ),
        assistant(
            tool(
                "edit",
                {"filePath": "/repo/src/http.py", "oldString": "a", "newString": "b"},
                "Edit applied",
            ),
            tool("write", {"file_path": "/repo/tests/test_http.py", "content": "..."}, "ok"),
            patch("/repo/src/retry.py"),
        ),
        user("Never use time.sleep in tests; inject the sleep function."),
        assistant(
            tool(
                "bash",
                {"command": "pytest -q tests/test_http.py"},
                "3 passed in 0.2s\nmore output",
                metadata={"exit": 0},
            ),
            tool(
                "bash", {"command": "ruff check src"}, "src/http.py:3:1 F401", metadata={"exit": 1}
            ),
            tool("bash", {"command": "make lint"}, error="make: *** No rule to make target 'lint'"),
            tool("edit", {"filePath": "/repo/src/missing.py"}, error="File not found: missing.py"),
        ),
        assistant(
            "Retry logic is in place and tests pass.\n"
            "Next, I will fix the unused import reported by ruff.",
            error=MessageError(name="MessageAbortedError", data={"message": "aborted by user"}),
        ),
    ]


def section(summary: str, name: str) -> str:
    after = summary.split(f"## {name}\n", 1)[1]
    return after.split("\n## ", 1)[0]


async def test_sections_from_parts() -> None:
    result = await ExtractiveSummarizer().summarize(request(session_one()))
    summary = result.text
    assert result.provider_id == "extractive" and result.model_id == "extractive-v1"

    assert "Add retry logic to the HTTP client" in section(summary, "Goal")
    assert "Never use time.sleep in tests" in section(summary, "Latest request")
    assert "/repo/src/http.py" in section(summary, "Files read")
    modified = section(summary, "Files modified")
    for path in ("/repo/src/http.py", "/repo/tests/test_http.py", "/repo/src/retry.py"):
        assert path in modified
    assert "missing.py" not in modified  # the edit failed
    commands = section(summary, "Commands run")
    assert "$ pytest -q tests/test_http.py → ok: 3 passed in 0.2s" in commands
    assert "more output" not in commands  # first line only
    assert "$ ruff check src → exit 1: src/http.py:3:1 F401" in commands
    assert "$ make lint → error: make: *** No rule to make target 'lint'" in commands
    errors = section(summary, "Errors")
    assert "File not found: missing.py" in errors
    assert "MessageAbortedError: aborted by user" in errors
    assert "Retry logic is in place" in section(summary, "Current state")
    assert "fix the unused import" in section(summary, "Next steps")


async def test_token_counts() -> None:
    req = request(session_one())
    result = await ExtractiveSummarizer().summarize(req)
    assert result.tokens.output == (len(result.text) + 2) // 4
    assert result.tokens.input > 0
    assert result.tokens.cache.read == 0


async def test_deterministic_bytes() -> None:
    history = session_one()
    first = await ExtractiveSummarizer().summarize(request(history))
    again = await ExtractiveSummarizer().summarize(request(history))
    # And a copy that went through the wire format decodes to the same summary.
    copied = msgspec.json.decode(msgspec.json.encode(history), type=list[WithParts])
    third = await ExtractiveSummarizer().summarize(request(copied))
    assert first.text.encode() == again.text.encode() == third.text.encode()


async def test_empty_history_is_a_sentence_not_empty() -> None:
    result = await ExtractiveSummarizer().summarize(request([]))
    assert result.text == EMPTY_TEXT
    only_markers = [user(text("What did we do so far?", synthetic=True))]
    assert summarize_extractive(request(only_markers)) == EMPTY_TEXT


def test_synthetic_and_ignored_user_texts_are_not_directives() -> None:
    history = [
        user("Real request: build the parser."),
        user(text("Continue if you have next steps", synthetic=True)),
        user(text("hidden", ignored=True)),
    ]
    summary = summarize_extractive(request(history))
    assert "Continue if you have" not in summary
    assert "hidden" not in summary


def test_latest_unanswered_user_request_is_a_next_step() -> None:
    history = [user("Build the parser."), assistant("Done."), user("Now add a CLI flag --strict.")]
    assert "--strict" in section(summarize_extractive(request(history)), "Next steps")


def test_todowrite_pending_items_are_next_steps() -> None:
    todos = [
        {"content": "write tests", "status": "completed"},
        {"content": "update the README", "status": "pending"},
        {"content": "release 1.2", "status": "in_progress"},
    ]
    history = [user("go"), assistant(tool("todowrite", {"todos": todos}, "ok"), "Working.")]
    steps = section(summarize_extractive(request(history)), "Next steps")
    assert "update the README" in steps and "release 1.2" in steps
    assert "write tests" not in steps


def test_str_replace_editor_and_apply_patch() -> None:
    patch_text = (
        "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n"
        "*** Add File: src/b.py\n+new\n*** End Patch"
    )
    history = [
        user("edit things"),
        assistant(
            tool("str_replace_editor", {"command": "view", "path": "/r/view.py"}, "..."),
            tool("str_replace_editor", {"command": "str_replace", "path": "/r/edit.py"}, "ok"),
            tool("apply_patch", {"patchText": patch_text}, "ok"),
            tool("mcp__fs__write_file", {"path": "/r/mcp.txt"}, "ok"),
        ),
    ]
    summary = summarize_extractive(request(history))
    assert "/r/view.py" in section(summary, "Files read")
    modified = section(summary, "Files modified")
    for path in ("/r/edit.py", "src/a.py", "src/b.py", "/r/mcp.txt"):
        assert path in modified
    assert "/r/view.py" not in modified


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat > notes.md <<'EOF'\nhello\nEOF", ["notes.md"]),
        ("echo hi >> log.txt 2>&1", ["log.txt"]),
        ("sed -i 's/a/b/' src/x.py src/y.py", ["src/x.py", "src/y.py"]),
        ("sed -i.bak -e 's/a/b/' conf.ini", ["conf.ini"]),
        ("ls -la > /dev/null && touch done.flag", ["done.flag"]),
        ("echo x | tee -a out.txt", ["out.txt"]),
        ("mv old.py new.py", ["old.py", "new.py"]),  # the old one is gone: changed too
        ("grep -r foo src", []),
        ("cmd 2>&1", []),
    ],
)
def test_shell_modified_files(command: str, expected: list[str]) -> None:
    assert shell_modified_files(command) == expected


def test_bash_writes_are_modified_files() -> None:
    history = [
        user("write a config"),
        assistant(tool("bash", {"command": "cat > config.toml <<EOF\n[x]\nEOF"}, "")),
    ]
    assert "config.toml" in section(summarize_extractive(request(history)), "Files modified")


def cycle(n: int):
    return [
        user(f"Cycle {n}: implement feature {n}. Remember rule {n}."),
        assistant(
            tool("edit", {"filePath": f"/repo/src/feature_{n}.py"}, "ok"),
            tool("bash", {"command": f"pytest tests/test_{n}.py"}, f"{n} passed"),
            f"Feature {n} done. Next I will start feature {n + 1}.",
        ),
    ]


def test_merge_keeps_cycle_one_files_through_five_merges() -> None:
    summary = summarize_extractive(request(cycle(1)))
    history_summaries = [summary]
    for n in range(2, 7):  # five merges
        previous = history_summaries[-3:]  # like compaction.previousSummaries = 3
        summary = summarize_extractive(request(cycle(n), previous=previous))
        history_summaries.append(summary)
    modified = section(summary, "Files modified")
    for n in range(1, 7):
        assert f"/repo/src/feature_{n}.py" in modified
    assert "Cycle 1: implement feature 1" in section(summary, "Goal")
    directives = section(summary, "User directives")
    for n in range(2, 6):
        assert f"Remember rule {n}" in directives
    assert "Remember rule 6" in section(summary, "Latest request")
    assert "Feature 6 done" in section(summary, "Current state")
    assert "feature 7" in section(summary, "Next steps")
    assert "feature 2." not in section(summary, "Next steps")  # old steps replaced
    # Merging is idempotent: the union does not duplicate entries.
    assert modified.count("/repo/src/feature_1.py") == 1


def test_merge_is_deterministic_and_only_previous_summaries() -> None:
    s1 = summarize_extractive(request(cycle(1)))
    merged = summarize_extractive(request([], previous=[s1]))
    assert merged == summarize_extractive(request([], previous=[s1]))
    assert "/repo/src/feature_1.py" in section(merged, "Files modified")
    assert "Feature 1 done" in section(merged, "Current state")
    # Re-parsing our own output is a fixed point.
    assert summarize_extractive(request([], previous=[merged])) == merged


def test_merge_of_model_written_prose_keeps_the_gist() -> None:
    prose = "We refactored the tokenizer and agreed to keep Python 3.11 compatibility."
    summary = summarize_extractive(request(cycle(2), previous=[prose]))
    assert "keep Python 3.11 compatibility" in section(summary, "Earlier summaries")


def test_parse_model_markdown_with_known_headings() -> None:
    md = (
        "## Goal\nShip v2\n\n### Modified Files\n1. a.py\n* b.py\n\n## Key Decisions\n"
        "- use msgspec\n"
    )
    parsed = parse_summary(md)
    assert parsed.objective == "Ship v2"
    assert list(parsed.lists["Files modified"]) == ["a.py", "b.py"]
    assert "use msgspec" in next(iter(parsed.lists["Earlier summaries"]))


def test_objective_starting_with_hash_round_trips() -> None:
    history = [user("# Task\nRename the module."), assistant("ok")]
    summary = summarize_extractive(request(history))
    assert "## Goal\n\\# Task Rename the module." in summary
    assert parse_summary(summary).objective == "# Task Rename the module."


def big_history(n_turns: int):
    history = []
    for i in range(n_turns):
        history += [
            user(f"Directive {i}: " + "please be careful with the parser " * 6),
            assistant(
                tool("read", {"filePath": f"/repo/read_{i}.py"}, "x" * 100),
                tool("edit", {"filePath": f"/repo/mod_{i}.py"}, "ok"),
                tool("bash", {"command": f"run-step --index {i} " + "--flag " * 10}, "fine"),
                f"Step {i} done. " + "Lots of explanation. " * 20,
            ),
        ]
    return history


@pytest.mark.parametrize("max_tokens", [400, 800, 1500, 5000])
def test_bounded_by_max_tokens(max_tokens: int) -> None:
    summary = summarize_extractive(request(big_history(40), max_tokens=max_tokens))
    assert (len(summary) + 2) // 4 <= max_tokens
    modified = section(summary, "Files modified")
    # The token budget is met by trimming everything else before any modified file name.
    for i in range(40):
        assert f"/repo/mod_{i}.py" in modified
    if 400 < max_tokens < 5000:  # at 400 whole lists go, their notes with them
        assert "older entries omitted" in summary
    else:
        assert "omitted" not in summary


def test_files_modified_go_last_and_oldest_first() -> None:
    summary = summarize_extractive(request(big_history(40), max_tokens=120))
    assert (len(summary) + 2) // 4 <= 120
    assert "/repo/mod_39.py" in summary
    assert "/repo/mod_0.py" not in summary
    # Everything else went first: only a short objective and the newest file names remain.
    assert "## User directives" not in summary
    assert "## Commands run" not in summary
    assert "## Files read" not in summary


def test_tiny_budget_still_nonempty() -> None:
    summary = summarize_extractive(request(big_history(3), max_tokens=1))
    assert summary.strip()
    assert (len(summary) + 2) // 4 <= 16  # clamped to a minimum useful size


def test_hook_context_appended_to_the_default_prompt_is_kept() -> None:
    prompt = DEFAULT_PROMPT + "\n\nThe user is in plan mode; do not edit files."
    summary = summarize_extractive(request(cycle(1), prompt=prompt))
    assert "plan mode" in section(summary, "Additional context")


async def test_progress_reports_characters() -> None:
    seen: list[int] = []
    result = await ExtractiveSummarizer().summarize(request(cycle(1)), seen.append)
    assert seen == [len(result.text)]
    assert ExtractiveSummarizer().input_limit() is None
    assert ExtractiveSummarizer().wire_format == "parts"
