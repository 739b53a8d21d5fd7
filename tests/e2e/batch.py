"""Request files for batch use (``serve < requests > replies``, ``cat requests | connect``)
and the checks that every request in them was answered once and every acknowledged write
is stored. Shared by ``test_end_of_input.py`` and ``bench/end_of_input.py``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

WRITES = 150  # messages, each with one part: 300 writes pipelined behind initialize

#: The three kinds of request file: the requests alone, ending in ``shutdown``, and ending in
#: ``shutdown``, a request it refuses (-32600) and ``exit``.
ENDINGS = ("eof", "shutdown", "exit")


def _frame(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


def requests(ending: str, session_id: str = "ses_batch") -> tuple[bytes, set[int], int | None]:
    """A request file: its bytes, the ids that must be answered, and the id that must be
    refused as sent after ``shutdown`` (``None``: there is none)."""
    out: list[dict[str, Any]] = []
    ids: set[int] = set()

    def req(method: str, params: Any) -> int:
        msg_id = len(out) + 1
        out.append({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        ids.add(msg_id)
        return msg_id

    req("initialize", {"capabilities": {}})
    out.append({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    req("session/create", {"id": session_id, "title": "batch"})
    for i in range(WRITES):
        mid = f"msg_{session_id[4:]}_{i:06d}"
        message = {
            "id": mid,
            "sessionID": session_id,
            "role": "user",
            "time": {"created": 1_700_000_000_000 + i},
        }
        req("message/update", {"message": message})
        part = {
            "id": f"prt_{session_id[4:]}_{i:06d}",
            "sessionID": session_id,
            "messageID": mid,
            "type": "text",
            "text": f"line {i}",
        }
        req("part/update", {"part": part})
    req("session/messages", {"sessionID": session_id})
    refused: int | None = None
    if ending in ("shutdown", "exit"):
        req("shutdown", None)
    if ending == "exit":
        refused = req("session/get", {"sessionID": session_id})
        out.append({"jsonrpc": "2.0", "method": "exit"})
    return b"".join(_frame(o) for o in out), ids, refused


def frames(data: bytes) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    at = 0
    while at < len(data):
        end = data.find(b"\r\n\r\n", at)
        assert end >= 0, f"incomplete header in {data[at : at + 80]!r}"
        length = int(data[at:end].split(b":", 1)[1])
        start = end + 4
        assert len(data) - start >= length, "the replies end inside a frame"
        out.append(json.loads(data[start : start + length]))
        at = start + length
    return out


def check(replies: bytes, ids: set[int], refused: int | None) -> list[str]:
    """What is wrong with ``replies`` (empty: every request answered once, as it should)."""
    problems: list[str] = []
    answers = [f for f in frames(replies) if "id" in f and "method" not in f]
    got = [a["id"] for a in answers]
    if sorted(got) != sorted(ids):
        missing = sorted(ids - set(got))
        extra = sorted(i for i in set(got) if got.count(i) > 1 or i not in ids)
        problems.append(f"{len(missing)} unanswered (first {missing[:5]}), extra {extra[:5]}")
    for a in answers:
        if a["id"] == refused:
            if a.get("error", {}).get("code") != -32600:
                problems.append(f"the request after shutdown got {a}")
        elif "error" in a:
            problems.append(f"request {a['id']} failed: {a['error']}")
    reads = [a for a in answers if isinstance(a.get("result"), dict) and "messages" in a["result"]]
    for r in reads:
        if len(r["result"]["messages"]) != WRITES:
            problems.append(f"session/messages saw {len(r['result']['messages'])} of {WRITES}")
    return problems


def stored(db: Path, session_id: str = "ses_batch") -> tuple[int, int]:
    """Messages and parts the database holds for the session (read after the daemon ended)."""
    con = sqlite3.connect(db)
    try:
        m = con.execute("SELECT count(*) FROM messages WHERE session_id = ?", (session_id,))
        n_messages = int(m.fetchone()[0])
        p = con.execute("SELECT count(*) FROM parts WHERE session_id = ?", (session_id,))
        return n_messages, int(p.fetchone()[0])
    finally:
        con.close()


def run_batch(
    cmd: list[str],
    payload: bytes,
    *,
    stdin_kind: str,
    stdout_kind: str,
    where: Path,
    env: dict[str, str],
    timeout: float = 120.0,
) -> tuple[int, bytes, bytes]:
    """Run ``cmd`` with ``payload`` on stdin (a regular file or a pipe) and its stdout a
    regular file or a pipe; returns (exit status, what it wrote to stdout, stderr)."""
    stdin: int | BinaryIO
    if stdin_kind == "file":
        req_file = where / "requests.bin"
        req_file.write_bytes(payload)
        stdin = req_file.open("rb")
    else:
        stdin = subprocess.PIPE
    out_file = where / "replies.bin"
    stdout: int | BinaryIO = out_file.open("wb") if stdout_kind == "file" else subprocess.PIPE
    try:
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=env)
    finally:
        if not isinstance(stdin, int):
            stdin.close()
        if not isinstance(stdout, int):
            stdout.close()
    if stdin_kind == "pipe":
        assert proc.stdin is not None
        feed = threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True)
        feed.start()
    try:
        out, err = _collect(proc, timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if stdout_kind == "file":
        out = out_file.read_bytes()
    return proc.returncode, out, err


def serve_command(db: Path) -> list[str]:
    return [sys.executable, "-m", "sidecar", "serve", "--db", str(db)]


def serve_requests(where: Path, ending: str, **how: Any) -> tuple[Path, int, bytes, list[str]]:
    """``run_requests`` against ``serve`` on a new database ``where/s.db`` (``how``: the stdin
    and stdout kinds, env, timeout): (the database, exit status, stderr, what was wrong)."""
    db = where / "s.db"
    code, err, problems = run_requests(serve_command(db), ending, where=where, **how)
    return db, code, err, problems


def connect_command(socket: str | Path) -> list[str]:
    return [sys.executable, "-m", "sidecar", "connect", "--socket", str(socket)]


def run_requests(
    cmd: list[str],
    ending: str,
    session_id: str = "ses_batch",
    *,
    stdin_kind: str = "pipe",
    stdout_kind: str = "pipe",
    where: Path,
    env: dict[str, str],
    timeout: float = 120.0,
) -> tuple[int, bytes, list[str]]:
    """``run_batch`` with the request file of ``ending``: (exit status, stderr, what ``check``
    found wrong with the replies)."""
    payload, ids, refused = requests(ending, session_id)
    code, out, err = run_batch(
        cmd,
        payload,
        stdin_kind=stdin_kind,
        stdout_kind=stdout_kind,
        where=where,
        env=env,
        timeout=timeout,
    )
    return code, err, check(out, ids, refused)


def _feed(pipe: BinaryIO, payload: bytes) -> None:
    try:
        pipe.write(payload)
    except BrokenPipeError:
        pass
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def _collect(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
    """stdout (when a pipe) and stderr, read to their ends, then the exit status."""
    chunks: list[bytes] = []
    reader = None
    if proc.stdout is not None:
        stdout = proc.stdout

        def read_out() -> None:
            while data := os.read(stdout.fileno(), 1 << 16):
                chunks.append(data)

        reader = threading.Thread(target=read_out, daemon=True)
        reader.start()
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.wait(timeout=timeout)
    if reader is not None:
        reader.join(timeout)
    return b"".join(chunks), err
