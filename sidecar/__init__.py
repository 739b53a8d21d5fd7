"""compaction-sidecar: a JSON-RPC daemon owning an agent's conversation store and compaction engine."""

__version__ = "0.1.0"
