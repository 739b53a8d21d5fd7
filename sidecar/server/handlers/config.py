"""``config/get`` and ``config/update``: this connection's config (partial, deep-merged,
validated as a whole; ``settings`` says which keys a client may set).

Extra summarizer headers may carry credentials, so their values are never sent back.
"""

from __future__ import annotations

import msgspec

from sidecar.model.config import Config
from sidecar.model.rpc import ConfigUpdateParams, Empty
from sidecar.server.context import Context

REDACTED = "<redacted>"


def redacted(cfg: Config) -> Config:
    headers = cfg.summarizer.headers
    if not headers:
        return cfg
    summarizer = msgspec.structs.replace(
        cfg.summarizer, headers={name: REDACTED for name in headers}
    )
    return msgspec.structs.replace(cfg, summarizer=summarizer)


async def get(ctx: Context, p: Empty) -> Config:
    return redacted(ctx.config.current)


async def update(ctx: Context, p: ConfigUpdateParams) -> Config:
    return redacted(ctx.config.update(p.config))
