"""Compaction methods; filled in with the engine."""
