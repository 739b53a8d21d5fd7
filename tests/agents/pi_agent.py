"""The real pi (`@mariozechner/pi-coding-agent`), headless in RPC mode, for the e2e tests.

`.ci/run` installs the pinned pi and packs `clients/pi`; it exports SIDECAR_PI_BIN (the `pi`
program) and SIDECAR_PI_EXTENSION (the packed `compaction-sidecar-pi-*.tgz`). Without them the
tests skip, saying how to get them; under CI (`CI=true`) they fail instead.

RPC mode is pi's own headless protocol (docs/rpc.md): one JSON command per line on stdin, one
response or event per line on stdout. Every wait here is bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HOW_TO = (
    "pi e2e tests need the real pi and the packed extension: "
    "npm install --prefix /tmp/pi @mariozechner/pi-coding-agent@0.73.1; "
    "(cd clients/typescript && npm ci && npm pack) && (cd clients/pi && npm ci && npm pack); "
    "then SIDECAR_PI_BIN=/tmp/pi/node_modules/.bin/pi "
    "SIDECAR_PI_EXTENSION=$PWD/clients/pi/compaction-sidecar-pi-0.1.0.tgz (.ci/run does all this)"
)


def pi_setup() -> tuple[Path, Path]:
    """The pi program and the packed extension, or skip (fail under CI) saying how."""
    binary = os.environ.get("SIDECAR_PI_BIN")
    ext = os.environ.get("SIDECAR_PI_EXTENSION")
    missing = [n for n, v in (("SIDECAR_PI_BIN", binary), ("SIDECAR_PI_EXTENSION", ext)) if not v]
    if not missing and binary and ext and Path(binary).exists() and Path(ext).exists():
        return Path(binary), Path(ext)
    reason = f"{', '.join(missing) or 'a path that does not exist'}: {HOW_TO}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"pi is required under CI: {reason}")
    pytest.skip(reason)


def unpack(tgz: Path, into: Path) -> Path:
    """The package directory of an `npm pack` tarball (pi loads it with `-e DIR`)."""
    if tgz.is_dir():
        return tgz
    with tarfile.open(tgz) as tar:
        tar.extractall(into, filter="data")
    return into / "package"


class PiRPC:
    """One `pi --mode rpc` process: send commands, wait for responses and events."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], stderr: Path) -> None:
        self._err = stderr.open("w")
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._eof = False
        self._n = 0
        self._reader = threading.Thread(target=self._read, name="pi-rpc", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        while True:
            chunk = self.proc.stdout.read1(65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")  # LF only: JSON strings may hold U+2028
            with self._cond:
                for line in lines:
                    if line.strip():
                        ev = json.loads(line)
                        if ev.get("type") not in ("message_update", "tool_execution_update"):
                            self.events.append(ev)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait(
        self, pred: Callable[[dict[str, Any]], bool], start: int = 0, timeout: float = 60.0
    ) -> dict[str, Any]:
        """The first event from index `start` matching `pred`; TimeoutError after `timeout`."""
        with self._cond:
            i = start
            ok = self._cond.wait_for(
                lambda: any(pred(e) for e in self.events[start:]) or self._eof, timeout
            )
            for i in range(start, len(self.events)):
                if pred(self.events[i]):
                    return self.events[i]
            why = "pi exited" if ok else f"no such event in {timeout}s"
            raise TimeoutError(f"{why}; last events: {self.events[-5:]}")

    def command(self, cmd: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Send one command and return its response (raises when pi says it failed)."""
        self._n += 1
        cid = f"t{self._n}"
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({**cmd, "id": cid}) + "\n").encode())
        self.proc.stdin.flush()
        resp = self.wait(lambda e: e.get("type") == "response" and e.get("id") == cid, 0, timeout)
        if not resp.get("success"):
            raise RuntimeError(f"pi refused {cmd['type']}: {resp}")
        return resp

    def prompt(self, text: str, timeout: float = 120.0) -> dict[str, Any]:
        """Send a prompt and return the `agent_end` event of the run it started."""
        start = len(self.events)
        self.command({"type": "prompt", "message": text}, timeout)
        return self.wait(lambda e: e.get("type") == "agent_end", start, timeout)

    def close(self, timeout: float = 20.0) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout)
        self._reader.join(timeout)
        self._err.close()
        return code

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("type") == kind]
