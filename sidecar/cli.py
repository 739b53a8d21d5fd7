"""Command line: ``serve``, ``demo``, ``replay``.

Imports are lazy so that ``--help`` and the launcher path do not pay for pygls/lsprotocol.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compaction-sidecar",
        description="Conversation store and context-compaction daemon for coding agents.",
    )
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the JSON-RPC daemon (stdio unless --listen)")
    serve.add_argument("--db", type=Path, help="SQLite file (default: $XDG_DATA_HOME/...)")
    serve.add_argument("--config", type=Path, help="workspace config file (JSON)")
    serve.add_argument(
        "--listen", help="tcp://127.0.0.1:PORT or unix:PATH for a shared daemon (default stdio)"
    )
    serve.add_argument(
        "--synchronous",
        choices=["normal", "full"],
        default="normal",
        help="SQLite durability: normal survives a killed daemon, full also a power cut",
    )
    serve.add_argument("--log-level", default=os.environ.get("SIDECAR_LOG", "WARNING"))

    demo = sub.add_parser("demo", help="replay a bundled real transcript with a small window")
    demo.add_argument("--context", type=int, default=None, help="model context window (tokens)")
    demo.add_argument("--method", choices=["standard", "collapse"], default="standard")
    demo.add_argument("--quiet", action="store_true", help="only the final summary lines")

    replay = sub.add_parser("replay", help="replay a transcript JSONL through the daemon")
    replay.add_argument("file", type=Path)
    replay.add_argument("--context", type=int, default=None, help="model context window (tokens)")
    replay.add_argument("--method", choices=["standard", "collapse"], default="standard")
    replay.add_argument(
        "--summarizer",
        choices=["extractive", "openai", "anthropic"],
        default="extractive",
        help="who writes summaries (openai/anthropic read SIDECAR_SUMMARIZER_* settings)",
    )
    replay.add_argument("--model", help="summarizer model id")
    replay.add_argument("--base-url", help="summarizer base URL")
    replay.add_argument("--api-key-env", help="environment variable holding the API key")
    replay.add_argument("--quiet", action="store_true")
    from sidecar.tools.cli import add_commands

    add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        level = getattr(logging, str(args.log_level).upper(), logging.WARNING)
        logging.basicConfig(
            stream=sys.stderr, level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
        # pygls logs every error reply with a traceback; ours are client mistakes, not bugs.
        logging.getLogger("pygls").setLevel(max(level, logging.CRITICAL if level > 10 else 10))
        import asyncio

        from sidecar.server.daemon import default_db_path, run
        from sidecar.server.transport import ListenError

        try:
            db = args.db or default_db_path()
            return asyncio.run(run(db, args.config, args.listen, args.synchronous.upper()))
        except ListenError as exc:
            print(f"compaction-sidecar: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 0
    if args.command in ("demo", "replay"):
        from sidecar.replay import main as replay_main

        return replay_main(args)
    from sidecar.tools.cli import COMMANDS, dispatch

    if args.command in COMMANDS:
        return dispatch(args)
    _parser().print_help()
    return 0
