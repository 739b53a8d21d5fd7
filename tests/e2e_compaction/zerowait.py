"""The zero-wait scenario (issue 25), shared by its end-to-end test and bench/zerowait.py.

A real daemon over stdio, its OpenAI-compatible writer pointed at a real HTTP server on
127.0.0.1 that takes ``delay`` seconds to answer each summary request, and a session on a
32k-token model driven through ``overflows`` cycles of three turns: one well below the
window, one at ~71% of the usable input (where ``prepare: 0.7`` starts a background summary),
one over it. After each overflowing ``message/update`` (with ``finish``) a ``session/context``
is pipelined: what a frontend does before its next model call. Per overflow it records how long
that read took, how many summary requests the server had received before the update and when
the read was answered, and the window's size.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar_client import Client, spawn

from tests.daemon_env import isolated_env
from tests.summarizers.httpserver import Reply, ScriptedServer
from tests.wire import put_message, put_part

MODEL = {"providerID": "test", "modelID": "m32"}
LIMITS = {"context": 32_000, "output": 4_000}  # usable 28,000
USABLE = 28_000
BELOW, NEAR, OVER = 8_000, 20_000, 29_000  # reported input tokens of the three turns
SUMMARY = "We refactored src/app.py and added tests; next: the docs."


def _tokens(n: int) -> dict[str, Any]:
    return {"input": n, "output": 200, "reasoning": 0, "cache": {"read": 0, "write": 0}}


def reply(delay: float) -> Reply:
    return Reply(
        stall=delay,
        events=[
            {"choices": [{"index": 0, "delta": {"content": SUMMARY}}]},
            {"choices": [], "usage": {"prompt_tokens": 3000, "completion_tokens": 40}},
            "data: [DONE]\n\n",
        ],
    )


@dataclass
class Overflow:
    wait_s: float  # overflowing update sent -> pipelined session/context answered
    requests_before: int  # summary requests the server had received before the update
    requests_at_reply: int  # ... when the context reply arrived
    estimated_tokens: int  # of the window served
    event: dict[str, Any]  # the session/compacted it caused


@dataclass
class Run:
    overflows: list[Overflow] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    windows_fit: bool = True


async def _turn(
    c: Client, sid: str, tokens: int, text: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    user = await put_message(c, {"role": "user", "sessionID": sid, "model": MODEL})
    await put_part(c, {"type": "text", "sessionID": sid, "messageID": user["id"], "text": text})
    a = await put_message(
        c, {"role": "assistant", "sessionID": sid, "parentID": user["id"], **MODEL}
    )
    await put_part(
        c,
        {"type": "text", "sessionID": sid, "messageID": a["id"], "text": "Done, see diff. " * 150},
    )
    a.update(finish="stop", tokens=_tokens(tokens))
    return user, a


async def drive(tmp: Path, *, prepare: float | None, overflows: int = 3, delay: float = 2.0) -> Run:
    server = ScriptedServer()
    await server.start()
    server.script(*(reply(delay) for _ in range(4 * overflows + 4)))
    compaction: dict[str, Any] = {} if prepare is None else {"prepare": prepare}
    config = tmp / f"zerowait-{prepare}.json"
    config.write_text(
        json.dumps(
            {
                "compaction": compaction,
                "models": {"test/m32": LIMITS},
                "summarizer": {
                    "provider": "openai",
                    "model": "gpt-x",
                    "baseURL": server.url + "/v1",
                    "apiKeyEnv": "SUMMARY_KEY",
                },
            }
        )
    )
    c = await spawn(
        tmp / f"zerowait-{prepare}.sqlite",
        extra_args=["--config", str(config)],
        env={**isolated_env(tmp), "SUMMARY_KEY": "sk-zerowait", "NO_PROXY": "*"},
    )
    run = Run()
    try:
        sid = (await c.create_session()).id
        await c.subscribe(sid)
        for n in range(overflows):
            _, a = await _turn(c, sid, BELOW, f"Step {n}: refactor src/app.py. " * 200)
            await put_message(c, a)
            _, a = await _turn(c, sid, NEAR, f"Step {n}: now the tests. " * 200)
            await put_message(c, a)
            await c.request("session/idle", {"sessionID": sid})  # the user reads the answer
            if prepare is not None:
                # The background summary is written meanwhile (its progress ends).
                await _prepared(c)
            _, a = await _turn(c, sid, OVER, f"Step {n}: and the docs. " * 200)
            before = len(server.requests)
            start = time.perf_counter()
            update = c.call("message/update", {"message": a})
            read = c.call("session/context", {"sessionID": sid, "format": "openai"})
            ctx = await read
            wait = time.perf_counter() - start
            at_reply = len(server.requests)
            await update
            event = await _compacted(c)
            run.overflows.append(Overflow(wait, before, at_reply, ctx["estimatedTokens"], event))
            if ctx["estimatedTokens"] > USABLE:
                run.windows_fit = False
        status = await c.daemon_status()  # the Python client's typed helper
        run.status = {
            "summaryTokens": status.summary_tokens,
            "preparedDiscardedTokens": status.prepared_discarded_tokens,
            "preparedFailed": status.prepared_failed,
        }
    finally:
        await c.close()
        await server.stop()
    return run


async def _prepared(c: Client) -> None:
    def end(p: dict[str, Any]) -> bool:
        return str(p["token"]).startswith("prepare-") and p["value"]["kind"] == "end"

    await c.wait_for("$/progress", end, timeout=60)


async def _compacted(c: Client) -> dict[str, Any]:
    event: dict[str, Any] = await c.wait_for("session/compacted", timeout=60)
    return event
