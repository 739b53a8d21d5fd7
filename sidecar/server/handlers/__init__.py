"""The request handlers, one module per namespace; the method table names each one
(``"module:function"``), and ``sidecar.server.dispatch`` binds them. A handler takes a
``Context`` and its params Struct, validates, calls the store or the engine, and returns a
Struct."""
