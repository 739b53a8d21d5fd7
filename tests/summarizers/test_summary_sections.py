"""Issue 35, section by section: the task whole, changes rather than files, problems paired with
their fixes, next steps from the plan."""

from __future__ import annotations

import msgspec
import pytest

from sidecar.engine import ledger
from sidecar.engine.ledger import Ledger
from sidecar.model.config import build
from sidecar.summarizers._extract import INTENTION
from sidecar.summarizers.extractive import ExtractiveSummarizer

from .helpers import assistant, bash, offline_summary, summarize_bounded, tool, user

CUT = " more characters of this request not kept]"


summary = offline_summary


def section(text: str, name: str) -> list[str]:
    if f"## {name}\n" not in text:
        return []
    return text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0].strip().splitlines()


def sentences(n: int, word: str) -> str:
    return " ".join(f"{word} sentence number {i} says what is expected." for i in range(n))


# -- 1. the task whole --------------------------------------------------------------------------


def test_a_long_first_request_is_kept_whole_within_the_task_budget() -> None:
    task = sentences(60, "Task")  # ~2,800 characters: cut at 600 before
    led = ledger.update(Ledger(), [user(task), assistant("ok")])
    assert led.first_request == task
    assert task in ledger.render(led)


def test_over_the_budget_the_latest_is_kept_first_and_a_cut_says_where() -> None:
    first, latest = sentences(50, "First"), sentences(300, "Latest")
    led = ledger.update(Ledger(), [user(first), assistant("ok"), user(latest)], task_budget=1_000)
    assert len(led.first_request) + len(led.latest_request) <= 4_000
    assert len(led.latest_request) > len(led.first_request) >= 900  # a quarter stays the goal's
    for kept, whole in ((led.first_request, first), (led.latest_request, latest)):
        head, _, note = kept.partition(" [… cut here: ")
        assert head.endswith(".") and whole.startswith(head)  # at a sentence end, never mid-way
        assert note.endswith(CUT) and int(note.split()[0].replace(",", "")) == len(whole) - len(
            head
        )


def test_the_same_request_twice_is_said_once_and_read_back() -> None:
    led = ledger.update(Ledger(), [user("Fix the importer."), assistant("ok")])
    text = ledger.render(led)
    assert text.count("Fix the importer.") == 1 and ledger.SAME in text
    back = ledger.parse(text)
    assert back is not None and back.latest_request == "Fix the importer."


def test_task_budget_is_configurable() -> None:
    assert build([]).compaction.task_budget == 2_000
    assert build([{"compaction": {"taskBudget": 500}}]).compaction.task_budget == 500
    with pytest.raises(msgspec.ValidationError, match="taskBudget"):
        build([{"compaction": {"taskBudget": -1}}])


async def test_the_engine_passes_the_task_budget_to_the_ledger() -> None:
    task = sentences(200, "Task")
    result = await summarize_bounded(
        ExtractiveSummarizer(),
        [user(task), assistant("ok")],
        [],
        max_tokens=4_000,
        max_input_tokens=None,
        task_budget=300,
    )
    led = ledger.parse(result.text)
    assert led is not None and len(led.first_request) <= 1_200 and led.first_request.endswith(CUT)


# -- 2. changes, not files ----------------------------------------------------------------------

WHY = "The parser drops quoted fields because split(',') ignores the quotes."


def edit(path: str, old: str, new: str) -> object:
    return tool("edit", {"filePath": path, "oldString": old, "newString": new}, "ok")


def test_an_edit_is_told_by_its_first_changed_line_with_the_reason_given_before_it() -> None:
    history = [
        user("Quoted fields break the importer."),
        assistant(
            WHY,
            edit(
                "src/p.py",
                "import x\nrow = line.split(',')",
                "import x\nrow = next(csv.reader([line]))",
            ),
        ),
    ]
    assert section(summary(history), "What was done") == [
        "- src/p.py — edited: `row = line.split(',')` → `row = next(csv.reader([line]))` "
        f"(why: {WHY})"
    ]


def test_each_file_is_told_once_with_a_writes_role_and_size() -> None:
    history = [
        user("Add a helper."),
        assistant(
            tool("write", {"filePath": "src/helper.py", "content": "a = 1\nb = 2\n"}, "ok"),
            edit("src/p.py", "a", "b"),
            edit("src/p.py", "c", "d"),
            edit("src/p.py", "e", "f"),
        ),
    ]
    assert section(summary(history), "What was done") == [
        "- src/helper.py — new file (2 lines, 12 chars)",
        "- src/p.py — edited 3 times: `e` → `f`",
    ]


def test_files_written_to_reproduce_or_probe_are_grouped_apart() -> None:
    history = [
        user("Fix the crash."),
        assistant(
            bash("cat > repro.py <<'EOF'\nimport p\nEOF", "", exit=0),
            bash("python repro.py", "ValueError: x", exit=1),
            edit("src/p.py", "a", "b"),
            bash("python repro.py", "ok", exit=0),
            bash("rm repro.py", "", exit=0),
        ),
    ]
    text = summary(history)
    assert section(text, "What was done") == ["- src/p.py — edited: `a` → `b`"]
    scratch = section(text, "Scratch files (reproduce / probe)")
    assert len(scratch) == 1 and scratch[0].startswith("- repro.py — by `cat > repro.py")
    assert "run 2 times" in scratch[0] and "deleted" in scratch[0]


# -- 3. problems paired with resolutions ---------------------------------------------------------


def test_a_failure_answered_later_is_resolved_with_what_fixed_it() -> None:
    failing = "E   AssertionError: assert 1 == 2\nFAILED tests/test_p.py::test_q - assert 1 == 2"
    history = [
        user("Fix the test."),
        assistant(
            bash("pytest tests/test_p.py -x", failing, exit=1),
            edit("src/p.py", "return 1", "return 2"),
            bash("cd repo && pytest tests/test_p.py -q", "1 passed", exit=0),
        ),
    ]
    text = summary(history)
    assert section(text, "Open problems") == []
    [pair] = section(text, "Resolved")
    assert pair.startswith("- `pytest tests/test_p.py -x` → exit 1: ")
    assert "⇒ fixed after src/p.py edited: `return 1` → `return 2`" in pair
    assert pair.endswith("`cd repo && pytest tests/test_p.py -q` → passed")


def test_an_install_that_timed_out_and_later_succeeded_is_resolved() -> None:
    history = [
        user("Set up."),
        assistant(
            tool("bash", {"command": "pip install -e ."}, error="Command timed out after 120s"),
            bash("timeout 600 pip install -e . 2>&1 | tail -3", "Successfully installed x", exit=0),
        ),
    ]
    text = summary(history)
    assert section(text, "Open problems") == []
    assert section(text, "Resolved")[0].startswith("- `pip install -e .` → error")


def test_a_search_that_finds_nothing_is_no_failure() -> None:
    history = [
        user("Find it."),
        assistant(bash("grep -rn missing_name src", "", exit=1)),
    ]
    assert section(summary(history), "Open problems") == []
    assert ledger.update(Ledger(), history).failed == []


def test_an_unanswered_failure_stays_open() -> None:
    history = [
        user("Fix it."),
        assistant(bash("make", "make: *** [all] Error 2", exit=2)),
    ]
    assert section(summary(history), "Open problems") == [
        "- `make` → exit 2: make: *** [all] Error 2"
    ]
    assert section(summary(history), "Resolved") == []


# -- 4. next steps from the plan -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data"),
    [
        (
            "TodoWrite",
            {
                "todos": [
                    {"content": "read the code", "status": "completed"},
                    {"content": "write the test", "status": "pending"},
                    {"content": "fix the parser", "status": "in_progress"},
                ]
            },
        ),
        (
            "update_plan",
            {
                "plan": [
                    {"step": "read the code", "status": "completed"},
                    {"step": "write the test", "status": "pending"},
                    {"step": "fix the parser", "status": "in_progress"},
                ]
            },
        ),
    ],
)
def test_next_steps_are_the_newest_plans_unfinished_items(
    name: str, data: dict[str, object]
) -> None:
    history = [
        user("Fix the parser."),
        assistant(tool(name, data, "ok"), "Let me look at the tests next."),
    ]
    assert section(summary(history), "Next steps") == ["- fix the parser", "- write the test"]


def test_without_a_plan_the_last_stated_intention_is_labelled() -> None:
    history = [user("Fix the parser."), assistant("The fix is in. Now let me run the tests.")]
    assert section(summary(history), "Next steps") == [f"- {INTENTION}Now let me run the tests."]
    done = {"todos": [{"content": "fix the parser", "status": "completed"}]}
    finished = [*history[:1], assistant(tool("todowrite", done, "ok"), "Let me run the tests.")]
    assert section(summary(finished), "Next steps") == [f"- {INTENTION}Let me run the tests."]
