"""JSON-RPC surface: framing, the pygls-based protocol, one handler module per namespace."""

from sidecar.server import (  # noqa: F401  (routes)
    admin,
    compaction,
    config,
    lifecycle,
    messages,
    sessions,
)
