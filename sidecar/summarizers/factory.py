"""Which writer a config names: the one module that knows every writer.

Kept apart from ``base`` (the protocol and request/result types every writer imports), so no
writer imports a module that imports it back. Writers are imported when first built: the
HTTP ones pull in httpx, which a daemon summarizing offline never needs at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sidecar.model.config import SummarizerConfig
from sidecar.summarizers.base import ClientCall, Summarizer

if TYPE_CHECKING:
    import httpx


#: The module each HTTP writer lives in, by provider: ``build_summarizer`` imports it when it
#: first builds one, ``engine.writers.Writers.warm`` ahead of the first compaction.
HTTP_WRITERS = {
    "openai": "sidecar.summarizers.openai",
    "anthropic": "sidecar.summarizers.anthropic",
}


def build_summarizer(
    cfg: SummarizerConfig,
    *,
    http: httpx.AsyncClient | None = None,
    client_call: ClientCall | None = None,
    env: Mapping[str, str] | None = None,
) -> Summarizer:
    """The writer ``cfg`` names. ``http`` is shared (not closed by the writer) when given;
    ``client_call`` sends ``summarizer/complete`` to the client; ``env`` defaults to os.environ.

    Raises ``ValueError`` for an incomplete configuration.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    if cfg.provider == "extractive":
        from sidecar.summarizers.extractive import ExtractiveSummarizer

        return ExtractiveSummarizer()
    if cfg.provider == "openai":
        from sidecar.summarizers.openai import OpenAISummarizer

        return OpenAISummarizer(cfg, http=http, env=environ)
    if cfg.provider == "anthropic":
        from sidecar.summarizers.anthropic import AnthropicSummarizer

        return AnthropicSummarizer(cfg, http=http, env=environ)
    if cfg.provider == "client":
        if client_call is None:
            raise ValueError(
                "summarizer.provider 'client' needs a client that declared capabilities.summarizer"
            )
        from sidecar.summarizers.client import ClientSummarizer

        return ClientSummarizer(cfg, client_call)
    raise ValueError(f"unknown summarizer.provider {cfg.provider!r}")
