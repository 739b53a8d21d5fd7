"""JSON-RPC surface: the pygls-based protocol, dispatch from the method table, handlers,
the connected clients, transports and the daemon's start and stop."""
