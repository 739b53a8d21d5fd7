"""The contract module: prompts, protocol, factory, helpers, and the layering rule."""

from __future__ import annotations

import ast
import email.utils
from pathlib import Path

import httpx
import pytest

import sidecar.summarizers
from sidecar.model.config import SummarizerConfig
from sidecar.summarizers._retry import RetryPolicy, parse_retry_after, provider_message
from sidecar.summarizers._text import estimate_tokens, redact
from sidecar.summarizers.base import (
    COMPACTION_SYSTEM,
    DEFAULT_PROMPT,
    NO_TOOLS,
    EmptySummaryError,
    Summarizer,
    SummaryError,
    with_no_tools,
)
from sidecar.summarizers.extractive import ExtractiveSummarizer
from sidecar.summarizers.factory import build_summarizer


def test_prompts_carry_the_seed_meaning() -> None:
    assert DEFAULT_PROMPT.startswith("Provide a detailed prompt for continuing our conversation")
    for phrase in ("what we did", "which files we're working on", "what we're going to do next"):
        assert phrase in DEFAULT_PROMPT
    assert "Provide a detailed but concise summary of the conversation." in COMPACTION_SYSTEM
    assert "Modified files and technical decisions" in COMPACTION_SYSTEM
    assert NO_TOOLS in COMPACTION_SYSTEM
    assert with_no_tools(COMPACTION_SYSTEM) == COMPACTION_SYSTEM.rstrip()
    assert with_no_tools("Custom agent prompt").endswith(NO_TOOLS)


def test_default_writer_is_extractive_and_satisfies_the_protocol() -> None:
    w = build_summarizer(SummarizerConfig())
    assert isinstance(w, ExtractiveSummarizer)
    assert isinstance(w, Summarizer)
    for provider in ("openai", "anthropic"):
        other = build_summarizer(SummarizerConfig(provider=provider, model="m"), env={})
        assert isinstance(other, Summarizer)


def test_errors() -> None:
    err = SummaryError("x failed", retryable=True, status=503)
    assert str(err) == "x failed" and err.retryable and err.status == 503
    empty = EmptySummaryError()
    assert isinstance(empty, SummaryError) and not empty.retryable


def test_estimate_tokens_rounds_half_up() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 2, 3, 5, 6, 10)] == [0, 0, 1, 1, 1, 2, 3]
    assert estimate_tokens("😀" * 2) == 1  # UTF-16 length 4, like JavaScript


def test_redact() -> None:
    text = redact("key sk-abcdef1234567890XYZ and Bearer tok_123 and mine", ["mine"])
    assert "sk-abcdef" not in text and "tok_123" not in text and "mine" not in text


def test_parse_retry_after() -> None:
    assert parse_retry_after(httpx.Headers({"retry-after": "12"})) == 12.0
    assert parse_retry_after(httpx.Headers({"retry-after": "1.5"})) == 1.5
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert parse_retry_after(httpx.Headers({})) is None
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"})) is None
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert parse_retry_after(httpx.Headers({"retry-after": date}), now=lambda: 1_000_000) == 30
    assert parse_retry_after(httpx.Headers({"retry-after": date}), now=lambda: 2_000_000) == 0


def test_provider_message() -> None:
    assert provider_message(b'{"error": {"message": "bad thing"}}') == "bad thing"
    assert provider_message(b'{"detail": "nope"}') == "nope"
    assert provider_message(b"<html> gateway\n timeout </html>") == "<html> gateway timeout </html>"
    assert len(provider_message(b"x" * 5000)) <= 300


def test_backoff_is_full_jitter_and_capped() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0)
    assert [policy.backoff(n, lambda: 1.0) for n in range(6)] == [0.5, 1, 2, 4, 4, 4]
    assert policy.backoff(3, lambda: 0.0) == 0.0


@pytest.mark.parametrize("path", sorted(Path(sidecar.summarizers.__file__).parent.glob("*.py")))
def test_layering_no_engine_server_or_store_imports(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            assert not name.startswith(("sidecar.engine", "sidecar.server", "sidecar.store")), (
                f"{path.name} imports {name}"
            )
