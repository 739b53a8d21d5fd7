"""JSON-RPC surface: framing, the pygls-based protocol, one handler module per namespace."""

from sidecar.server import compaction, config, lifecycle, messages, sessions  # noqa: F401  (routes)
