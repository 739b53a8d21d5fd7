"""The daemon beside the real OpenCode on the OpenCode peer's three standard scenarios, with the
peer driver's own floor measured in the same round.

Per round and scenario, in this order on one machine:

1. OpenCode: the peer's ``drive.py`` runs the scenario against the OpenCode binary given;
2. daemon: the peer's ``drive_sidecar.py`` replays that OpenCode run into a fresh daemon
   (``compaction-sidecar serve`` from ``--bin``), timing each turn as the sum of its requests'
   latencies;
3. floor: the same replay, once more, through ``bench/_record_proxy.py`` (the real daemon,
   every reply recorded), then through ``bench/_replay_server.py`` answering each request with
   those recorded bytes and doing nothing else. What the driver measures there is its own cost
   and the pipes': encoding each request, and reading, decoding and sorting the same replies
   (a ``session/context`` window is ~300-700 KB a turn). No daemon, however fast, can show a
   turn below it in this driver.

Printed per scenario: turn p50 of each, OpenCode ÷ daemon (target >= 25x) and the turn the
target needs beside the floor (what would be left of it for the daemon's own work); peak RSS
of each (target >= 15x) and the daemon's RSS right after it started (before any session);
CPU; storage while
running. The peer scripts live outside this repository: ``--peer`` (default the ``shared``
folder next to the repository, or ``$SIDECAR_SHARED``) holds ``opencode-peer/``; ``--opencode``
is the platform binary (``opencode-linux-x64``'s ``bin/opencode``, see the peer's README).

    python bench/opencode_side.py --opencode PATH [--rounds 1] [--scenarios B30p,A30p,A100p]
                                  [--latest PATH] [--bin VENV/bin] [--peer DIR] [--keep DIR]
                                  [--full-windows]

The driver declares ``capabilities.echo`` false and reads each step's window with ``since``,
assembling it from the deltas (``_since_driver.py``), as the OpenCode plugin does;
``--full-windows`` has it read the whole window every step, as the peer's driver does by
itself. The output says which.

``--latest`` runs a newer OpenCode on each scenario too (its storage is no longer the JSON
files the replay reads: the daemon's figures stay those of replaying ``--opencode``'s run)
and prints its CPU per turn beside the daemon's (target >= 40x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _util import median  # noqa: E402

SCENARIOS = {  # the peer README's standard scenarios (drive.py flags)
    "B30p": ["--turns", "30", "--context", "60000", "--output", "4000"],
    "A30p": ["--turns", "30", "--force-overflow-at", "15", "--summarize-at", "25"],
    "A100p": ["--turns", "100", "--force-overflow-at", "50"],
}
TURN_TARGET = 25.0
LATEST_TARGET = 40.0
RSS_TARGET = 15.0
READS = {  # how the driver reads each step's window (``--full-windows``)
    True: "the driver declares capabilities.echo false and reads each step's window with since "
    "and assembles it, as the OpenCode plugin does",
    False: "the driver reads the whole window each step, no since",
}


def _peer_dir(given: str | None) -> Path:
    candidates = [Path(given)] if given else []
    if os.environ.get("SIDECAR_SHARED"):
        candidates.append(Path(os.environ["SIDECAR_SHARED"]))
    candidates += [d / "shared" for d in HERE.parents]
    for c in candidates:
        if (c / "opencode-peer" / "drive_sidecar.py").is_file():
            return c / "opencode-peer"
    sys.exit("opencode_side: no opencode-peer folder found (give --peer DIR)")


def _stand_in(folder: Path, argv: list[str], tail: list[str] | None = None) -> Path:
    """A folder whose ``compaction-sidecar`` runs ``argv`` + the driver's arguments +
    ``tail``."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "compaction-sidecar"
    after = " ".join(f"'{a}'" for a in tail or [])
    exe.write_text("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in argv) + f' "$@" {after}\n')
    exe.chmod(0o755)
    return folder


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("wb") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    if code:
        sys.exit(f"opencode_side: {' '.join(cmd[:3])} ... exited {code}; see {log}")


def _summary(run: Path) -> dict[str, Any]:
    with (run / "summary.json").open() as f:
        result: dict[str, Any] = json.load(f)
    return result


def _replay(peer: Path, base: Path, into: str, bin_dir: Path, since: bool) -> None:
    """The peer driver's replay of ``base``'s OpenCode run into ``bin_dir``'s daemon; with
    ``since``, its window reads go through ``_since_driver.py`` (deltas, assembled there)."""
    driver = (
        [str(HERE / "_since_driver.py"), str(peer)] if since else [str(peer / "drive_sidecar.py")]
    )
    _run(
        [sys.executable, *driver, "--oc-run", str(base / "opencode"),
         "--workdir", str(base / into), "--bin", str(bin_dir)],
        base.with_suffix(f".{into}.log"),
    )  # fmt: skip


def index_after(base: Path) -> dict[str, float]:
    """The history index the daemon's replay left to do, done on a copy of its store after
    shutdown: the replay's writes are never quiet for ``history.indexDelayMs`` (0.5 s), so
    its store holds notes, not the index, and its CPU per turn has no index batch in it.
    Returns the CPU that took (s, this process's) and the store's bytes with the index."""
    import asyncio
    import time

    from sidecar.store import Store

    src = base / "daemon" / "sessions.db"
    copy = base / "indexed" / "sessions.db"
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(src, copy)

    async def build() -> float:
        store = await Store.open(copy)
        try:
            assert store.indexer is not None
            t0 = time.process_time()
            await store.indexer.catch_up()
            return time.process_time() - t0
        finally:
            await store.close()

    cpu = asyncio.run(build())
    size = sum(p.stat().st_size for p in copy.parent.iterdir() if p.name.startswith("sessions"))
    return {"cpu_s": cpu, "bytes": float(size)}


def one_round(args: argparse.Namespace, peer: Path, tmp: Path, n: int) -> dict[str, Any]:
    """One round: per scenario, OpenCode, the daemon, the driver's floor."""
    out: dict[str, Any] = {}
    real = str(Path(args.bin) / "compaction-sidecar")
    for name in args.scenarios:
        base = tmp / f"r{n}-{name}"
        runs = [("opencode", args.opencode)] + ([("latest", args.latest)] if args.latest else [])
        for who, binary in runs:
            _run(
                [sys.executable, str(peer / "drive.py"), "--opencode", binary,
                 "--workdir", str(base / who), *SCENARIOS[name], "--observe", "end",
                 "--settle-ms", "0"],
                base.with_suffix(f".{who}.log"),
            )  # fmt: skip

        since = not args.full_windows
        _replay(peer, base, "daemon", Path(args.bin), since)
        indexed = index_after(base)
        recorded = base / "replies.json"
        proxy = [sys.executable, str(HERE / "_record_proxy.py"), str(recorded), real]
        # The recording's daemon also writes its CPU split (``serve --cpu-split``): measured
        # there, its small cost stays out of the daemon's own figures above.
        split = ["--cpu-split", str(base / "cpu.jsonl")]
        _replay(peer, base, "record", _stand_in(base / "rec", proxy, split), since)
        server = [sys.executable, str(HERE / "_replay_server.py"), str(recorded)]
        _replay(peer, base, "floor", _stand_in(base / "rep", server), since)
        out[name] = {k: _summary(base / k) for k in ("opencode", "daemon", "floor")}
        for who in ("opencode", "daemon"):
            out[name][who]["_turns"] = _turns(base / who)
        if args.latest:
            out[name]["latest"] = {"_turns": _turns(base / "latest")}
        out[name]["split"] = cpu_split(base)
        out[name]["indexed"] = indexed
    return out


def _turns(run: Path) -> list[dict[str, Any]]:
    with (run / "turns.jsonl").open() as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_split(base: Path) -> dict[str, float]:
    """The recording daemon's CPU per turn after turn 1 by kind (ms), and its index batches
    at exit (``at_exit``), from its ``--cpu-split`` lines: one per ``session/idle`` (each
    step's, and a manual compaction's), then one at exit."""
    with (base / "cpu.jsonl").open() as f:
        lines = [json.loads(line) for line in f if line.strip()]
    turns = _turns(base / "record")
    with (base / "record" / "steps.jsonl").open() as f:
        first = sum(1 for line in f if line.strip() and json.loads(line)["turn"] == 1)
    first += sum(1 for t in turns[:1] if t.get("manual_compact_ms") is not None)
    start, end, final = lines[first - 1], lines[-2], lines[-1]
    kinds = ("ingest", "index", "reads", "encode", "other", "total")
    split = {k: (end[k] - start[k]) / (len(turns) - 1) for k in kinds}
    split["at_exit"] = final["index"] - end["index"]
    return split


def cpu_per_turn(s: dict[str, Any]) -> float:
    """CPU seconds per turn after turn 1 (the process's, from ``/proc``): start-up and the
    first turn's one-time costs left out."""
    rows = [r for r in s["_turns"] if r.get("cpu_s") is not None]
    if len(rows) < 2:
        return float("nan")
    return (float(rows[-1]["cpu_s"]) - float(rows[0]["cpu_s"])) / (len(rows) - 1)


def stored_after_shutdown(who: str, s: dict[str, Any]) -> float:
    """Bytes of the session store once the process exited (the daemon's WAL checkpointed)."""
    if who == "opencode":
        return float(s["store_after_shutdown_bytes_files"][0])
    return float(sum(s["storage_after_shutdown"].values()))


def version_of(binary: str) -> str:
    """``OpenCode 1.18.34``-like, from the npm package the platform binary came in."""
    package = Path(binary).resolve().parent.parent / "package.json"
    try:
        return str(json.loads(package.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return binary


def report(
    rounds: list[dict[str, Any]], scenarios: list[str], latest: str = "", since: bool = True
) -> None:
    def med(name: str, who: str, pick: Any) -> float:
        return median([float(pick(r[name][who])) for r in rounds])

    def p50(s: dict[str, Any]) -> float:
        return float(s["turn_wall_ms_p50_p90_max"][0])

    def hwm(s: dict[str, Any]) -> float:
        return float(s["peak_rss_kb_VmHWM"]) / 1024

    for name in scenarios:
        oc, dm, fl = (med(name, w, p50) for w in ("opencode", "daemon", "floor"))
        ratio = oc / dm
        need = oc / TURN_TARGET
        print(
            f"{name}: turn p50 OpenCode {oc:.1f} ms, daemon {dm:.1f} ms, ratio {ratio:.1f}x "
            f"(target >= {TURN_TARGET:.0f}x)  {'OK' if ratio >= TURN_TARGET else 'MISSED'}"
        )
        left = (
            f"{need - fl:.2f} ms above the floor"
            if need >= fl
            else f"{fl - need:.2f} ms below the floor itself"
        )
        print(
            f"{name}: driver floor (the daemon's recorded replies, nothing else) turn p50 "
            f"{fl:.1f} ms; OpenCode ÷ floor {oc / fl:.1f}x, daemon ÷ floor {dm / fl:.1f}; "
            f"{TURN_TARGET:.0f}x needs a turn <= {need:.2f} ms, {left}"
        )
        ocm, dmm = (med(name, w, hwm) for w in ("opencode", "daemon"))
        start = med(name, "daemon", lambda s: s["idle_rss_kb_after_start"]) / 1024
        rss = ocm / dmm
        print(
            f"{name}: peak RSS OpenCode {ocm:.0f} MiB, daemon {dmm:.0f} MiB, ratio {rss:.1f}x "
            f"(target >= {RSS_TARGET:.0f}x)  {'OK' if rss >= RSS_TARGET else 'MISSED'}; "
            f"{RSS_TARGET:.0f}x needs <= {ocm / RSS_TARGET:.0f} MiB; the daemon right after "
            f"start (Python, the stack's imports, an empty store) {start:.0f} MiB"
        )
        occ, dmc = (med(name, w, lambda s: s["cpu_s"]) for w in ("opencode", "daemon"))
        ocs = med(name, "opencode", lambda s: s["store_max_while_running_bytes"]) / 1e6
        dms = med(name, "daemon", lambda s: s["storage_max_while_running_bytes"]) / 1e6
        print(
            f"{name}: CPU OpenCode {occ:.2f} s, daemon {dmc:.2f} s, ratio {occ / dmc:.1f}x; "
            f"storage max while running OpenCode {ocs:.2f} MB, daemon {dms:.2f} MB"
        )
        oct_, dmt = (med(name, w, cpu_per_turn) for w in ("opencode", "daemon"))
        print(
            f"{name}: CPU per turn after turn 1 OpenCode {oct_ * 1000:.1f} ms, daemon "
            f"{dmt * 1000:.2f} ms, ratio {oct_ / dmt:.1f}x (target >= {TURN_TARGET:.0f}x)  "
            f"{'OK' if oct_ / dmt >= TURN_TARGET else 'MISSED'}"
        )
        oca, dma = (
            med(name, w, lambda s, w=w: stored_after_shutdown(w, s)) for w in ("opencode", "daemon")
        )
        if "latest" in rounds[0][name]:
            late = med(name, "latest", cpu_per_turn)
            print(
                f"{name}: CPU per turn after turn 1 OpenCode {latest} "
                f"{late * 1000:.1f} ms (its own run of the scenario), daemon {dmt * 1000:.2f} ms "
                f"(replaying the first OpenCode's run), ratio {late / dmt:.1f}x (target >= "
                f"{LATEST_TARGET:.0f}x)  {'OK' if late / dmt >= LATEST_TARGET else 'MISSED'}"
            )
        split = {k: median([r[name]["split"][k] for r in rounds]) for k in rounds[0][name]["split"]}
        print(
            f"{name}: daemon CPU per turn after turn 1 by kind (serve --cpu-split, in the "
            f"recording replay; {READS[since]}): "
            + ", ".join(f"{k} {split[k]:.2f} ms" for k in ("ingest", "index", "reads", "encode"))
            + f", other {split['other']:.2f} ms (total {split['total']:.2f} ms); index "
            f"batches at exit {split['at_exit']:.2f} ms"
        )
        turns = len(rounds[0][name]["daemon"]["_turns"])
        ix_cpu = median([r[name]["indexed"]["cpu_s"] for r in rounds]) * 1000 / turns
        ix_bytes = median([r[name]["indexed"]["bytes"] for r in rounds])
        end = med(name, "daemon", lambda s: s["_turns"][-1]["rss_kb"]) / 1024
        print(
            f"{name}: storage after shutdown OpenCode {oca / 1e6:.2f} MB, daemon "
            f"{dma / 1e6:.2f} MB ({dma / oca:.2f}x, target <= 1.0x), while running "
            f"{dms / ocs:.2f}x (target <= 1.5x); daemon RSS at the end {end:.0f} MiB, "
            f"{end / start:.2f}x its RSS right after start (target <= 1.4x)"
        )
        print(
            f"{name}: the history index, left undone by the replay (its writes are never quiet "
            f"for history.indexDelayMs), built on a copy of its store after shutdown: "
            f"{ix_cpu:.2f} ms of CPU per turn; the store then {ix_bytes / 1e6:.2f} MB "
            f"({ix_bytes / oca:.2f}x OpenCode's)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--opencode",
        required=True,
        help="OpenCode's platform binary (1.1.x: its JSON storage is what the daemon replays)",
    )
    ap.add_argument("--latest", help="a newer OpenCode's platform binary, run on each scenario "
                    "too: its CPU per turn beside the daemon's (target >= 40x)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--bin", default=str(Path(sys.executable).parent),
                    help="folder of the compaction-sidecar to measure")  # fmt: skip
    ap.add_argument("--peer", help="folder holding opencode-peer/")
    ap.add_argument("--keep", help="keep the runs in this folder")
    ap.add_argument("--full-windows", action="store_true", help="the driver reads the whole "
                    "window each step (default: with since, assembled by the driver)")  # fmt: skip
    args = ap.parse_args()
    args.scenarios = args.scenarios.split(",")
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        sys.exit(f"opencode_side: unknown scenario {unknown[0]!r} (known: {', '.join(SCENARIOS)})")
    peer = _peer_dir(args.peer)
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="opencode-side-"))
    tmp.mkdir(parents=True, exist_ok=True)
    print(
        f"opencode_side: {', '.join(args.scenarios)}; {args.rounds} round(s), medians; "
        f"{os.cpu_count()} CPUs; each OpenCode run replayed into the daemon, then as the floor; "
        f"{READS[not args.full_windows]}",
        flush=True,
    )
    try:
        rounds = [one_round(args, peer, tmp, n) for n in range(args.rounds)]
        latest = version_of(args.latest) if args.latest else ""
        report(rounds, args.scenarios, latest, not args.full_windows)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
