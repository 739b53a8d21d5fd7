"""Seeded fuzzing of the real MCP server over stdio, on a real shared daemon (issue 32).

Each round sends a few hostile lines, then a ``ping`` probe:

- ``bytes``: random bytes (a line of them);
- ``json``: a random JSON value;
- ``envelope``: a request with one of ``jsonrpc``, ``id``, ``method``, ``params`` made wrong
  (missing, wrong type, control characters, unknown method);
- ``batch``: a list of requests (MCP has no batches);
- ``mutated``: a valid request with bytes flipped, inserted or deleted;
- ``tool``: ``tools/call`` with a random tool name and random arguments, or a real tool with
  arguments of any type, ids of no session, of another project's session, or hostile queries;
- ``long``: a request past ``mcp.maxLineBytes`` (set to 4 KiB here);
- ``valid``: a valid request (the control).

Invariants: the server is up after every round and its probe answered; every request line
with a readable id (a string or an integer) gets exactly one reply under that id; no reply is
-32603 and no tool result is an "internal error"; the server's stderr holds no traceback.

``SIDECAR_MCP_FUZZ_ITERATIONS`` (default 120 rounds of ``LINES`` inputs) and
``SIDECAR_MCP_FUZZ_SEED`` (default 32) set the run; the summary is printed at the end (``pytest
-s tests/fuzz/test_fuzz_mcp.py``). 200,000 inputs: ``SIDECAR_MCP_FUZZ_ITERATIONS=40000``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from daemon_env import MCP_INITIALIZE, cli_env, spawn_mcp
from pgcluster import fresh_database, run_async
from sidecar_client import connect_shared
from wire import put_message, put_part

from .test_fuzz_stdio import mutate_bytes

ITERATIONS = int(os.environ.get("SIDECAR_MCP_FUZZ_ITERATIONS", "120"))
SEED = int(os.environ.get("SIDECAR_MCP_FUZZ_SEED", "32"))
LINES = 5  # hostile inputs per round, before its probe
MAX_LINE = 4096
REPLY_TIMEOUT = 30.0
KINDS = ["bytes", "json", "envelope", "envelope", "batch", "mutated", "tool", "tool", "long"]
KINDS += ["valid"]
PROJECT = "/work/fuzz-project"
TOOLS = ["history_search", "history_expand", "context_status", "compact_now"]
METHODS = ["ping", "tools/list", "tools/call", "initialize", "resources/list", "prompts/list"]
CONTROL = "".join(map(chr, [*range(32), 127]))


class Replies:
    """Every reply the server writes, by id, read as it comes."""

    def __init__(self, stdout: asyncio.StreamReader) -> None:
        self.by_id: collections.Counter[Any] = collections.Counter()
        self.codes: collections.Counter[str] = collections.Counter()
        self.internal: list[str] = []
        self.changed = asyncio.Event()
        self._task = asyncio.ensure_future(self._read(stdout))

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        while line := await stdout.readline():
            msg = json.loads(line)
            if "id" not in msg:
                continue
            key = msg["id"]
            self.by_id[key if not isinstance(key, list | dict) else repr(key)] += 1
            if "error" in msg:
                code = msg["error"].get("code")
                self.codes[str(code) + ("/null-id" if key is None else "")] += 1
                if code == -32603:
                    self.internal.append(line.decode()[:300])
            else:
                self.codes["ok"] += 1
                for item in msg.get("result", {}).get("content", []) or []:
                    if "internal error" in str(item.get("text", "")):
                        self.internal.append(line.decode()[:300])
            self.changed.set()

    async def wait_for(self, ids: set[Any]) -> None:
        async with asyncio.timeout(REPLY_TIMEOUT):
            while not all(self.by_id[i] for i in ids):
                self.changed.clear()
                await self.changed.wait()


def readable_id(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | str)


def expected_ids(line: bytes) -> list[Any]:
    """The ids a line must be answered under: each request (an object with a method, or an
    id and nothing else) whose id is a string or an integer."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return []
    items = doc if isinstance(doc, list) else [doc]
    out = []
    for item in items:
        if not isinstance(item, dict) or not readable_id(item.get("id")):
            continue
        if "method" in item or not ({"result", "error"} & set(item)):
            out.append(item["id"])
    return out


class Fuzzer:
    def __init__(self, rng: random.Random, ours: list[str], theirs: list[str]) -> None:
        self.rng = rng
        self.ours, self.theirs = ours, theirs
        self.inputs: collections.Counter[str] = collections.Counter()

    def new_id(self) -> Any:
        if self.rng.random() < 0.5:
            return self.rng.randrange(1, 2**53)
        return f"r{self.rng.getrandbits(64):x}"

    def text(self, limit: int = 40) -> str:
        alphabet = 'ab[]{}"\\:,*NEAR(OR) fix' + CONTROL[:3] + "\u00e9\u4e2d\U0001f600"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randrange(limit)))

    def value(self, depth: int = 0) -> Any:
        pick = self.rng.randrange(9 if depth < 3 else 6)
        if pick == 0:
            return None
        if pick == 1:
            return self.rng.choice([True, False])
        if pick == 2:
            return self.rng.choice([0, -1, 2**63, 10**30, 1.5, -0.0])
        if pick in (3, 4, 5):
            return self.text()
        if pick in (6, 7):
            return [self.value(depth + 1) for _ in range(self.rng.randrange(4))]
        return {self.text(8): self.value(depth + 1) for _ in range(self.rng.randrange(4))}

    def valid(self) -> dict[str, Any]:
        method = self.rng.choice(["ping", "tools/list", "tools/call"])
        req: dict[str, Any] = {"jsonrpc": "2.0", "id": self.new_id(), "method": method}
        if method == "tools/call":
            req["params"] = self.tool_params(valid=True)
        return req

    def tool_params(self, valid: bool = False) -> dict[str, Any]:
        session = self.rng.choice([*self.ours, *self.theirs, "ses_nothere", ""])
        query = self.rng.choice(["parsers", "hunter2", self.text(), "fix " * 50, "NEAR(" * 20])
        if valid:
            name = self.rng.choice(TOOLS[:3])
            args = {
                "history_search": {"query": query or "x", "session": session},
                "history_expand": {"messageID": self.rng.choice(["msg_x", session])},
                "context_status": {"session": session},
            }[name]
            if not session:
                args.pop("session", None)
            return {"name": name, "arguments": args}
        name = self.rng.choice([*TOOLS, self.text(12)])
        args: Any = {
            self.rng.choice(["query", "session", "messageID", "partID", "offset", "limit"])
            + ("" if self.rng.random() < 0.8 else self.text(4)): self.value()
            for _ in range(self.rng.randrange(4))
        }
        if name == "compact_now" and "session" not in args:
            args["session"] = self.rng.choice([*self.theirs, "ses_nothere"])
        if self.rng.random() < 0.1:
            args = self.value()
        return {"name": name, "arguments": args}

    def envelope(self) -> dict[str, Any]:
        req = self.valid()
        field = self.rng.choice(["jsonrpc", "id", "method", "params"])
        if self.rng.random() < 0.3:
            req.pop(field, None)
        elif field == "method":
            req["method"] = self.rng.choice(
                [
                    self.value(),
                    self.rng.choice(METHODS) + self.rng.choice(CONTROL),
                    self.text(20),
                    "notifications/initialized",
                ]
            )
        elif field == "id":
            req["id"] = self.rng.choice([self.value(), self.new_id(), None, True, 1.5])
        else:
            req[field] = self.value()
        return req

    def lines(self) -> tuple[str, list[bytes]]:
        kind = self.rng.choice(KINDS)
        self.inputs[kind] += 1
        rng = self.rng
        if kind == "bytes":
            return kind, [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))]
        if kind == "json":
            return kind, [json.dumps(self.value()).encode()]
        if kind == "envelope":
            return kind, [json.dumps(self.envelope()).encode()]
        if kind == "batch":
            batch = [rng.choice([self.valid, self.envelope])() for _ in range(rng.randrange(4))]
            return kind, [json.dumps(batch).encode()]
        if kind == "mutated":
            return kind, [mutate_bytes(rng, json.dumps(self.valid()).encode())]
        if kind == "tool":
            req = {"jsonrpc": "2.0", "id": self.new_id(), "method": "tools/call"}
            req["params"] = self.tool_params()
            return kind, [json.dumps(req).encode()]
        if kind == "long":
            req = self.valid()
            req["params"] = {"pad": "x" * rng.randrange(MAX_LINE, 4 * MAX_LINE)}
            return kind, [json.dumps(req).encode()]
        return kind, [json.dumps(self.valid()).encode()]


async def _setup(sock: Path, db: str | Path) -> tuple[list[str], list[str]]:
    agent = await connect_shared(sock, db=db, idle_exit=60)
    ours, theirs = [], []
    for directory, into in ((PROJECT, ours), ("/work/other", theirs)):
        session = await agent.create_session(directory=directory)
        into.append(session.id)
        msg = await put_message(agent, {"sessionID": session.id, "role": "user"})
        part = {"sessionID": session.id, "messageID": msg["id"], "type": "text"}
        await put_part(agent, {**part, "text": "parsers and hunter2"})
        into.append(msg["id"])
    await agent.close()
    return ours, theirs


async def run(home: Path, db: str | Path) -> str:
    sock = home / "d.sock"
    env = cli_env(home)
    config = home / "mcp.json"
    config.write_text(json.dumps({"mcp": {"maxLineBytes": MAX_LINE}}))
    ours, theirs = await _setup(sock, db)
    args = ["-m", "sidecar", "mcp", "--socket", str(sock), "--db", str(db)]
    args += ["--config", str(config), "--directory", PROJECT]
    proc = await spawn_mcp(args, env)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stderr = asyncio.ensure_future(proc.stderr.read())
    replies = Replies(proc.stdout)
    fuzz = Fuzzer(random.Random(SEED), ours, theirs)
    expected: collections.Counter[Any] = collections.Counter()
    sent: dict[Any, bytes] = {}  # the line of each expected id, to show a failure
    exits = 0

    def summary() -> str:
        unanswered = sum(1 for i in expected if not replies.by_id[i])
        doubled = sum(1 for i in expected if replies.by_id[i] > expected[i])
        return (
            f"mcp fuzz seed={SEED} inputs={sum(fuzz.inputs.values())} "
            f"kinds={dict(sorted(fuzz.inputs.items()))} "
            f"replies={dict(sorted(replies.codes.items()))} server exits={exits} "
            f"unanswered requests with an id={unanswered} doubled={doubled} "
            f"-32603 or internal={len(replies.internal)}"
        )

    try:
        proc.stdin.write(json.dumps({**MCP_INITIALIZE, "id": "init"}).encode() + b"\n")
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        await replies.wait_for({"init"})
        for n in range(ITERATIONS):
            for _ in range(LINES):
                _, lines = fuzz.lines()
                for line in lines:
                    line = line.replace(b"\n", b" ")
                    for msg_id in expected_ids(line):
                        expected[msg_id] += 1
                        sent[msg_id] = line
                    proc.stdin.write(line + b"\n")
            probe = f"probe{n}"
            expected[probe] += 1
            proc.stdin.write(b'{"jsonrpc":"2.0","id":"%s","method":"ping"}\n' % probe.encode())
            await proc.stdin.drain()
            try:
                await replies.wait_for({probe})
            except TimeoutError:
                raise AssertionError(f"probe {probe} not answered") from None
            if proc.returncode is not None:
                exits += 1
                raise AssertionError(f"the server exited ({proc.returncode})")
        try:
            await replies.wait_for(set(expected))
        except TimeoutError:
            pass  # counted below
        line = summary()
        # An id sent twice (a mutation can make one) may be in flight twice at once, which a
        # client must not do: one reply is all it can count on then.
        unanswered = [i for i in expected if not replies.by_id[i]]
        doubled = [i for i in expected if replies.by_id[i] > expected[i]]
        shown = [sent.get(i, b"")[:300] for i in unanswered[:5] + doubled[:3]]
        assert not unanswered, f"unanswered: {unanswered[:5]} {shown}\n{line}"
        assert not doubled, f"answered twice: {doubled[:5]} {shown}\n{line}"
        assert not replies.internal, f"{replies.internal[:3]}\n{line}"
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{summary()}") from None
    finally:
        proc.stdin.close()
        async with asyncio.timeout(60):
            code = await proc.wait()
        err = (await stderr).decode(errors="replace")
        agent = await connect_shared(sock, db=db, idle_exit=5)
        await agent.request("daemon/stop", {})
        await agent.close()
    assert code == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return summary()


def test_fuzz_mcp(backend: str, request: pytest.FixtureRequest) -> None:
    """On each backend: the tools reach the store (a hostile query went through to it)."""
    home = Path(tempfile.mkdtemp(prefix="scfz", dir="/tmp"))  # a short socket path
    try:
        db = run_async(fresh_database(backend, request, home / "fuzz.db"))
        print(asyncio.run(run(home, db)))
    finally:
        shutil.rmtree(home, ignore_errors=True)
