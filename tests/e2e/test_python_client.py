"""The Python client's own surface (issue 20 #2): one naming style, ``idle()``, exported types,
and the README's agent loop run as written, all against a real daemon."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import sidecar_client
from sidecar_client import (
    AssistantMessage,
    Client,
    MessagesPage,
    ModelRef,
    StepFinishPart,
    StepStartPart,
    TextPart,
    Tokens,
    ToolCompleted,
    ToolPart,
    UserMessage,
    WithParts,
)
from sidecar_client._transport import merged_env

from tests.paths import ROOT

from .conftest import Spawner

README = ROOT / "clients" / "python" / "README.md"


async def test_update_message_and_part_return_typed_snake_case_results(shared: Client) -> None:
    """Typed in, typed out: the stored message and part come back as the same Struct types
    (snake_case attributes, daemon-filled id and time), not as camelCase dicts."""
    session = await shared.create_session()
    user = await shared.update_message(UserMessage(session_id=session.id))
    assert isinstance(user, UserMessage)
    assert user.session_id == session.id and user.id.startswith("msg_") and user.time.created > 0
    part = await shared.update_part(TextPart(session_id=session.id, message_id=user.id, text="hi"))
    assert isinstance(part, TextPart)
    assert part.message_id == user.id and part.id.startswith("prt_") and part.text == "hi"

    # A wire-JSON dict in gives the typed union out as well.
    reply = await shared.update_message(
        {"sessionID": session.id, "role": "assistant", "parentID": user.id}
    )
    assert isinstance(reply, AssistantMessage) and reply.parent_id == user.id

    page = await shared.messages(session.id)
    assert isinstance(page, MessagesPage)
    assert page.messages == [WithParts(info=user, parts=[part]), WithParts(info=reply)]


async def test_idle_answers_after_the_automatic_work_of_earlier_writes(spawner: Spawner) -> None:
    """``idle()`` is ``session/idle``: once it answers, the compaction that a finished,
    overflowing assistant message started has been announced."""
    client = await spawner(
        initialization_options={"models": {"test/tiny": {"context": 2000, "output": 200}}}
    )
    session = await client.create_session()
    user = await client.update_message(
        UserMessage(session_id=session.id, model=ModelRef(provider_id="test", model_id="tiny"))
    )
    await client.update_part(
        TextPart(session_id=session.id, message_id=user.id, text="please fix foo.py " * 60)
    )
    reply = await client.update_message(
        AssistantMessage(
            session_id=session.id, parent_id=user.id, provider_id="test", model_id="tiny"
        )
    )
    await client.update_part(
        TextPart(session_id=session.id, message_id=reply.id, text="fixed it " * 60)
    )
    reply.finish = "stop"
    reply.tokens = Tokens(input=1900, output=100)
    await client.update_message(reply)
    assert await client.idle(session.id) is None
    assert [n["sessionID"] for n in client.notifications("session/compacted")] == [session.id]


def test_types_for_messages_and_parts_are_exported() -> None:
    for name in (
        "Message",
        "UserMessage",
        "AssistantMessage",
        "Part",
        "TextPart",
        "ToolPart",
        "ToolPending",
        "ToolRunning",
        "ToolCompleted",
        "ToolError",
        "StepStartPart",
        "StepFinishPart",
        "Tokens",
        "ModelRef",
        "WithParts",
        "default_socket_path",
        "connect_shared",
    ):
        assert name in sidecar_client.__all__, name
        assert hasattr(sidecar_client, name), name


def test_the_client_describes_no_daemon_bug_to_work_around() -> None:
    """The stdio daemon once dropped replies written before its writer was attached, and the
    client probed until one was answered. That bug is fixed (``test_regressions``), so
    neither the client nor its README tells authors to build probe loops."""
    texts = [README.read_text()]
    texts += [p.read_text() for p in (ROOT / "clients" / "python").rglob("*.py")]
    for text in texts:
        assert "probe" not in text.lower()
        assert "drops replies" not in text


def readme_agent_loop() -> str:
    """The README's complete example: its one ``python`` block that runs on its own."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    runnable = [b for b in blocks if "asyncio.run(main())" in b]
    assert len(runnable) == 1, "the README must hold exactly one complete agent loop"
    return runnable[0]


async def test_readme_agent_loop_runs_as_written(
    daemon_env: dict[str, str | None], tmp_path: Path, spawner: Spawner
) -> None:
    """The README's agent loop, run unchanged in a fresh directory: it exits 0, and the
    session it leaves holds one full turn: the user's message, then an assistant step with a
    completed tool call and a step-finish with tokens."""
    script = tmp_path / "agent.py"
    script.write_text(readme_agent_loop())
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=tmp_path,
        env=merged_env(daemon_env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert "window:" in out.decode()

    client = await spawner(tmp_path / "sessions.db")
    [session] = (await client.list_sessions()).sessions
    turn = (await client.messages(session.id)).messages
    user, *replies = turn
    assert isinstance(user.info, UserMessage)
    assert isinstance(user.parts[0], TextPart)
    first = replies[0]
    assert isinstance(first.info, AssistantMessage) and first.info.finish == "tool-calls"
    kinds = [type(p) for p in first.parts]
    assert kinds == [StepStartPart, ToolPart, StepFinishPart]
    tool = first.parts[1]
    assert isinstance(tool, ToolPart) and isinstance(tool.state, ToolCompleted)
    finish = first.parts[2]
    assert isinstance(finish, StepFinishPart) and finish.tokens.input > 0
