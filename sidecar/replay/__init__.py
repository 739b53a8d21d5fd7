"""``compaction-sidecar demo`` and ``replay``: drive a real daemon with a real transcript."""

from __future__ import annotations

import argparse
import asyncio
from importlib import resources
from pathlib import Path
from typing import Any

DEMO_CONTEXT = 8_000
REPLAY_CONTEXT = 32_000


def _summarizer(args: argparse.Namespace) -> dict[str, Any] | None:
    provider = getattr(args, "summarizer", "extractive")
    if provider == "extractive":
        return None
    cfg: dict[str, Any] = {"provider": provider}
    if args.model:
        cfg["model"] = args.model
    if args.base_url:
        cfg["baseURL"] = args.base_url
    if args.api_key_env:
        cfg["apiKeyEnv"] = args.api_key_env
    return cfg


def main(args: argparse.Namespace) -> int:
    from sidecar.model.transcript import load
    from sidecar.replay.runner import replay

    if args.command == "demo":
        data = resources.files("sidecar") / "data" / "demo-transcript.jsonl"
        with resources.as_file(data) as path:
            transcript = load(Path(path))
        context = args.context or DEMO_CONTEXT
        print(
            f"compaction-sidecar demo: replaying {transcript.session} "
            f"({len(transcript.messages)} messages, real Claude Code session, MIT; see "
            "sidecar/data/DEMO-TRANSCRIPT-LICENSE.txt)"
        )
    else:
        try:
            transcript = load(args.file)
        except (OSError, ValueError) as exc:
            print(f"compaction-sidecar replay: {exc}")
            return 2
        context = args.context or REPLAY_CONTEXT
        print(f"replaying {transcript.session} ({len(transcript.messages)} messages)")
    print(
        f"model window {context:,} tokens, {args.method} compaction, "
        f"summaries by {getattr(args, 'summarizer', 'extractive')}\n"
    )
    report = asyncio.run(
        replay(
            transcript,
            context=context,
            method=args.method,
            summarizer=_summarizer(args),
            db=args.db,
            verbose=not args.quiet,
        )
    )
    print()
    print(
        f"compactions: {len(report.compactions)}  prunes: {report.prunes} "
        f"(-{report.pruned_tokens:,} tok)  errors: {len(report.errors)}"
    )
    if report.compactions:
        print(
            "  (before/after: the engine's estimate of the window a frontend sends, just "
            "before the compaction and right after its summary; as inspect shows them)"
        )
    for i, c in enumerate(report.compactions, 1):
        kind = "auto" if c.auto else "manual"
        print(
            f"  #{i} after turn {c.turn} ({kind}): {c.before:,} -> {c.after:,} tokens, "
            f"written by {c.writer}"
        )
    print(f"final context: {report.final_tokens:,} estimated tokens (window {context:,})")
    if args.db is not None:
        print(f"session {report.session_id} kept in {args.db}")
    if report.summary:
        print("\nlatest summary:\n")
        print(report.summary)
    return 1 if report.errors else 0
