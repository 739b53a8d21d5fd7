"""The shared background daemon, seen from outside it: where its files live (``paths``), one
daemon per socket (``sockets``: lock and probe), finding or starting it and bridging stdio to
it (``bridge``: ``connect``), and asking it for its status or to stop (``ctl``). No pygls
here: ``connect`` and ``status`` run this on every editor start."""
