"""`python -m sidecar` is the same program as the `compaction-sidecar` console script."""

from sidecar.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
