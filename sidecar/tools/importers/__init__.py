"""Readers that turn other agents' session files into the store's sessions, messages, parts."""
