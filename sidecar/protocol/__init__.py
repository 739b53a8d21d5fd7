"""The wire, once: the method table, the error codes and the JSON Schema made from them.

Both the daemon (``sidecar.server``) and the Python client import from here, and the
TypeScript client's types are generated from ``schema.json``; nothing else spells a method
name's params or an error code. The submodules import only ``sidecar.model`` (and msgspec),
so this package sits above the model and below the server.
"""
