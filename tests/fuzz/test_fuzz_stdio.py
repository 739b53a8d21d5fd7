"""Seeded fuzzing of a real stdio daemon (issue 9): bad input never costs a reply or a write.

Each round sends one hostile input, then valid probes:

- ``bytes``: random bytes outside any frame;
- ``frame``: a correct frame around random bytes;
- ``mutated``: a valid ``message/update``/``part/update`` frame with bytes flipped,
  inserted or deleted (the Content-Length still right);
- ``field``: a valid write with one field (any depth) replaced by a wrong type, an
  out-of-range integer, deep nesting or invalid UTF-8;
- ``stray``: a valid write, stray bytes, then more frames;
- ``valid``: a plain valid write (the control).

Invariants, checked every round: the daemon is up; the last probe is answered; a request
whose id survived gets exactly one reply (an ``id: null`` error counts as the reply when the
frame is not valid UTF-8 JSON); no reply anywhere is -32603. Every few rounds and at the end:
every acknowledged write is in ``session/messages`` and every rejected write is absent.

``SIDECAR_FUZZ_ITERATIONS`` (default 150) sets the rounds and ``SIDECAR_FUZZ_SEED`` (default
9) the seed; the summary line (inputs by kind, replies by code) is printed at the end — run
``pytest -s tests/fuzz`` to see it.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from daemon_env import isolated_env
from pgcluster import fresh_database, run_async
from sidecar_client import Call, Client, RpcError
from sidecar_client._transport import spawn_stdio
from wire import put_message, stored

from sidecar.model.ids import new_id

KINDS = ["bytes", "frame", "mutated", "field", "field", "stray", "valid"]
#: A comma-separated subset of the kinds, to chase one failure.
ONLY = [k for k in os.environ.get("SIDECAR_FUZZ_KINDS", "").split(",") if k]
ITERATIONS = int(os.environ.get("SIDECAR_FUZZ_ITERATIONS", "150"))
SEED = int(os.environ.get("SIDECAR_FUZZ_SEED", "9"))
REPLY_TIMEOUT = 10.0
CHECK_EVERY = 25
INTERNAL_ERROR = -32603

#: Stands for a value JSON cannot carry (raw bytes); replaced after encoding.
HOLE = "\x00hole\x00"
HOLE_JSON = json.dumps(HOLE).encode()


class _Envelope(msgspec.Struct):
    id: Any = None
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


_envelope = msgspec.json.Decoder(_Envelope)


class CountingClient(Client):
    """Counts every reply per id, including replies to ids the client never sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.replies: collections.Counter[Any] = collections.Counter()
        self.codes: collections.Counter[str] = collections.Counter()
        super().__init__(*args, **kwargs)

    def _dispatch(self, body: bytes) -> None:
        try:
            env = _envelope.decode(body)
        except msgspec.DecodeError:
            env = None
        if env is not None and (len(env.result) or len(env.error)):
            key = env.id if not isinstance(env.id, list | dict) else repr(env.id)
            self.replies[key] += 1
            if len(env.error):
                code = msgspec.json.decode(env.error).get("code")
                self.codes[f"{code}{'/null-id' if env.id is None else ''}"] += 1
            else:
                self.codes["ok"] += 1
        super()._dispatch(body)


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


def deep_json(depth: int) -> bytes:
    return b'{"a":' * depth + b"0" + b"}" * depth


class Fuzzer:
    def __init__(self, client: CountingClient, rng: random.Random, session_id: str) -> None:
        self.c = client
        self.rng = rng
        self.session_id = session_id
        self.anchor = ""
        self.inputs: collections.Counter[str] = collections.Counter()
        #: (session, message id, part id or None) of acknowledged / rejected writes.
        self.acked: set[tuple[str, str, str | None]] = set()
        self.rejected: set[tuple[str, str, str | None]] = set()
        self.last = ""

    # -- payloads ------------------------------------------------------------------------------

    def message(self) -> dict[str, Any]:
        base: dict[str, Any] = {
            "id": new_id("msg"),
            "sessionID": self.session_id,
            "time": {"created": 1_700_000_000_000 + self.rng.randrange(10**6)},
        }
        if self.rng.random() < 0.5:
            return base | {
                "role": "user",
                "agent": "build",
                "model": {"providerID": "p", "modelID": "m"},
            }
        return base | {
            "role": "assistant",
            "parentID": self.anchor,
            "providerID": "p",
            "modelID": "m",
            "cost": 0.5,
            "tokens": {"input": 1, "output": 2, "reasoning": 0, "cache": {"read": 0, "write": 0}},
        }

    def part(self) -> dict[str, Any]:
        base = {"id": new_id("prt"), "sessionID": self.session_id, "messageID": self.anchor}
        if self.rng.random() < 0.5:
            return base | {
                "type": "text",
                "text": "hello",
                "time": {"start": 1, "end": 2},
                "metadata": {"k": [1, "v"]},
            }
        return base | {
            "type": "tool",
            "callID": "call-1",
            "tool": "bash",
            "state": {
                "status": "completed",
                "input": {"command": "ls"},
                "output": "ok",
                "title": "t",
                "metadata": {},
                "time": {"start": 1, "end": 2},
            },
        }

    def write(self) -> tuple[str, dict[str, Any]]:
        if self.rng.random() < 0.5:
            return "message/update", self.message()
        return "part/update", self.part()

    def bad_value(self) -> tuple[Any, bytes | None]:
        """A hostile value, and the raw JSON bytes to put in its place when JSON cannot
        express it."""
        kind = self.rng.randrange(5)
        if kind == 0:
            return self.rng.choice(
                [None, True, 0, 1, -1, 1.5, "", "x", [], {}, [1, 2], {"a": 1}]
            ), None
        if kind == 1:
            return self.rng.choice([2**63, 2**63 + 1, 2**64, -(2**63) - 1, 10**30, -(10**25)]), None
        if kind == 2:
            return HOLE, deep_json(self.rng.choice([65, 200, 1000, 5000]))
        if kind == 3:
            bad = self.rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82", b"\x80x"])
            return HOLE, b'"text ' + bad + b'"'
        return self.rng.choice([1e308, -0.0, "\u0000", "é" * 3, "x" * 10_000]), None

    def mutate_field(self, payload: dict[str, Any]) -> tuple[dict[str, Any], bytes | None]:
        paths: list[tuple[Any, Any]] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    paths.append((node, key))
                    walk(value)

        walk(payload)
        node, key = self.rng.choice(paths)
        value, raw = self.bad_value()
        node[key] = value
        return payload, raw

    # -- sending -------------------------------------------------------------------------------

    def body(
        self, request_id: int, method: str, payload: dict[str, Any], raw: bytes | None
    ) -> bytes:
        key = "message" if method == "message/update" else "part"
        out = json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {key: payload}}
        ).encode()
        return out.replace(HOLE_JSON, raw) if raw is not None else out

    async def probe(self, must_answer: bool) -> None:
        call: Call[Any] = self.c.call(
            "session/get", {"sessionID": self.session_id}, timeout=REPLY_TIMEOUT
        )
        if must_answer:
            try:
                result = await call
            except TimeoutError:
                raise AssertionError(f"no answer to a valid request after {self.last!r}") from None
            assert result["id"] == self.session_id
        else:
            call.cancel()

    async def settle(
        self, call: Call[Any], body: bytes, nulls_before: int, what: dict[str, Any] | None
    ) -> None:
        """Check the one reply to a frame sent under ``call.id``; record the write."""
        parsed = loads(body.decode("utf-8", "surrogateescape"))
        strict = True
        try:
            body.decode()
        except UnicodeDecodeError:
            strict = False
        if loads(body) is None:
            strict = False
        if not isinstance(parsed, dict) or parsed.get("id") != call.id:
            call.cancel()  # the id did not survive: no reply to wait for
            return
        if "method" not in parsed and ("result" in parsed or "error" in parsed):
            call.cancel()  # now a response (to a daemon request): it gets no reply
            return
        future = call._future
        await asyncio.wait({future}, timeout=REPLY_TIMEOUT)
        nulls = len(self.c.unsolicited_errors()) - nulls_before
        answers = self.c.replies[call.id] + (0 if strict else nulls)
        assert answers == 1, f"{answers} replies to {body[:300]!r}"
        if strict:
            assert nulls == 0, f"{nulls} id-null errors for a valid frame {body[:300]!r}"
        if not future.done():
            call.cancel()
            return  # answered with id null: nothing can have been written
        ok, payload = future.result()
        if not ok:
            assert payload.code != INTERNAL_ERROR, f"-32603 for {body[:300]!r}: {payload}"
        if what is None:
            return
        key = (what["sessionID"], what["messageID"], what.get("partID"))
        (self.acked if ok else self.rejected).add(key)

    async def send_write(self, body: bytes, call: Call[Any], what: dict[str, Any] | None) -> None:
        nulls_before = len(self.c.unsolicited_errors())
        self.c.send_raw(frame(body))
        await self.probe(must_answer=True)
        await self.settle(call, body, nulls_before, what)

    # -- rounds --------------------------------------------------------------------------------

    async def round(self) -> None:
        kind = self.rng.choice(ONLY or KINDS)
        self.inputs[kind] += 1
        self.last = kind
        if kind == "bytes":
            junk = self.rng.randbytes(self.rng.randrange(1, 200)).replace(b"Content-Length", b"")
            self.c.send_raw(junk)
            await self.probe(must_answer=False)
            await self.probe(must_answer=True)
            return
        if kind == "frame":
            self.c.send_raw(frame(self.rng.randbytes(self.rng.randrange(0, 300))))
            await self.probe(must_answer=True)
            return
        call: Call[Any] = self.c.reserve_call(timeout=None)
        method, payload = self.write()
        raw: bytes | None = None
        if kind == "field":
            payload, raw = self.mutate_field(payload)
        what = describe(method, payload)
        body = self.body(call.id, method, payload, raw)
        if kind == "mutated":
            body = self.mutate_bytes(body)
            what = describe_body(body)
        if kind == "stray":
            junk = self.rng.choice([b"\r\n", b"\n", b"\r\n\r\n", b"junk", b"\x00\xff", b"}"])
            self.c.send_raw(frame(body) + junk)
            await self.probe(must_answer=False)
            await self.probe(must_answer=True)
            await self.settle(call, body, len(self.c.unsolicited_errors()), what)
            return
        await self.send_write(body, call, what)

    def mutate_bytes(self, body: bytes) -> bytes:
        return mutate_bytes(self.rng, body)

    async def check_store(self) -> None:
        kept: set[tuple[str, str, str | None]] = set()
        for session_id in {s for s, _, _ in self.acked | self.rejected if isinstance(s, str)}:
            try:
                page = await stored(self.c, session_id)
            except RpcError as exc:
                assert exc.code == -32040, exc  # an unknown session holds nothing
                continue
            assert page.next_cursor is None
            for m in page.messages:
                kept.add((session_id, m.info["id"], None))
                kept.update((session_id, m.info["id"], p["id"]) for p in m.parts)
        missing = self.acked - kept
        assert not missing, f"acknowledged writes not stored: {sorted(missing)[:5]}"
        leaked = self.rejected & kept
        assert not leaked, f"rejected writes stored: {sorted(leaked)[:5]}"


def mutate_bytes(rng: random.Random, body: bytes) -> bytes:
    """``body`` with one to three bytes flipped, inserted or deleted."""
    data = bytearray(body)
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(data))
        op = rng.randrange(3)
        if op == 0:
            data[at] = rng.randrange(256)
        elif op == 1:
            data.insert(at, rng.randrange(256))
        else:
            del data[at]
    return bytes(data)


def describe(method: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """Where a write would land, when its ids are strings (else it cannot land anywhere)."""
    if method == "message/update":
        info = {"sessionID": payload.get("sessionID"), "messageID": payload.get("id")}
    else:
        info = {
            "sessionID": payload.get("sessionID"),
            "messageID": payload.get("messageID"),
            "partID": payload.get("id"),
        }
    if all(isinstance(v, str) and v for v in info.values()):
        return info
    return None


def loads(text: str | bytes) -> Any:
    """The JSON value, or ``None`` for text that is not JSON. Our deepest input (5,000
    levels) is read with a raised recursion limit."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None
    finally:
        sys.setrecursionlimit(limit)


def describe_body(body: bytes) -> dict[str, Any] | None:
    try:
        request = loads(body)
        params = request["params"]
        if request.get("method") == "message/update":
            return describe("message/update", params["message"])
        if request.get("method") == "part/update":
            return describe("part/update", params["part"])
    except (KeyError, TypeError):
        pass
    return None


async def run(tmp: Path, db: str | Path) -> str:
    transport = await spawn_stdio(db, (), isolated_env(tmp))
    client = CountingClient(transport, default_timeout=REPLY_TIMEOUT)
    try:
        await client.initialize()
        session = await client.create_session(title="fuzz")
        fuzz = Fuzzer(client, random.Random(SEED), session.id)
        anchor = await put_message(client, {"sessionID": session.id, "role": "user"})
        fuzz.anchor = anchor["id"]

        def summary() -> str:
            return (
                f"fuzz seed={SEED} rounds={sum(fuzz.inputs.values())}/{ITERATIONS} "
                f"inputs={dict(sorted(fuzz.inputs.items()))} "
                f"replies={dict(sorted(client.codes.items()))} "
                f"writes acked={len(fuzz.acked)} rejected={len(fuzz.rejected)}"
            )

        try:
            for i in range(ITERATIONS):
                await fuzz.round()
                assert client.process is not None and client.process.returncode is None
                if (i + 1) % CHECK_EVERY == 0:
                    await fuzz.check_store()
            await fuzz.check_store()
            internal = {k: n for k, n in client.codes.items() if k.startswith("-32603")}
            assert not internal, f"-32603 replies: {internal}"
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{summary()}") from None
        return summary()
    finally:
        await client.kill()


def test_fuzz_stdio(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """On each backend (a NUL in an id reached PostgreSQL as -32603 once)."""
    db = run_async(fresh_database(backend, request, tmp_path / "fuzz.db"))
    print(asyncio.run(run(tmp_path, db)))
