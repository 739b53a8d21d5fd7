from sidecar.engine import tokens
from sidecar.engine.render import SUBTASK_TEXT
from sidecar.engine.tokens import (
    FILE_TOKENS,
    MESSAGE_OVERHEAD,
    estimate,
    estimate_messages,
    estimate_part,
    estimate_value,
)
from sidecar.model.conversation import CLEARED, COMPACTION_TEXT, INTERRUPTED

from .builders import Session, compaction, file, reasoning, step, subtask, text, tool


def test_estimate_rounds_half_up_like_js_math_round() -> None:
    assert estimate("x" * 160_002) == 40_001  # 40,000.5 -> 40,001
    assert estimate("x" * 6) == 2  # 1.5 -> 2
    assert estimate("x" * 2) == 1  # 0.5 -> 1
    assert estimate("x" * 10) == 3  # 2.5 -> 3 (Python's round() would give 2)
    assert estimate("x" * 18) == 5  # 4.5 -> 5 (round() gives 4)
    assert estimate("x") == 0  # 0.25 -> 0
    assert estimate("x" * 160_000) == 40_000


def test_estimate_of_nothing_is_zero() -> None:
    assert estimate(None) == 0
    assert estimate("") == 0


def test_estimate_counts_utf16_code_units_like_js_length() -> None:
    assert estimate("é" * 6) == 2  # BMP: one unit each
    assert estimate("😀") == 1  # two units: 0.5 -> 1 (len() == 1 would give 0)
    assert estimate("😀" * 3) == 2  # six units: 1.5 -> 2


def test_estimate_value_uses_compact_json() -> None:
    assert estimate_value({"a": 1}) == 2  # '{"a":1}' is 7 chars
    assert estimate_value({"path": "a.py"}) == 4  # 15 chars
    assert estimate_value([]) == 1  # '[]'
    assert estimate_value("abcdef") == 2  # '"abcdef"' is 8 chars
    assert estimate_value(None) == 1  # 'null'


def test_placeholder_costs() -> None:
    assert estimate(CLEARED) == 8  # 33 chars
    assert estimate(INTERRUPTED) == 8  # 32 chars
    assert estimate(COMPACTION_TEXT) == 6  # 22 chars
    assert estimate(SUBTASK_TEXT) == 11  # 43 chars


def test_estimate_part_text_and_reasoning() -> None:
    assert estimate_part(text("x" * 400)) == 100
    assert estimate_part(text("x" * 400, ignored=True)) == 0
    assert estimate_part(reasoning("x" * 40)) == 10


def test_estimate_part_tool_by_state() -> None:
    args = {"path": "a.py"}  # 4 tokens
    assert estimate_part(tool(output="x" * 400, input=args)) == 104
    assert estimate_part(tool(output="x" * 400, input=args, compacted=5)) == 4 + 8
    assert estimate_part(tool(status="error", error="x" * 40, input=args)) == 4 + 10
    assert estimate_part(tool(status="pending", input=args)) == 4 + 8
    assert estimate_part(tool(status="running", input=args)) == 4 + 8


def test_estimate_part_tool_attachments_count_until_compacted() -> None:
    img = file("image/png")
    assert estimate_part(tool(output="", input={}, attachments=[img])) == 1 + FILE_TOKENS
    assert estimate_part(tool(output="", input={}, attachments=[img], compacted=1)) == 1 + 8


def test_estimate_part_files() -> None:
    assert FILE_TOKENS == 1_000
    assert estimate_part(file("image/png")) == 1_000
    assert estimate_part(file("application/pdf")) == 1_000
    assert estimate_part(file("text/plain")) == 0  # already inlined as synthetic text
    assert estimate_part(file("application/x-directory")) == 0
    assert estimate_part(file("application/zip", filename="x.zip")) == 8  # the placeholder line


def test_estimate_part_markers_and_others() -> None:
    assert estimate_part(compaction()) == 6
    assert estimate_part(subtask()) == 11
    assert estimate_part(step()) == 0


def test_estimate_messages_adds_overhead_per_message() -> None:
    assert MESSAGE_OVERHEAD == 4
    s = Session()
    s.user("x" * 400)
    s.assistant(step(), "x" * 40)
    assert estimate_messages(s.messages) == 100 + 10 + 2 * 4
    assert estimate_messages([]) == 0
    assert tokens.estimate_messages(s.messages[:1]) == 104
