"""``config/get`` and ``config/update``: this connection's config (partial, deep-merged,
validated as a whole; ``settings`` says which keys a client may set).

Extra summarizer headers may carry credentials, so their values are never sent back.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.model.config import Config
from sidecar.model.rpc import ConfigUpdateParams, Empty
from sidecar.server.context import Context

REDACTED = "<redacted>"


def redacted(cfg: Config) -> Config:
    """Header values hidden, the base summarizer's and each override's."""
    overrides = [
        msgspec.structs.replace(o, summarizer=_redact_headers(o.summarizer))
        if isinstance(o.summarizer.get("headers"), dict)
        else o
        for o in cfg.compaction.overrides
    ]
    if overrides != cfg.compaction.overrides:
        compaction = msgspec.structs.replace(cfg.compaction, overrides=overrides)
        cfg = msgspec.structs.replace(cfg, compaction=compaction)
    headers = cfg.summarizer.headers
    if not headers:
        return cfg
    summarizer = msgspec.structs.replace(
        cfg.summarizer, headers={name: REDACTED for name in headers}
    )
    return msgspec.structs.replace(cfg, summarizer=summarizer)


def _redact_headers(summarizer: dict[str, Any]) -> dict[str, Any]:
    return {**summarizer, "headers": {name: REDACTED for name in summarizer["headers"]}}


async def get(ctx: Context, p: Empty) -> Config:
    return redacted(ctx.config.current)


async def update(ctx: Context, p: ConfigUpdateParams) -> Config:
    return redacted(ctx.config.update(p.config))
