"""Run the real OpenCode (`opencode serve`, headless) with the packed plugin against a fake LLM.

Everything is on 127.0.0.1 and isolated: XDG dirs under the test's tmp dir, a git-initialised
project holding `opencode.json` (the fake provider, the plugin with its options), OpenCode's
network switches off. The plugin joins a daemon of its own through `python -m sidecar connect`
on a socket in the tmp dir (its database there too), so tests never touch a user's daemon.

Where things are: `$SIDECAR_OPENCODE_BIN` (the `opencode-linux-x64` platform binary) and
`$SIDECAR_OPENCODE_PLUGIN` (the packed `compaction-sidecar-opencode-*.tgz`, or its bundled
`.js`); `.ci/run` installs and packs both.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ISOLATION_ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER": "1",
}
MODEL = {"providerID": "fake", "modelID": "fake-model"}
HOW_TO_INSTALL = (
    "set SIDECAR_OPENCODE_BIN to the opencode-linux-x64@1.18.34 binary and "
    "SIDECAR_OPENCODE_PLUGIN to the packed clients/opencode (.ci/run does both: "
    "`npm install --prefix .agents/opencode opencode-linux-x64@1.18.34`, "
    "`cd clients/opencode && npm ci && npm pack`)"
)


def plugin_entry(packed: Path, into: Path) -> Path:
    """The plugin's JS entry: a `.js` as is, or the packed tarball unpacked into `into` (its
    package.json `main`), so the test loads exactly what `npm pack` ships."""
    if packed.suffix == ".js":
        return packed
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(packed) as tar:
        tar.extractall(into, filter="data")
    pkg = into / "package"
    main = json.loads((pkg / "package.json").read_text())["main"]
    return (pkg / main).resolve()


def http(method: str, url: str, body: Any = None, timeout: float = 300) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def make_files(proj: Path, count: int, file_kb: int, seed: int = 1) -> None:
    """`big001.txt`...: lines `fNNN lLLLLLL <random letters>` (each line is findable)."""
    rnd = random.Random(seed)
    nlines = max(1, file_kb * 1024 // 60)
    for i in range(1, count + 1):
        lines = []
        for j in range(nlines):
            body = "".join(rnd.choice("abcdefghij ") for _ in range(40))
            lines.append(f"f{i:03d} l{j:06d} {body}"[:59])
        (proj / f"big{i:03d}.txt").write_text("\n".join(lines) + "\n")


@dataclass
class OpenCode:
    """One OpenCode server process for a project; `start()` again after `stop()` restarts it
    on the same store (XDG dirs)."""

    binary: Path
    root: Path
    llm_url: str
    plugin: Path | None
    plugin_options: dict[str, Any]
    context: int = 60_000
    output: int = 4_000
    extra_config: dict[str, Any] = field(default_factory=dict)
    # False: the plugin is a file in the project's `.opencode/plugin/` (options then come
    # from the environment, `env_extra`), not an entry of opencode.json's `plugin`.
    plugin_config: bool = True
    env_extra: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    base: str = ""

    @property
    def proj(self) -> Path:
        return self.root / "proj"

    @property
    def xdg(self) -> Path:
        return self.root / "xdg"

    def write_config(self) -> None:
        self.proj.mkdir(parents=True, exist_ok=True)
        if not (self.proj / ".git").exists():
            subprocess.run(["git", "init", "-q"], cwd=self.proj, check=True)
        limit = {"context": self.context, "output": self.output}
        model = {"name": "Fake", "tool_call": True, "attachment": False, "reasoning": False}
        model.update(temperature=True, limit=limit)
        cfg = {
            "model": "fake/fake-model",
            "small_model": "fake/fake-model",
            "autoupdate": False,
            "share": "disabled",
            "snapshot": False,
            "lsp": False,
            "formatter": False,
            "permission": {"bash": "allow", "edit": "allow", "read": "allow"},
            "plugin": [[self.plugin.as_uri(), self.plugin_options]]
            if self.plugin and self.plugin_config
            else [],
            "provider": {
                "fake": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Fake",
                    "options": {"baseURL": self.llm_url, "apiKey": "sk-fake"},
                    "models": {"fake-model": model},
                }
            },
        }
        cfg.update(self.extra_config)
        if self.plugin is not None and not self.plugin_config:
            folder = self.proj / ".opencode" / "plugin"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "compaction-sidecar.js").write_bytes(self.plugin.read_bytes())
        (self.proj / "opencode.json").write_text(json.dumps(cfg, indent=1))

    def start(self, timeout: float = 60) -> None:
        self.write_config()
        env = dict(os.environ)
        env.update(ISOLATION_ENV)
        for d in ("data", "config", "cache", "state"):
            (self.xdg / d).mkdir(parents=True, exist_ok=True)
            env[f"XDG_{d.upper()}_HOME"] = str(self.xdg / d)
        env.update(self.env_extra)
        log = (self.root / "serve.log").open("ab")
        cmd = [str(self.binary), "serve", "--port", "0", "--hostname", "127.0.0.1"]
        self.proc = subprocess.Popen(
            cmd, cwd=self.proj, env=env, stdout=subprocess.PIPE, stderr=log, start_new_session=True
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        for raw in self.proc.stdout:  # "opencode server listening on http://127.0.0.1:PORT"
            line = raw.decode(errors="replace")
            with (self.root / "serve.log").open("a") as f:
                f.write(line)
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            if found:
                self.base = found.group(0)
                break
            if time.monotonic() > deadline:
                break
        if not self.base:
            self.stop()
            raise RuntimeError(f"opencode serve did not start: see {self.root / 'serve.log'}")
        http("GET", self.base + "/session", timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None
        self.base = ""

    # ---- the HTTP API

    def new_session(self) -> str:
        sid: str = http("POST", self.base + "/session", {})["id"]
        return sid

    def say(self, sid: str, text: str) -> dict[str, Any]:
        """One user turn; returns OpenCode's last assistant message once the loop ended."""
        body = {"model": MODEL, "parts": [{"type": "text", "text": text}]}
        out: dict[str, Any] = http("POST", f"{self.base}/session/{sid}/message", body)
        return out

    def summarize(self, sid: str) -> None:
        """A manual `/compact`."""
        http("POST", f"{self.base}/session/{sid}/summarize", {**MODEL, "auto": False})

    def messages(self, sid: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = http("GET", f"{self.base}/session/{sid}/message")
        return out

    def log_text(self) -> str:
        """OpenCode's own log files (where the plugin's `client.app.log` lines go)."""
        logs = sorted((self.xdg / "data" / "opencode" / "log").glob("*.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)


def sidecar_connect_args(root: Path, config: Path | None = None) -> tuple[str, list[str]]:
    """The plugin's `command`/`args` for a daemon private to this test (its own socket and
    database under `root`), started by `connect` as a user's shared daemon is."""
    args = ["-m", "sidecar", "connect", "--socket", str(root / "daemon.sock")]
    args += ["--db", str(root / "sessions.db"), "--log-file", str(root / "daemon.log")]
    args += ["--idle-exit", "120"]
    if config is not None:
        args += ["--config", str(config)]
    return sys.executable, args


def stop_daemon(root: Path) -> None:
    """`compaction-sidecar stop` for the test's daemon (nothing when none runs)."""
    subprocess.run(
        [sys.executable, "-m", "sidecar", "stop", "--socket", str(root / "daemon.sock")],
        capture_output=True,
        timeout=60,
        check=False,
    )


class Watch:
    """A Python client on the test's daemon, in a thread of its own (OpenCode is driven with
    blocking HTTP calls): subscribed to every session, so it keeps every `session/compacted`.
    Connecting first starts the daemon (with the test's config), as the plugin's `connect`
    would; the plugin then joins it."""

    def __init__(self, root: Path, config: Path | None = None) -> None:
        import asyncio
        import threading

        from sidecar_client import Client, connect_shared

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

        async def start() -> Client:
            client = await connect_shared(
                root / "daemon.sock",
                db=root / "sessions.db",
                config=config,
                idle_exit=120,
                log_file=root / "daemon.log",
            )
            await client.request("session/subscribe", {"sessionID": "*"})
            return client

        self.client: Client = self.run(start())

    def run(self, coro: Any, timeout: float = 120) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def compacted(self) -> list[Any]:
        """The `session/compacted` notifications received so far."""
        return list(self.client.notifications("session/compacted"))

    def close(self) -> None:
        try:
            self.run(self.client.close(timeout=10), timeout=30)
        except Exception:  # the daemon was killed under it: nothing to close
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
