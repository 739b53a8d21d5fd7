"""The shared background daemon, seen from outside it: where its files live (``paths``), one
daemon per socket (``sockets``: lock and probe), finding or starting it and bridging stdio to
it (``bridge``: ``connect``). Asking it for its status or to stop is a client's job
(``sidecar.cli.ctl``, on ``sidecar_client``, which imports this package). No pygls here:
``connect`` and ``status`` run this on every editor start."""
