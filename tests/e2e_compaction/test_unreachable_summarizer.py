"""Issue 20 item 5: a summarizer that cannot be reached, against the real daemon over stdio.

The configured writer points at a port on 127.0.0.1 where nothing listens. By default the
compaction still happens, written offline by the extractive fallback, and says so (the summary's
``providerID`` and ``session/compacted``'s ``writer``); the window then fits. With
``summarizer.fallback: null`` it fails, with an error that names the endpoint and no key. A
writer that does answer (a real HTTP server on 127.0.0.1) is named as ``provider/model``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sidecar_client import Client, spawn

from tests.summarizers.httpserver import Reply, ScriptedServer
from tests.wire import put_message, put_part

MODEL = {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}  # 200k, usable 168k
OVER = {"input": 180_000, "output": 500, "reasoning": 0, "cache": {"read": 0, "write": 0}}
SMALL = {"input": 5_000, "output": 500, "reasoning": 0, "cache": {"read": 0, "write": 0}}
KEY = "sk-unreachable-SECRET-0123456789"

Spawn = Callable[..., Any]


def refused_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Spawn]:
    clients: list[Client] = []

    async def go(summarizer: dict[str, Any]) -> Client:
        # The key is the daemon's own (a client may not name an env var): a config file.
        config = tmp_path / f"config{len(clients)}.json"
        import json

        config.write_text(json.dumps({"summarizer": {**summarizer, "apiKeyEnv": "SUMMARY_KEY"}}))
        client = await spawn(
            tmp_path / f"db{len(clients)}.sqlite",
            extra_args=["--config", str(config)],
            env={
                "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
                "OPENCODE_DISABLE_AUTOCOMPACT": None,
                "OPENCODE_DISABLE_PRUNE": None,
                "SUMMARY_KEY": KEY,
                "NO_PROXY": "*",
            },
        )
        clients.append(client)
        return client

    yield go
    for c in clients:
        await c.close()


async def _turn(c: Client, sid: str, text: str, tokens: dict[str, Any]) -> None:
    user = await put_message(c, {"role": "user", "sessionID": sid, "model": MODEL})
    await put_part(c, {"type": "text", "sessionID": sid, "messageID": user["id"], "text": text})
    a = await put_message(
        c, {"role": "assistant", "sessionID": sid, "parentID": user["id"], **MODEL}
    )
    await put_part(
        c, {"type": "text", "sessionID": sid, "messageID": a["id"], "text": "Done. " * 300}
    )
    a.update(finish="stop", tokens=tokens)
    await put_message(c, a)


async def test_refused_writer_falls_back_to_extractive(start: Spawn) -> None:
    port = refused_port()
    base = f"http://127.0.0.1:{port}/v1"
    c = await start({"provider": "openai", "model": "gpt-x", "baseURL": base})
    sid = (await c.create_session()).id
    await _turn(c, sid, "Refactor src/app.py", SMALL)
    await _turn(c, sid, "Now add tests", OVER)
    event = await c.wait_for("session/compacted", timeout=30)
    assert event["auto"] is True
    assert event["writer"] == "extractive"
    await c.request("session/idle", {"sessionID": sid})
    assert [s for s in c.notifications("session/status") if s["status"] == "error"] == []
    page = await c.request("session/messages", {"sessionID": sid})
    summary = next(m["info"] for m in page["messages"] if m["info"].get("summary"))
    assert summary["providerID"] == "extractive" and "error" not in summary
    logs = " ".join(n["message"] for n in c.notifications("window/logMessage"))
    assert f"{base}/chat/completions" in logs and "extractive" in logs
    assert KEY not in logs
    overflow = await c.request("session/overflow", {"sessionID": sid})
    assert overflow["overflow"] is False


async def test_without_fallback_the_error_names_the_endpoint(start: Spawn) -> None:
    port = refused_port()
    base = f"http://127.0.0.1:{port}/v1"
    c = await start({"provider": "openai", "model": "gpt-x", "baseURL": base, "fallback": None})
    sid = (await c.create_session()).id
    await _turn(c, sid, "Refactor src/app.py", SMALL)
    result = await c.request("session/compact", {"sessionID": sid})
    assert result["status"] == "stop"
    assert f"{base}/chat/completions" in result["error"]
    assert "cannot connect" in result["error"]
    assert KEY not in result["error"]
    assert c.notifications("session/compacted") == []


async def test_a_writer_that_answers_is_named(start: Spawn) -> None:
    server = ScriptedServer()
    await server.start()
    try:
        server.script(
            Reply(
                events=[
                    {"choices": [{"index": 0, "delta": {"content": "We refactored src/app.py."}}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    "data: [DONE]\n\n",
                ]
            )
        )
        c = await start({"provider": "openai", "model": "gpt-x", "baseURL": server.url + "/v1"})
        sid = (await c.create_session()).id
        await _turn(c, sid, "Refactor src/app.py", SMALL)
        result = await c.request("session/compact", {"sessionID": sid})
        assert result["status"] == "continue", result
        event = await c.wait_for("session/compacted")
        assert event["writer"] == "openai/gpt-x"
    finally:
        await server.stop()


def test_replay_with_an_unreachable_writer_keeps_every_window_fitting(tmp_path: Path) -> None:
    """The demo's transcript through ``replay`` with a writer nobody answers: every compaction
    is written by the fallback, no errors, and the final window fits the 8,000-token model."""
    from importlib import resources

    data = resources.files("sidecar") / "data" / "demo-transcript.jsonl"
    with resources.as_file(data) as path:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "sidecar",
                "replay",
                str(path),
                "--context",
                "8000",
                "--summarizer",
                "openai",
                "--model",
                "gpt-x",
                "--base-url",
                f"http://127.0.0.1:{refused_port()}/v1",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env={
                "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
                "HOME": str(tmp_path),
                "PATH": "/usr/bin:/bin",
            },
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "errors: 0" in done.stdout
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("  #")]
    assert lines and all("written by extractive" in ln for ln in lines), done.stdout
    final = next(ln for ln in done.stdout.splitlines() if ln.startswith("final context"))
    tokens = int(final.split()[2].replace(",", ""))
    assert tokens <= 8000
