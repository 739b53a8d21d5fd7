"""Tools for people: look at stored sessions (``sessions``, ``inspect``, ``report``) and bring
sessions in from other agents (``import``). They run beside the daemon, not inside it."""
