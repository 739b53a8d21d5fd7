"""The compaction engine: token estimates, overflow, pruning, filtering and context rendering."""
