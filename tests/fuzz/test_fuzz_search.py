"""Seeded fuzzing of ``history/search`` params on a real stdio daemon (issue 32).

Each input is one ``history/search`` request whose params are drawn from valid and hostile
values of every field: ``query`` (words, FTS5 and tsquery syntax, quotes, control characters,
lone surrogates, long and many-term strings at and past the limits), ``sessionID`` (the
seeded session, ``"*"``, unknown ids, wrong types), ``limit``, ``before``, ``kinds`` (long,
unknown, wrong types), ``includeRecall``, unknown keys, and sometimes params that are not an
object; a share of the request bodies then has bytes flipped, inserted or deleted. Requests
go out in windows of ``WINDOW``, pipelined, against a session seeded with text, tool and
recall parts.

Invariants: the daemon never exits; every request whose id survived gets exactly one reply
(a frame no longer valid JSON may be answered ``id: null``; an id a mutation turned into one
of a later request's is allowed that one reply more); no reply is -32603; a result has
``hits`` and ``partial``. The summary line (inputs, replies by code, unanswered, exits) is
printed at the end (``pytest -s``).

``SIDECAR_FUZZ_SEARCH_INPUTS`` (default 1,500 per backend, derandomized by the seed) sets the
number of inputs and ``SIDECAR_FUZZ_SEED`` (default 9) the seed; outside CI, for example:

    SIDECAR_FUZZ_SEARCH_INPUTS=200000 python -m pytest -s tests/fuzz/test_fuzz_search.py
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from daemon_env import isolated_env
from pgcluster import fresh_database, run_async
from sidecar_client import Call
from sidecar_client._transport import spawn_stdio
from wire import put_message, put_part

from .test_fuzz_stdio import INTERNAL_ERROR, SEED, CountingClient, frame, loads, mutate_bytes

INPUTS = int(os.environ.get("SIDECAR_FUZZ_SEARCH_INPUTS", "1500"))
WINDOW = 64
REPLY_TIMEOUT = 60.0

WORDS = [
    "zebra",
    "fix",
    "bug",
    "src/pkg/mod.py",
    "test_parse_header",
    "ModuleNotFoundError",
    "NEAR",
    "NEAR(",
    "AND",
    "OR",
    "NOT",
    "sid",
    "body",
    "rowid",
    "rank",
    "bm25",
    "history_fts",
    "*",
    "^",
    "-",
    "+",
    ":",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    '"',
    "'",
    "&",
    "|",
    "!",
    "<->",
    "<2>",
    ":*",
    "%",
    "_",
    "\\",
    "\\\\",
    "''",
    '""',
    "é",
    "中文",
    "😀",
    "\u200b",
    "\ufeff",
    "\uffff",
    "\U0010ffff",
    "ß",
    "İ",
    "ﬁ",
    "a" * 300,
    "x.y.z",
    "a/b\\c",
    "--",
    "/*",
    "*/",
    ";",
    "DROP TABLE parts",
    "$1",
    "?",
    "@@",
    "::text",
    "E'\\n'",
]
CONTROL = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x1f", "\x7f", "\x85"]
BLANKS = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000"]


class SearchFuzzer:
    def __init__(self, client: CountingClient, rng: random.Random, ids: dict[str, str]) -> None:
        self.c = client
        self.rng = rng
        self.ids = ids
        self.inputs: collections.Counter[str] = collections.Counter()
        self.unanswered = 0
        #: Ids a mutated frame turned into another (its reply comes under that id, which a
        #: later request of ours may have too): the replies that id may get on top of one.
        self.stray: collections.Counter[Any] = collections.Counter()

    def query(self) -> Any:
        r = self.rng.random()
        if r < 0.03:
            return self.rng.choice([None, 0, 1.5, True, [], {}, ["fix"], {"q": "fix"}])
        if r < 0.08:  # at and past the limits
            size = self.rng.choice([999, 1000, 1001, 5000])
            return (self.rng.choice(WORDS) + " ") * (size // 4) if size > 1000 else "x" * size
        if r < 0.15:
            n = self.rng.choice([31, 32, 33, 100])
            return " ".join(self.rng.choice(WORDS[:20]) for _ in range(n))
        pieces = []
        for _ in range(self.rng.randrange(1, 8)):
            x = self.rng.random()
            if x < 0.75:
                pieces.append(self.rng.choice(WORDS))
            elif x < 0.78:
                pieces.append(self.rng.choice(CONTROL))
            elif x < 0.8:
                pieces.append(chr(self.rng.choice([0xD800, 0xDBFF, 0xDC00, 0xDFFF])))
            else:
                pieces.append("".join(chr(self.rng.randrange(32, 0x3000)) for _ in range(3)))
            pieces.append(self.rng.choice(BLANKS) if self.rng.random() < 0.8 else "")
        return "".join(pieces)

    def params(self) -> Any:
        if self.rng.random() < 0.02:
            return self.rng.choice([None, [], "x", 1, [{"sessionID": "*", "query": "fix"}]])
        p: dict[str, Any] = {}
        if self.rng.random() < 0.97:
            p["sessionID"] = self.rng.choice(
                [self.ids["session"]] * 4
                + ["*"] * 3
                + ["ses_nope", "", "**", 5, None, ["*"], "ses_" + "x" * 300]
                if self.rng.random() < 0.3
                else [self.ids["session"], "*"]
            )
        if self.rng.random() < 0.97:
            p["query"] = self.query()
        for key, values in (
            ("limit", [1, 5, 20, 200, 0, -1, 201, 10**20, 1.5, "5", None, True]),
            (
                "before",
                [self.ids["u2"], self.ids["u1"], "msg_nope", "", 7, None, self.ids["part"]],
            ),
            (
                "kinds",
                [
                    ["tool"],
                    ["text", "reasoning"],
                    ["text", "reasoning", "tool"],
                    [],
                    ["file"],
                    ["text"] * 4,
                    ["text"] * 100_000,
                    "text",
                    [1],
                    None,
                    [None],
                ],
            ),
            ("includeRecall", [True, False, "yes", 1, None]),
            ("unknownKey", [1, "x", None]),
        ):
            if self.rng.random() < 0.3:
                # The first values are valid: half the time one of them.
                p[key] = self.rng.choice(values[:3] if self.rng.random() < 0.5 else values)
        return p

    def body(self, request_id: int) -> tuple[str, bytes]:
        out = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "history/search",
                "params": self.params(),
            }
        ).encode()
        if self.rng.random() < 0.05:
            return "mutated", mutate_bytes(self.rng, out)
        return "params", out

    async def window(self, n: int) -> None:
        sent: list[tuple[Call[Any], bytes]] = []
        nulls_before = len(self.c.unsolicited_errors())
        for _ in range(n):
            call: Call[Any] = self.c.reserve_call(timeout=None)
            kind, body = self.body(call.id)
            self.inputs[kind] += 1
            self.c.send_raw(frame(body))
            sent.append((call, body))
        # A probe behind them: the daemon reads and answers in order of arrival per frame.
        probe = self.c.call("daemon/status", {}, timeout=REPLY_TIMEOUT)
        try:
            await probe
        except TimeoutError:
            raise AssertionError("no answer to daemon/status behind a window") from None
        expecting = []
        strict_ids = set()
        for call, body in sent:
            parsed = loads(body.decode("utf-8", "surrogateescape"))
            if not isinstance(parsed, dict) or parsed.get("id") != call.id:
                if isinstance(parsed, dict) and isinstance(parsed.get("id"), int | str):
                    self.stray[parsed["id"]] += 1
                call.cancel()
                continue
            if "method" not in parsed and ("result" in parsed or "error" in parsed):
                call.cancel()
                continue
            expecting.append((call, body))
            if loads(body) is not None:
                strict_ids.add(call.id)
        futures = {call._future for call, _ in expecting}
        if futures:
            await asyncio.wait(futures, timeout=REPLY_TIMEOUT)
        nulls = len(self.c.unsolicited_errors()) - nulls_before
        for call, body in expecting:
            answers = self.c.replies[call.id]
            if call.id not in strict_ids and answers == 0:
                if nulls > 0:  # answered id null: a frame the daemon could not read
                    nulls -= 1
                    call.cancel()
                    continue
            if answers == 0:
                self.unanswered += 1
                call.cancel()
                continue
            assert 1 <= answers <= 1 + self.stray[call.id], f"{answers} replies to {body[:300]!r}"
            ok, payload = call._future.result()
            if ok:
                result = json.loads(bytes(payload))
                assert isinstance(result["hits"], list) and isinstance(result["partial"], bool)
            else:
                assert payload.code != INTERNAL_ERROR, f"-32603 for {body[:300]!r}: {payload}"


async def seed(client: CountingClient) -> dict[str, str]:
    session = await client.create_session(title="fuzz search")
    sid = session.id
    u1 = await put_message(client, {"sessionID": sid, "role": "user"})
    part = await put_part(
        client,
        {
            "sessionID": sid,
            "messageID": u1["id"],
            "type": "text",
            "text": "fix the zebra bug in src/pkg/mod.py: test_parse_header NEAR(x) OR y",
        },
    )
    a1 = await put_message(
        client,
        {
            "sessionID": sid,
            "role": "assistant",
            "parentID": u1["id"],
            "providerID": "p",
            "modelID": "m",
            "finish": "stop",
        },
    )
    for i, tool in enumerate(["bash", "history_search", "mcp__x__history_expand"]):
        await put_part(
            client,
            {
                "sessionID": sid,
                "messageID": a1["id"],
                "type": "tool",
                "callID": f"c{i}",
                "tool": tool,
                "state": {
                    "status": "completed",
                    "input": {"command": "grep zebra"},
                    "output": "ModuleNotFoundError: zebra fix " * (i + 1),
                    "title": "t",
                    "metadata": {},
                    "time": {"start": 1, "end": 2},
                },
            },
        )
    u2 = await put_message(client, {"sessionID": sid, "role": "user"})
    await put_part(
        client, {"sessionID": sid, "messageID": u2["id"], "type": "text", "text": "zebra? é 中文"}
    )
    return {"session": sid, "u1": u1["id"], "u2": u2["id"], "part": part["id"]}


async def run(tmp: Path, db: str | Path, inputs: int) -> str:
    transport = await spawn_stdio(db, (), isolated_env(tmp))
    client = CountingClient(transport, default_timeout=REPLY_TIMEOUT)
    exits = 0
    try:
        await client.initialize()
        fuzz = SearchFuzzer(client, random.Random(SEED), await seed(client))
        done = 0
        try:
            while done < inputs:
                n = min(WINDOW, inputs - done)
                await fuzz.window(n)
                done += n
                if client.process is None or client.process.returncode is not None:
                    exits += 1
                    break
        finally:
            internal = sum(n for k, n in client.codes.items() if k.startswith(str(INTERNAL_ERROR)))
            summary = (
                f"fuzz history/search seed={SEED} inputs={sum(fuzz.inputs.values())} "
                f"({dict(sorted(fuzz.inputs.items()))}) daemon exits={exits} "
                f"unanswered={fuzz.unanswered} -32603={internal} "
                f"replies={dict(sorted(client.codes.items()))}"
            )
            print(summary)
        assert exits == 0 and fuzz.unanswered == 0 and internal == 0, summary
        return summary
    finally:
        await client.kill()


def test_fuzz_search(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    db = run_async(fresh_database(backend, request, tmp_path / "fuzz.db"))
    asyncio.run(run(tmp_path, db, INPUTS))
