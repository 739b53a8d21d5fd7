"""``compaction-sidecar mcp``: the MCP server (``server``), a client of the shared daemon, and
its bounded stdio transport (``stdio``)."""
