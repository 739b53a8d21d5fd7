"""compaction-sidecar: a JSON-RPC daemon that owns a coding agent's store and compaction engine."""

__version__ = "0.1.0"
