"""The environment every test daemon runs in, so that no developer's setup leaks into a test.

An empty XDG config home (no user config file), a data home of its own, and none of the
``OPENCODE_*`` switches or ``SIDECAR_LOG`` of the shell that runs the tests.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

from sidecar_client._transport import merged_env


def isolated_env(home: Path) -> dict[str, str | None]:
    """Overrides for a daemon's environment below ``home`` (``None`` removes a variable)."""
    return {
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "OPENCODE_DISABLE_AUTOCOMPACT": None,
        "OPENCODE_DISABLE_PRUNE": None,
        "OPENCODE_EXPERIMENTAL_OUTPUT_TOKEN_MAX": None,
        "SIDECAR_LOG": None,
    }


def cli_env(home: Path) -> dict[str, str]:
    """A whole environment for a CLI run below ``home``: ``isolated_env`` plus state and
    runtime homes (``home/state``, ``home/run``: the shared daemon's log and socket)."""
    runtime = home / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = merged_env(
        {
            **isolated_env(home),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_RUNTIME_DIR": str(runtime),
        }
    )
    assert env is not None
    return env


def run_cli(
    args: list[str], home: Path, *, timeout: float, stdin: Any = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    """``python -m sidecar ARGS`` in ``cli_env(home)``, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        env=cli_env(home),
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


#: An MCP ``initialize`` request, for the raw-pipe tests of ``compaction-sidecar mcp``.
MCP_INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}


async def spawn_mcp(args: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    """``python -m sidecar mcp ARGS`` on raw pipes: lines the SDK's own client cannot send."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        limit=1 << 22,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    return proc
