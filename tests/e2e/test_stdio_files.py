"""``serve`` on stdio that is not a pipe: /dev/null, regular files and a terminal.

asyncio's pipe transports refuse regular files and cannot poll /dev/null; the daemon must
still answer (or end at EOF) rather than raise or hang. Each test runs the real process;
a timeout only guards against the old hang, it is not a measured duration.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import tty
from pathlib import Path
from typing import Any

from sidecar_client._transport import merged_env

from .builders import rpc_frame

GUARD = 60  # seconds: a hung daemon fails the test instead of blocking the suite


def _serve(db: Path) -> list[str]:
    return [sys.executable, "-m", "sidecar", "serve", "--db", str(db)]


def _request(msg_id: int, method: str, params: Any) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    return rpc_frame(body.encode())


def _frames(data: bytes) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while data:
        header, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"incomplete header in {data[:80]!r}"
        length = int(header.split(b":", 1)[1])
        out.append(json.loads(rest[:length]))
        data = rest[length:]
    return out


def _serve_into_a_file(
    daemon_env: dict[str, str | None], tmp_path: Path, **stdin: Any
) -> list[dict[str, Any]]:
    """``serve`` with stdout a regular file: it ends cleanly, and the frames it wrote."""
    replies = tmp_path / "replies.bin"
    with replies.open("wb") as stdout:
        proc = subprocess.run(
            _serve(tmp_path / "s.db"),
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=merged_env(daemon_env),
            timeout=GUARD,
            **stdin,
        )
    assert proc.returncode == 0, proc.stderr.decode()
    return _frames(replies.read_bytes())


def test_serve_with_stdin_from_dev_null_exits_at_eof(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    proc = subprocess.run(
        _serve(tmp_path / "s.db"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=merged_env(daemon_env),
        timeout=GUARD,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b""
    assert b"Traceback" not in proc.stderr


def test_serve_reads_a_regular_file_and_writes_a_regular_file(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    requests = tmp_path / "requests.bin"
    requests.write_bytes(_request(1, "initialize", {"capabilities": {}}))
    with requests.open("rb") as stdin:
        (reply,) = _serve_into_a_file(daemon_env, tmp_path, stdin=stdin)
    assert reply["id"] == 1
    assert reply["result"]["serverInfo"]["name"] == "compaction-sidecar"


def test_serve_writes_replies_to_a_regular_file_from_a_pipe(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    payload = _request(1, "initialize", {}) + rpc_frame(b"{not json")
    frames = _serve_into_a_file(daemon_env, tmp_path, input=payload)
    assert {f["id"] for f in frames} == {1, None}
    assert [f["error"]["code"] for f in frames if "error" in f] == [-32700]


def _read_frame(fd: int, buf: bytearray) -> dict[str, Any]:
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            length = int(bytes(buf[:end]).split(b":", 1)[1])
            if len(buf) >= end + 4 + length:
                body = bytes(buf[end + 4 : end + 4 + length])
                del buf[: end + 4 + length]
                return dict(json.loads(body))
        ready, _, _ = select.select([fd], [], [], GUARD)
        assert ready, "no reply from the daemon on the terminal"
        chunk = os.read(fd, 65536)
        assert chunk, "the terminal closed before a reply"
        buf += chunk


def test_serve_on_a_terminal(daemon_env: dict[str, str | None], tmp_path: Path) -> None:
    master, slave = pty.openpty()
    tty.setraw(slave)  # frames are bytes: no line discipline translating \r\n
    try:
        proc = subprocess.Popen(
            _serve(tmp_path / "s.db"),
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            env=merged_env(daemon_env),
        )
        os.close(slave)
        slave = -1
        buf = bytearray()
        os.write(master, _request(1, "initialize", {}))
        assert _read_frame(master, buf)["result"]["serverInfo"]["name"] == "compaction-sidecar"
        os.write(master, _request(2, "session/create", {"title": "on a tty"}))
        assert _read_frame(master, buf)["result"]["title"] == "on a tty"
        os.write(master, _request(3, "shutdown", None))
        assert _read_frame(master, buf) == {"jsonrpc": "2.0", "id": 3, "result": None}
        os.write(master, rpc_frame(b'{"jsonrpc": "2.0", "method": "exit"}'))
        assert proc.wait(timeout=GUARD) == 0
        assert proc.stderr is not None
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
