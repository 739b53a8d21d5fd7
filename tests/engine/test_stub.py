"""``compaction.prunedStub``: what a pruned tool output is sent as."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sidecar.engine import render
from sidecar.engine.render import stub, to_anthropic, to_openai, to_parts
from sidecar.model.config import build
from sidecar.model.conversation import CLEARED
from sidecar.model.parts import ToolPart
from sidecar.store import Store
from tests.service.harness import Harness

from .builders import Session, tool

PYTEST_OUT = (
    "============ test session starts ============\n"
    "tests/test_a.py F.\n"
    "E   AssertionError: assert 1 == 2\n"
    "FAILED tests/test_a.py::test_one - AssertionError: assert 1 == 2\n"
    "1 failed, 1 passed in 0.12s\n"
)


def pruned(name: str, data: dict[str, Any], output: str, meta: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    part = tool(name, output, input=data, compacted=5)
    state = msgspec.structs.replace(part.state, metadata=meta)
    return msgspec.structs.replace(part, state=state)


def test_default_is_opencode_placeholder() -> None:
    part = pruned("bash", {"command": "pytest -x"}, PYTEST_OUT, {"exit": 1})
    assert stub(part) == CLEARED
    assert stub(part, "opencode") == CLEARED
    assert build([{}]).compaction.pruned_stub == "opencode"


def test_informative_stub_of_a_failed_test_run() -> None:
    part = pruned("bash", {"command": "cd repo && pytest -x"}, PYTEST_OUT, {"exit": 1})
    line = stub(part, "informative")
    assert "\n" not in line
    assert line == (
        f"{CLEARED} bash cd repo && pytest -x; exit 1; {len(PYTEST_OUT):,} chars; "
        "first error: FAILED tests/test_a.py::test_one - AssertionError: assert 1 == 2"
    )


def test_informative_stub_of_a_read_names_the_file_and_no_error() -> None:
    content = "def f():\n    raise ValueError('bad input')\n" * 50
    line = stub(pruned("read", {"filePath": "src/app.py"}, content), "informative")
    assert line == f"{CLEARED} read src/app.py; {len(content):,} chars"


def test_informative_stub_of_a_viewer_shell_call_quotes_no_error() -> None:
    out = "src/a.py:3: error: quoted\n"
    line = stub(pruned("bash", {"command": "grep -rn error: src | head"}, out), "informative")
    assert line == f"{CLEARED} bash grep -rn error: src | head; {len(out)} chars"


def test_informative_stub_bounds_a_long_command() -> None:
    cmd = "python - << 'EOF'\n" + "x = 1\n" * 200 + "EOF"
    line = stub(pruned("bash", {"command": cmd}, "KeyError: 'x'\n"), "informative")
    assert "\n" not in line and len(line) < 400
    assert line.endswith("first error: KeyError: 'x'")


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "parts"])
def test_every_format_sends_the_same_stub(fmt: str) -> None:
    s = Session()
    s.user("go")
    part = pruned("bash", {"command": "make"}, "make: *** [all] Error 2\n", {"exit": 2})
    s.assistant(part)
    expected = stub(ToolPart(**msgspec.structs.asdict(part)), "informative")
    for mode, want in (("opencode", CLEARED), ("informative", expected)):
        if fmt == "openai":
            got = to_openai(s.messages, stub=mode)[-1]["content"]  # type: ignore[arg-type]
        elif fmt == "anthropic":
            got = to_anthropic(s.messages, stub=mode)[-1]["content"][0]["content"]  # type: ignore[arg-type]
        else:
            got = to_parts(s.messages, stub=mode)[-1]["parts"][0]["state"]["output"]  # type: ignore[arg-type]
        assert got == want


async def test_session_context_uses_the_configured_stub(store: Store) -> None:
    """Through the engine: pruned at turn end, then ``session/context`` sends the stub, and its
    estimate counts the stub's size."""
    for mode in ("opencode", "informative"):
        h = Harness(store, {"compaction": {"prunedStub": mode}})
        s = await h.session()
        for _ in range(4):
            u = await h.user(s.id, "more")
            await h.assistant(s.id, u.id, tool_output="x" * 100_000, finish="tool-calls")
        u = await h.user(s.id, "last")
        a = await h.assistant(s.id, u.id, finish="stop")
        h.engine.message_stored(a)
        await h.settle()
        assert h.host.methods("session/pruned")
        result = await h.engine.context(s.id, "openai", fit=False)
        tool_msgs = [m["content"] for m in result.messages if m["role"] == "tool"]
        if mode == "opencode":
            assert CLEARED in tool_msgs
            plain = result.estimated_tokens
        else:
            assert f"{CLEARED} bash cat big.txt; 100,000 chars" in tool_msgs
            assert CLEARED not in tool_msgs
            stubs = [m for m in tool_msgs if m.startswith(CLEARED)]
            assert result.estimated_tokens > plain
            assert render.stub_extra([], "informative") == 0 and len(stubs) == 2
