"""Summaries written by the client: the daemon sends ``summarizer/complete {system, messages,
maxTokens}`` to an editor that runs the call with its own model and credentials."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

import msgspec

from sidecar.model.config import SummarizerConfig
from sidecar.model.rpc import SummarizerCompleteParams, SummarizerCompleteResult
from sidecar.model.tokens import Tokens
from sidecar.summarizers._text import estimate_tokens, to_json, trim
from sidecar.summarizers.base import (
    ClientCall,
    EmptySummaryError,
    Progress,
    SummaryError,
    SummaryRequest,
    SummaryResult,
    chat_messages,
)

log = logging.getLogger("sidecar.summarizers")


class ClientSummarizer:
    provider_id = "client"
    wire_format: Literal["openai"] = "openai"

    def __init__(self, cfg: SummarizerConfig, client_call: ClientCall) -> None:
        self.cfg = cfg
        self.model_id = cfg.model or "client"
        self._call = client_call

    def input_limit(self) -> int | None:
        return self.cfg.max_input_tokens

    def params(self, req: SummaryRequest) -> SummarizerCompleteParams:
        return SummarizerCompleteParams(
            system=req.writer_system,
            messages=chat_messages(req),
            max_tokens=req.max_tokens,
        )

    async def summarize(
        self, req: SummaryRequest, progress: Progress | None = None
    ) -> SummaryResult:
        params = self.params(req)
        try:
            async with asyncio.timeout(self.cfg.deadline):
                raw: Any = await self._call(params)
        except TimeoutError:
            raise SummaryError(
                f"client summarizer: no answer within {self.cfg.deadline:g}s", retryable=True
            ) from None
        except SummaryError:
            raise
        except Exception as exc:  # a JSON-RPC error from the client, a closed connection...
            raise SummaryError(
                f"client summarizer failed: {trim(str(exc) or type(exc).__name__, 300)}",
                retryable=False,
            ) from exc
        result = _coerce(raw)
        text = result.text.strip()
        if not text:
            raise EmptySummaryError("the client summarizer returned an empty summary")
        if progress is not None:
            try:
                progress(len(text))
            except Exception:
                log.exception("summary progress callback failed")
        tokens = result.tokens or Tokens(
            input=estimate_tokens(params.system) + estimate_tokens(to_json(params.messages)),
            output=estimate_tokens(text),
        )
        return SummaryResult(
            text=text, tokens=tokens, provider_id=self.provider_id, model_id=self.model_id
        )

    async def aclose(self) -> None:
        return None


def _coerce(raw: Any) -> SummarizerCompleteResult:
    if isinstance(raw, SummarizerCompleteResult):
        return raw
    try:
        if isinstance(raw, (bytes, str)):
            return msgspec.json.decode(raw, type=SummarizerCompleteResult)
        if hasattr(raw, "_asdict"):  # pygls hands results over as namedtuples
            raw = raw._asdict()
        return msgspec.convert(raw, SummarizerCompleteResult, from_attributes=True)
    except (msgspec.ValidationError, msgspec.DecodeError, TypeError) as exc:
        raise SummaryError(f"client summarizer: invalid result: {exc}") from None
