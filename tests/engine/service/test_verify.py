"""``compaction.verifySummary``: a summary longer than what it replaces, or one that drops the
task, is retried once and then written by the offline writer; without the option, today's
behaviour. The writer is an OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from sidecar.engine import verify
from sidecar.engine.compactor import Request
from sidecar.model.parts import TextPart
from sidecar.store import Store
from tests.summarizers.httpserver import ScriptedServer
from tests.summarizers.test_openai_writer import stream

from .harness import Harness

TASK = "Fix the crash in parse_config() when settings.toml has no [server] table."
ON_TASK = "We are fixing the parse_config() crash; next: handle the missing table."
OFF_TASK = "We talked about several things and made good progress overall."
LONG = ON_TASK + " " + "word " * 6_000  # ~7,500 tokens: more than the history it replaces


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


async def _compact(
    store: Store, server: ScriptedServer, verify_on: bool, fallback: str | None = "extractive"
) -> tuple[Harness, Any, str, dict[str, Any] | None]:
    layer: dict[str, Any] = {
        "summarizer": {
            "provider": "openai",
            "model": "m",
            "baseURL": server.url + "/v1",
            "fallback": fallback,
        },
        "compaction": {"auto": False, "verifySummary": verify_on},
    }
    h = Harness(store, layer)
    s = await h.session()
    u = await h.user(s.id, TASK)
    await h.assistant(s.id, u.id, tool_output="settings loaded\n" * 300, text="Looking. " * 200)
    result = await h.engine.compact(Request(session_id=s.id))
    await h.settle()
    text = ""
    meta = None
    if result.summary_message_id is not None:
        msgs = await store.window(s.id)
        summary = next(m for m in msgs if m.info.id == result.summary_message_id)
        part = next((p for p in summary.parts if isinstance(p, TextPart)), None)
        if part is not None:
            text, meta = part.text, part.metadata
    await h.engine.close()
    return h, result, text, meta


def _event(h: Harness) -> dict[str, Any]:
    [event] = h.host.methods("session/compacted")
    out: dict[str, Any] = msgspec.to_builtins(event)
    return out


@pytest.mark.parametrize(
    ("reply", "reason"),
    [(LONG, "longer than what it replaces"), (OFF_TASK, "drops the task")],
)
async def test_rejected_twice_then_the_offline_writer_writes_it(
    store: Store, server: ScriptedServer, reply: str, reason: str
) -> None:
    server.script(stream(reply), stream(reply))
    h, result, text, meta = await _compact(store, server, verify_on=True)
    assert result.status == "continue"
    assert len(server.requests) == 2  # the first, and one retry
    retry_prompt = server.requests[1].json()["messages"][-1]["content"]
    assert "Your previous summary was rejected" in retry_prompt and reason in retry_prompt
    assert reason not in server.requests[0].json()["messages"][-1]["content"]
    assert text.startswith("# Summary of the conversation so far")  # the offline writer's
    assert reply.strip() not in text
    assert meta is not None and meta["writer"] == "extractive"
    assert meta["rejected"].startswith(reason) and "the retry too" in meta["rejected"]
    event = _event(h)
    assert event["writer"] == "extractive" and event["rejected"] == meta["rejected"]


async def test_a_good_retry_is_kept(store: Store, server: ScriptedServer) -> None:
    server.script(stream(OFF_TASK), stream(ON_TASK))
    h, _result, text, meta = await _compact(store, server, verify_on=True)
    assert len(server.requests) == 2
    assert text.startswith(ON_TASK)
    assert meta == {"writer": "openai/m", "rejected": meta["rejected"]}
    assert meta["rejected"].startswith("drops the task")
    assert _event(h)["writer"] == "openai/m"


async def test_a_good_summary_is_kept_and_says_so(store: Store, server: ScriptedServer) -> None:
    server.script(stream(ON_TASK))
    h, _result, text, meta = await _compact(store, server, verify_on=True)
    assert len(server.requests) == 1 and text.startswith(ON_TASK)
    assert meta == {"writer": "openai/m", "rejected": None}
    event = _event(h)
    assert event["writer"] == "openai/m" and event["rejected"] is None


async def test_without_the_option_a_task_dropping_summary_is_kept(
    store: Store, server: ScriptedServer
) -> None:
    server.script(stream(OFF_TASK))
    h, result, text, meta = await _compact(store, server, verify_on=False)
    assert result.status == "continue" and len(server.requests) == 1
    assert text.startswith(OFF_TASK) and meta is None
    # OpenCode's fields plus the diagnostics (writer among them); no `rejected` without it.
    event = _event(h)
    assert {"sessionID", "messageID", "auto", "writer"} <= set(event)
    assert "rejected" not in event


async def test_without_the_option_a_longer_summary_fails_as_today(
    store: Store, server: ScriptedServer
) -> None:
    server.script(stream(LONG))
    h, result, _text, _meta = await _compact(store, server, verify_on=False)
    assert len(server.requests) == 1
    assert result.status == "stop" and "would not make the context smaller" in str(result.error)
    # Refused: nothing stored, and the event says why (issue 32 item 3).
    [event] = h.host.methods("session/compacted")
    assert "would not make the context smaller" in str(event.rejected)
    assert event.messages_summarized == 0 and result.summary_message_id is None


async def test_an_empty_summary_is_still_rejected_with_the_option(
    store: Store, server: ScriptedServer
) -> None:
    server.script(stream(""), stream(""))
    _h, result, _text, _meta = await _compact(store, server, verify_on=True, fallback=None)
    assert result.status == "stop" and "empty summary" in str(result.error)
    # With the default fallback the empty summary is still never stored: the offline writer's is.
    server.script(stream(""), stream(""))
    h, result, text, _meta = await _compact(store, server, verify_on=True)
    assert result.status == "continue" and text.strip() != ""
    assert _event(h)["writer"] == "extractive"


# -- the checks themselves ------------------------------------------------------------------------


def test_key_terms_are_paths_identifiers_and_rarer_words() -> None:
    assert verify.key_terms(TASK) == ["settings.toml", "parse_config", "settings"]
    assert verify.key_terms("Refactor src/app/server.py to use httpx.AsyncClient") == [
        "src/app/server.py",
        "AsyncClient",
        "Refactor",
    ]
    assert verify.key_terms("Modify the main page.tsx to use the useTodos hook") == [
        "page.tsx",
        "useTodos",
    ]


def test_drops_task_looks_only_at_the_writers_text() -> None:
    ledger_block = (
        "\n\n## Artifact ledger\n\n```ledger\n### First user request\n- " + TASK + "\n```\n"
    )
    assert verify.drops_task(OFF_TASK, TASK)
    assert not verify.drops_task(ON_TASK, TASK)
    why = verify.problem(
        OFF_TASK + ledger_block, budget=10_000, replaced=10_000, first_request=TASK
    )
    assert why is not None and why.startswith("drops the task")
    assert not verify.drops_task("anything", "ok go")  # nothing to check: never rejected


def test_size_checks() -> None:
    assert verify.problem("x" * 400, budget=10_000, replaced=50, first_request="")
    assert verify.problem("x" * 400, budget=50, replaced=10_000, first_request="") == (
        "over its budget (100 tokens, budget 50)"
    )
    assert verify.problem("x" * 400, budget=100, replaced=100, first_request="") is None
