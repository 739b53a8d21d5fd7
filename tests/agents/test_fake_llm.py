"""The fake LLM the agent tests rely on: it records each request and follows its directives."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tests.agents.fake_llm import FakeLLM


def post(llm: FakeLLM, body: dict[str, Any]) -> bytes:
    req = urllib.request.Request(
        llm.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return bytes(r.read())


def test_tool_directive_with_json_args_answers_that_tool_call() -> None:
    with FakeLLM() as llm:
        ask = '@@tool history_search {"query": "f003"}'
        out = json.loads(post(llm, {"messages": [{"role": "user", "content": ask}]}))
        call = out["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "history_search"
        assert json.loads(call["arguments"]) == {"query": "f003"}
        assert [r.kind for r in llm.requests()] == ["main"]


def test_read_with_json_args_keeps_them() -> None:
    """pi's read tool takes `path`, OpenCode's `filePath`: JSON arguments go out as given."""
    with FakeLLM() as llm:
        ask = '@@tool read {"path": "/tmp/x.txt"}'
        out = json.loads(post(llm, {"messages": [{"role": "user", "content": ask}]}))
        call = out["choices"][0]["message"]["tool_calls"][0]["function"]
        assert (call["name"], json.loads(call["arguments"])) == ("read", {"path": "/tmp/x.txt"})


def test_streamed_answer_reports_usage_and_records_the_body() -> None:
    with FakeLLM() as llm:
        msgs = [
            {"role": "user", "content": "@@tool read /x\n@@usage 1234 34"},
            {"role": "assistant", "content": None},
            {"role": "tool", "content": "the file", "tool_call_id": "c1"},
        ]
        raw = post(llm, {"messages": msgs, "stream": True}).decode()
        chunks = [json.loads(x[6:]) for x in raw.split("\n\n") if x.startswith("data: {")]
        assert chunks[-1]["usage"]["prompt_tokens"] == 1234
        assert "Done with that step" in "".join(
            c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]
        )
        (rec,) = llm.wait_for(1, "main", timeout=5)
        assert rec.messages == msgs and rec.prompt_tokens == 1234


def test_title_and_summary_requests_are_classified() -> None:
    with FakeLLM() as llm:
        post(llm, {"messages": [{"role": "system", "content": "You are a title generator."}]})
        summary = "Provide a detailed prompt for continuing our conversation above."
        post(llm, {"messages": [{"role": "user", "content": summary}]})
        assert [r.kind for r in llm.requests()] == ["title", "summary"]
