"""Issue 25, must show: zero-wait compaction against a real daemon and a real, slow writer.

The writer (OpenAI-compatible, a real HTTP server on 127.0.0.1) takes 2 s per summary. With
``prepare: 0.7`` every overflow commits the summary written while the user was reading: the
``session/context`` pipelined behind the overflowing update is answered before the server
receives any request for that overflow (so its wait does not contain the writer's latency;
bench/zerowait.py measures it). Without ``prepare`` the same read is answered only after the
writer answered a request sent for that overflow. Every window served fits the model.
"""

from __future__ import annotations

from pathlib import Path

from .zerowait import USABLE, drive


async def test_prepared_overflows_never_wait_for_the_writer(tmp_path: Path) -> None:
    run = await drive(tmp_path, prepare=0.7, overflows=3)
    assert len(run.overflows) == 3
    for o in run.overflows:
        assert o.event["prepared"] is True, o.event
        assert o.event["writer"] == "openai/gpt-x"
        # No summary request was sent between the overflow and the context reply.
        assert o.requests_at_reply == o.requests_before
        assert o.estimated_tokens <= USABLE
        assert isinstance(o.event["waitedMs"], int)
    assert run.windows_fit
    assert run.status["summaryTokens"] > 0
    assert run.status["preparedDiscardedTokens"] == 0
    assert run.status["preparedFailed"] == 0


async def test_without_prepare_every_overflow_waits_for_the_writer(tmp_path: Path) -> None:
    run = await drive(tmp_path, prepare=None, overflows=3)
    for o in run.overflows:
        assert "prepared" not in o.event and "waitedMs" not in o.event  # OpenCode's shape
        # The read was answered only after a summary request for this overflow.
        assert o.requests_at_reply == o.requests_before + 1
        assert o.estimated_tokens <= USABLE
    assert run.windows_fit
