"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 that records every request.

The agents' end-to-end tests run a real agent (OpenCode, pi) against this model: the agent's
requests are the observable the tests assert on (what the model was shown), so every request
body is kept, classified and answered by a script the test writes into its user messages.

Directives, read from the newest message with role "user" (one per line):

  @@tool read <absolute path>       answer with a tool call read{filePath}
  @@tool bash <command...>          answer with a tool call bash{command, description}
  @@tool <name> <JSON object>       answer with a tool call <name>(<JSON object>), any tool
  @@usage <prompt_tokens> [cached]  report this usage for every answer to that user turn

When the newest message is a tool result, the model answers with text and the turn ends. Title
requests (system prompt mentions "title generator") and the agent's own summary requests
(OpenCode's and pi's compaction prompts) are recognised and answered with fixed text.

Default usage: prompt_tokens = ceil(chars(messages + tools JSON) / 4 * usage_scale), the rule
OpenCode's own estimate uses, reported in a final stream chunk with `choices: []`.

Use:

    with FakeLLM() as llm:
        ...  # point the agent at llm.base_url
        llm.requests("main")

Agent-neutral: nothing here knows a particular agent beyond recognising summary prompts.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# OpenCode's and pi's compaction prompts (any of these in the last user text, or the first in
# the system prompt, marks the agent's own summary request).
SUMMARY_SYSTEM_PREFIXES = (
    "You are a helpful AI assistant tasked with summarizing conversations",
    "You are a context summarization assistant",
)
SUMMARY_HINTS = (
    "Provide a detailed prompt for continuing our conversation",
    "summary of the conversation",
    "summarize the conversation",
    "Create a new anchored summary",
    "Update the anchored summary",
    "create a structured context checkpoint summary",
    "The messages above are a conversation to summarize",
)
TITLE_HINT = "title generator"


def text_of(content: Any) -> str:
    """The text of an OpenAI message's `content` (a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for p in content:
        if isinstance(p, dict) and "text" in p:
            out.append(str(p["text"]))
    return "\n".join(out)


def classify(body: dict[str, Any]) -> str:
    """main | title | summary."""
    msgs = body.get("messages") or []
    system = "\n".join(text_of(m.get("content")) for m in msgs if m.get("role") == "system")
    last = msgs[-1] if msgs else {}
    last_user = next((m for m in reversed(msgs) if m.get("role") == "user"), None)
    last_user_text = text_of(last_user.get("content")) if last_user else ""
    if TITLE_HINT in system:
        return "title"
    if system.startswith(SUMMARY_SYSTEM_PREFIXES) or (
        last.get("role") == "user" and any(h in last_user_text for h in SUMMARY_HINTS)
    ):
        return "summary"
    return "main"


def last_user_text(body: dict[str, Any]) -> str:
    msgs = body.get("messages") or []
    last_user = next((m for m in reversed(msgs) if m.get("role") == "user"), None)
    return text_of(last_user.get("content")) if last_user else ""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


def parse_directives(text: str) -> tuple[ToolCall | None, tuple[int, int] | None]:
    """The tool call and the usage override a user text asks for."""
    tool: ToolCall | None = None
    usage: tuple[int, int] | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("@@tool "):
            bits = s.split(None, 2)
            if len(bits) < 3:
                continue
            name, arg = bits[1], bits[2]
            if arg.startswith("{"):  # explicit arguments for any tool (pi's read takes `path`)
                try:
                    parsed = json.loads(arg)
                except ValueError:
                    parsed = None
                if isinstance(parsed, dict):
                    tool = ToolCall(name, parsed)
                    continue
            if name == "read":
                tool = ToolCall(name, {"filePath": arg})
            elif name == "bash":
                tool = ToolCall(name, {"command": arg, "description": "run command"})
            else:
                try:
                    parsed = json.loads(arg)
                except ValueError:
                    parsed = {"input": arg}
                tool = ToolCall(name, parsed if isinstance(parsed, dict) else {"input": parsed})
        elif s.startswith("@@usage "):
            nums = [int(x) for x in s.split()[1:] if x.isdigit()]
            if nums:
                usage = (nums[0], nums[1] if len(nums) > 1 else 0)
    return tool, usage


@dataclass
class Request:
    """One recorded request: its number, kind, body, the answer given and the usage reported."""

    n: int
    kind: str
    body: dict[str, Any]
    answer: str
    tool_call: ToolCall | None
    usage: dict[str, Any]
    t: float = field(default_factory=time.time)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def prompt_tokens(self) -> int:
        return int(self.usage["prompt_tokens"])

    def text(self) -> str:
        """Every message's text and tool output in this request, joined (for `in` checks)."""
        return "\n".join(text_of(m.get("content")) for m in self.messages)


@dataclass(kw_only=True, eq=False)
class FakeLLM:
    """The server; start()/stop() or a context manager. Thread-safe record of requests."""

    usage_scale: float = 1.0
    cached_frac: float = 0.0
    summary_text: str = "SUMMARY {n}: we read several large files; next: continue reading."
    model: str = "fake-model"
    log_dir: Path | None = None
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _cond: threading.Condition = field(init=False)
    _requests: list[Request] = field(init=False, default_factory=list)
    _server: ThreadingHTTPServer | None = field(init=False, default=None)
    _thread: threading.Thread | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._cond = threading.Condition(self._lock)

    # ---- lifecycle

    def start(self) -> FakeLLM:
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-llm", daemon=True
        )
        self._thread.start()
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeLLM not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # ---- the record

    def requests(self, kind: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self._requests if kind is None or r.kind == kind]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    def wait_for(self, count: int, kind: str | None = None, timeout: float = 30.0) -> list[Request]:
        """Block until `count` requests (of `kind`) were answered; TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [r for r in self._requests if kind is None or r.kind == kind]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = f"{len(got)} of {count} {kind or ''} requests after {timeout}s"
                    raise TimeoutError(msg)
                self._cond.wait(left)

    # ---- answering

    def answer(self, body: dict[str, Any]) -> Request:
        """Decide the answer to one request body and record it."""
        kind = classify(body)
        tool, usage_override = parse_directives(last_user_text(body))
        msgs = body.get("messages") or []
        last = msgs[-1] if msgs else {}
        with self._lock:
            n = len(self._requests) + 1
            tool_call: ToolCall | None = None
            if kind == "title":
                text = "Fake session title"
            elif kind == "summary":
                text = self.summary_text.replace("{n}", str(n))
            elif last.get("role") == "tool":
                text = f"Done with that step (request {n})."
            elif tool is not None and last.get("role") == "user":
                tool_call, text = tool, ""
            else:
                text = f"OK (request {n})."
            req_chars = len(json.dumps(msgs)) + len(json.dumps(body.get("tools") or []))
            answer_chars = len(text) if tool_call is None else len(json.dumps(tool_call.arguments))
            if usage_override is not None and kind != "title":
                prompt_tokens, cached = usage_override
            else:
                prompt_tokens = math.ceil(req_chars / 4 * self.usage_scale)
                cached = int(prompt_tokens * self.cached_frac)
            completion = max(1, math.ceil(answer_chars / 4))
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            rec = Request(n, kind, body, text, tool_call, usage)
            self._requests.append(rec)
            self._cond.notify_all()
        if self.log_dir is not None:
            line = {"n": n, "kind": kind, "usage": usage, "n_messages": len(msgs)}
            line["answer"] = f"tool_call:{tool_call.name}" if tool_call else text[:80]
            with (self.log_dir / "requests.jsonl").open("a") as f:
                f.write(json.dumps(line) + "\n")
            (self.log_dir / f"req_{n:04d}_{kind}.json").write_text(json.dumps(body))
        return rec


def _sse(obj: dict[str, Any]) -> bytes:
    return ("data: " + json.dumps(obj) + "\n\n").encode()


def _completion(rec: Request, model: str) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": rec.answer or None}
    if rec.tool_call is not None:
        msg["tool_calls"] = [
            {
                "id": f"call_{rec.n:05d}",
                "type": "function",
                "function": {
                    "name": rec.tool_call.name,
                    "arguments": json.dumps(rec.tool_call.arguments),
                },
            }
        ]
    finish = "tool_calls" if rec.tool_call else "stop"
    return {
        "id": f"chatcmpl-{rec.n}",
        "object": "chat.completion",
        "created": int(rec.t),
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": rec.usage,
    }


def _stream(rec: Request, model: str) -> bytes:
    head = {
        "id": f"chatcmpl-{rec.n}",
        "object": "chat.completion.chunk",
        "created": int(rec.t),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    if rec.tool_call is not None:
        call = {"index": 0, "id": f"call_{rec.n:05d}", "type": "function"}
        out.append(chunk({"tool_calls": [{**call, "function": {"name": rec.tool_call.name}}]}))
        args = json.dumps(rec.tool_call.arguments)
        out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}))
    else:
        for i in range(0, len(rec.answer), 64):
            out.append(chunk({"content": rec.answer[i : i + 64]}))
    out.append(chunk({}, "tool_calls" if rec.tool_call else "stop"))
    out.append(_sse({**head, "choices": [], "usage": rec.usage}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def _make_handler(llm: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                data = {"object": "list", "data": [{"id": llm.model, "object": "model"}]}
                self._send(200, json.dumps(data).encode())
            else:
                self._send(404, b"")

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, b"")
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, b'{"error": {"message": "bad JSON"}}')
                return
            rec = llm.answer(body)
            model = str(body.get("model") or llm.model)
            if body.get("stream"):
                self._send(200, _stream(rec, model), "text/event-stream")
            else:
                self._send(200, json.dumps(_completion(rec, model)).encode())

    return Handler
