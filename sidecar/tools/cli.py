"""The ``sessions``, ``inspect``, ``report`` and ``import`` commands.

``add_commands`` puts them on the main parser and ``dispatch`` runs one, so ``sidecar.cli``
needs two lines for them. The look-at commands open the database read-only and never need a
daemon; ``import`` writes through the ``Store`` (one transaction for everything), which is safe
beside a running daemon thanks to WAL and the busy timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from sidecar.store import Store
    from sidecar.tools.importers.common import Imported

_FORMATS = ("auto", "opencode", "claude-code", "pi", "transcript")
COMMANDS = frozenset({"sessions", "inspect", "report", "import"})


class CannotWrite(Exception):
    """An output path that cannot be written (a missing folder, a directory, no permission)."""


def add_commands(sub: Any) -> None:
    """Add the tools' subcommands to ``sub`` (an ``add_subparsers`` result)."""
    db_help = (
        "the daemon's SQLite file or postgresql:// URL (default: the daemon's default database)"
    )
    p = sub.add_parser("sessions", help="list stored sessions (read-only)")
    p.add_argument("--db", help=db_help)
    p.add_argument("--json", action="store_true", help="one JSON array, for scripts")

    p = sub.add_parser("inspect", help="a session turn by turn: context, compactions, prunes")
    p.add_argument("session", help="session id, a unique prefix of it, or its title")
    p.add_argument("--db", help=db_help)
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.add_argument(
        "--context",
        type=_positive,
        help="model window to draw (default: the one stored with the session, else the catalog)",
    )
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="what fills the current window (as session/breakdown): categories, free space, "
        "the trigger point and the largest parts",
    )

    p = sub.add_parser("report", help="a self-contained HTML report of a session")
    p.add_argument("session", help="session id, a unique prefix of it, or its title")
    p.add_argument("--db", help=db_help)
    p.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    p.add_argument(
        "--context",
        type=_positive,
        help="model window to draw (default: the one stored with the session, else the catalog)",
    )

    p = sub.add_parser("import", help="import OpenCode, Claude Code, pi or transcript sessions")
    p.add_argument(
        "files",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="an export or log file, an OpenCode data/storage folder, or a folder of *.jsonl",
    )
    p.add_argument("--db", help=db_help)
    p.add_argument(
        "--format", choices=_FORMATS, default="auto", help="default: told by each file's shape"
    )
    p.add_argument("--json", action="store_true", help="[{sessionID, source, messages}]")
    p.add_argument(
        "--max-bytes",
        type=_positive,
        default=None,
        metavar="N",
        help="refuse a file larger than this (default 256 MiB); only regular files are read",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


def _db(args: argparse.Namespace) -> str | Path:
    if args.db is not None:
        return str(args.db)
    from sidecar.shared_daemon.paths import default_db_path

    return default_db_path()


def dispatch(args: argparse.Namespace) -> int:
    """Run the tools command in ``args``. A one-line message and exit status 2 when the
    command line names nothing usable (a database or file), 1 when the command failed, 130
    when interrupted."""
    from sidecar.errors import Conflict
    from sidecar.tools.importers.common import ImportFailure
    from sidecar.tools.readdb import CannotOpenDatabase, DatabaseError

    try:
        if args.command == "sessions":
            return _sessions(args)
        if args.command in ("inspect", "report"):
            return _inspect(args)
        return _import(args)
    except (CannotOpenDatabase, _NoInput) as exc:
        print(f"compaction-sidecar {args.command}: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except (DatabaseError, ImportFailure, Conflict, CannotWrite) as exc:
        print(f"compaction-sidecar {args.command}: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except _Interrupted:
        # On a terminal, start from a clean line whatever a progress bar left on it.
        clear = "\r\x1b[K" if sys.stderr.isatty() else ""
        print(
            f"{clear}compaction-sidecar {args.command}: interrupted; nothing imported",
            file=sys.stderr,
        )
        return 130
    except BrokenPipeError:  # `sessions | head`: the reader left, which is not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _when(ms: int) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M")


def _sessions(args: argparse.Namespace) -> int:
    from sidecar.engine.tokens import estimate_messages
    from sidecar.model.inspect import SessionSummary
    from sidecar.tools.readdb import list_sessions, open_ro, overview

    conn = open_ro(_db(args))
    rows: list[SessionSummary] = []
    try:
        for session in list_sessions(conn):
            o = overview(conn, session)
            rows.append(
                SessionSummary(
                    id=session.id,
                    title=session.title,
                    messages=o.messages,
                    estimated_tokens=estimate_messages(o.window),
                    compactions=o.compactions,
                    last_activity=o.last_activity,
                )
            )
    finally:
        conn.close()
    if args.json:
        sys.stdout.write(msgspec.json.encode(rows).decode() + "\n")
        return 0
    if not rows:
        print("no sessions")
        return 0
    w = max(34, *(len(s.id) for s in rows))  # ids are any length (imports keep theirs)
    print(f"{'id':<{w}} {'messages':>8} {'tokens':>9} {'compact':>7}  {'last activity':<16}  title")
    for s in rows:
        print(
            f"{s.id:<{w}} {s.messages:>8,} {s.estimated_tokens:>9,} {s.compactions:>7}  "
            f"{_when(s.last_activity):<16}  {s.title}"
        )
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from sidecar.tools.inspect import inspect
    from sidecar.tools.readdb import (
        find_session,
        load_diagnostics,
        load_history,
        load_pinned,
        open_ro,
    )

    conn = open_ro(_db(args))
    try:
        session = find_session(conn, args.session)
        history = load_history(conn, session)
        diagnostics = load_diagnostics(conn, session)
        pinned = load_pinned(conn, session)
    finally:
        conn.close()
    result = inspect(session, history, context=args.context, diagnostics=diagnostics, pinned=pinned)
    if args.command == "report":
        from sidecar.tools.report import render

        try:
            args.output.write_text(render(result), encoding="utf-8")
        except OSError as exc:
            raise CannotWrite(f"cannot write {args.output}: {exc.strerror or exc}") from None
        print(f"wrote {args.output}")
        return 0
    if args.json:
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
        return 0
    if getattr(args, "breakdown", False):
        _print_breakdown(result)
        return 0
    _print_inspection(result)
    return 0


def _print_breakdown(ins: Any) -> None:
    """``inspect --breakdown``: the current window split, as ``session/breakdown`` answers."""
    from sidecar.tools.inspect import CATEGORY_LABELS

    b = ins.breakdown
    s = ins.session
    print(f"{s.id}  {s.title}")
    usable = b.usable_input
    print(
        f"model {ins.model or 'unknown'}, window {_fmt(b.context)}, "
        f"reserved for output {_fmt(b.reserved_output)}, usable input {_fmt(usable)}"
    )
    print(f"{'':40} {'tokens':>9} {'of usable':>9}")
    for c in b.categories:
        share = f"{100 * c.share:.1f}%" if c.share is not None else "-"
        print(f"{CATEGORY_LABELS[c.name]:40} {c.tokens:>9,} {share:>9}")
    print(f"{'total':40} {b.total_tokens:>9,}")
    if usable is not None:
        print(f"{'free':40} {b.free:>9,} {100 * b.free / usable:>8.1f}%")
        print(f"compaction triggers past {b.trigger:,} tokens of a turn", end="")
        print(f"; preparation starts at {b.prepare_at:,}" if b.prepare_at else "")
    if b.largest:
        print("\nlargest parts:")
        print(f"{'tokens':>9}  {'kind':18} {'tool':10} message / part")
        for i in b.largest:
            print(f"{i.tokens:>9,}  {i.kind:18} {i.tool or '-':10} {i.message_id} / {i.part_id}")


def _fmt(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _print_inspection(ins: Any) -> None:
    s = ins.session
    window = f"{ins.window:,}" if ins.window else "unknown"
    print(f"{s.id}  {s.title}")
    usable = f"{ins.usable:,}" if ins.usable else "-"
    where = {
        "session": " (stored with the session)",
        "catalog": " (from the model catalog)",
        "--context": " (--context)",
    }.get(ins.limits_from or "", "")
    print(f"model {ins.model or 'unknown'}, window {window}, usable {usable}{where}")
    print(
        "(context: the engine's estimate of the window a frontend sends before each model call; "
        "a compaction's before -> after: that estimate of the window just before it and right "
        "after it, as session/compacted and session/compactions record them)"
    )
    print(f"{s.messages} messages, current context {s.estimated_tokens:,} estimated tokens")
    events: dict[int, list[str]] = {}
    for i, c in enumerate(ins.compactions, 1):
        kind = "auto" if c.auto else "manual"
        by = f", written by {c.writer}" if c.writer else ""
        events.setdefault(c.turn, []).append(
            f"   -- compaction C{i} ({kind}): {c.before:,} -> {c.after:,} tokens{by}, "
            f"replaced {len(c.replaced_ids)} messages"
        )
        d = c.diagnostics
        if d is not None:
            events[c.turn].append(
                f"      summary {d.summary_tokens:,} tokens, {d.messages_summarized} messages "
                f"summarized, {d.parts_pruned} pruned outputs, {d.duration_ms:,} ms"
                + (
                    f", triggered at {d.reported_tokens:,} reported tokens"
                    if d.reported_tokens
                    else ""
                )
            )
    for p in ins.prunes:
        events.setdefault(p.turn, []).append(
            f"   -- prune: {len(p.part_ids)} tool outputs cleared, {p.tokens_saved:,} tokens saved"
        )
    print(f"{'turn':>5} {'context':>9} {'reported':>9} {'of window':>9}")
    for line in events.get(0, []):
        print(line)
    for t in ins.turns:
        pct = f"{100 * t.context_tokens / ins.window:.0f}%" if ins.window else "-"
        rep = f"{t.reported_tokens:,}" if t.reported_tokens is not None else "-"
        print(f"{t.turn:>5} {t.context_tokens:>9,} {rep:>9} {pct:>9}")
        for line in events.get(t.turn, []):
            print(line)
    if ins.latest_summary:
        print("\nlatest summary:")
        print(ins.latest_summary)


def _one_line(text: str, limit: int = 600) -> str:
    """An error as one bounded line: a file name or a value may hold newlines or be huge."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return flat if len(flat) <= limit else flat[:limit] + "..."


class _Interrupted(Exception):
    """Ctrl-C during an import, before its one transaction began: nothing was stored."""


def _import(args: argparse.Namespace) -> int:
    """Read and check every file first, then write every session in one transaction: a bad
    file, a conflict or Ctrl-C before the commit leaves the database as it was."""
    from sidecar.tools.importers.common import DEFAULT_MAX_BYTES
    from sidecar.tools.importers.detect import units

    limit = args.max_bytes or DEFAULT_MAX_BYTES
    imps: list[tuple[Path, Imported]] = []
    bar = None
    with tempfile.TemporaryDirectory(prefix="sidecar-import-") as tmp:
        try:
            inputs = [_input(Path(path), Path(tmp)) for path in args.files]
            files = [(path, unit) for path in inputs for unit in units(path)]
            bar = _progress(len(files), unit="file", minimum=2)
            for path, unit in files:
                imps.extend((_label(path, tmp), imp) for imp in _read(unit, args.format, limit))
                if bar is not None:
                    bar.update(1)
        except KeyboardInterrupt:
            if bar is not None:
                bar.leave = False  # clear the bar: the one line that follows starts the line
            raise _Interrupted from None
        finally:
            if bar is not None:
                bar.close()
    interrupted = False

    def note(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = True

    # From here Ctrl-C is noted, not raised: before the commit it cancels the import, once the
    # commit began it lets it finish (one transaction: all of it or nothing, never half).
    previous = signal.signal(signal.SIGINT, note)
    try:
        done = asyncio.run(_write(args, imps, lambda: interrupted))
    finally:
        signal.signal(signal.SIGINT, previous)
    if args.json:
        print(json.dumps(done))
    else:
        for d in done:
            print(f"{d['sessionID']}  {d['source']}  {d['messages']} messages")
    return 0


class _NoInput(Exception):
    """An import ``FILE`` that does not exist: a usage error (exit status 2)."""


STDIN_NAMES = ("-", "/dev/stdin")
STDIN_LABEL = "<stdin>"


def _input(path: Path, tmp: Path) -> Path:
    """What to read for one ``FILE``: ``-`` or ``/dev/stdin`` is standard input, saved to a
    private temporary file first (format detection and the SQLite reader need a file they can
    reopen); a path that does not exist is a usage error."""
    if str(path) not in STDIN_NAMES:
        if not path.exists() and not path.is_symlink():
            raise _NoInput(f"{path}: no such file or folder")
        return path
    saved = tmp / "stdin"
    with open(saved, "wb") as out:
        while chunk := os.read(sys.stdin.fileno(), 1 << 20):
            out.write(chunk)
    return saved


def _label(path: Path, tmp: str) -> Path:
    return Path(STDIN_LABEL) if str(path).startswith(tmp) else path


def _read(unit: Path, fmt: Any, limit: int) -> list[Imported]:
    """``read`` for one unit; errors name ``<stdin>``, never the temporary file."""
    from sidecar.tools.importers.common import ImportFailure
    from sidecar.tools.importers.detect import read

    try:
        return read(unit, fmt, limit)
    except ImportFailure as exc:
        if unit.name == "stdin" and unit.parent.name.startswith("sidecar-import-"):
            raise ImportFailure(str(exc).replace(str(unit), STDIN_LABEL)) from None
        raise


async def _write(
    args: argparse.Namespace, imps: list[tuple[Path, Imported]], interrupted: Any
) -> list[dict[str, Any]]:
    import sqlite3

    from sidecar.store import CannotOpen, Store, UnsupportedDatabase, redact, unreachable
    from sidecar.tools.readdb import CannotOpenDatabase

    db = _db(args)
    try:
        store = await Store.open(db)
    except UnsupportedDatabase as exc:
        raise CannotOpenDatabase(str(exc)) from None
    except (OSError, sqlite3.Error, TimeoutError, CannotOpen) as exc:
        shown = redact(str(db))
        why = unreachable(str(db), exc) if isinstance(exc, OSError) else str(exc)
        raise CannotOpenDatabase(
            f"cannot open the database {shown}: {why or type(exc).__name__}"
        ) from None
    # The id check looks up every message, so it is what moves the bar, a message at a time.
    bar = _progress(sum(len(i.messages) for _, i in imps))
    try:
        for path, imp in imps:
            await _check_ids(store, imp, path, bar)
            if interrupted():
                raise _Interrupted
        if interrupted():
            raise _Interrupted
        await store.put_sessions_with([(i.session, i.messages, i.parts) for _, i in imps])
    finally:
        if bar is not None:
            bar.close()
        await store.close()
    return [
        {"sessionID": i.session.id, "source": i.source, "messages": len(i.messages)}
        for _, i in imps
    ]


async def _check_ids(store: Store, imp: Imported, path: Path, bar: Any = None) -> None:
    """The store refuses an id that belongs to another session or message; checking first
    gives an error that names the file and the id."""
    from sidecar.tools.importers.common import ImportFailure

    for msg, _ in imp.messages:
        hit = await store.get_message(msg.id)
        if hit is not None and hit[0].session_id != imp.session.id:
            raise ImportFailure(
                f"{path}: message {msg.id!r} is already stored in session {hit[0].session_id!r}"
            )
        if bar is not None:
            bar.update(1)
    for part, _ in imp.parts:
        found = await store.get_part(part.id)
        if found is not None and found[0].message_id != part.message_id:
            raise ImportFailure(
                f"{path}: part {part.id!r} is already stored in message {found[0].message_id!r}"
            )


def _progress(total: int, unit: str = "msg", minimum: int = 500) -> Any:
    """A tqdm bar on stderr when it is a terminal and the import is long; else None."""
    if total < minimum or not sys.stderr.isatty():
        return None
    from tqdm import tqdm  # type: ignore[import-untyped]

    return tqdm(total=total, unit=unit, desc="import", file=sys.stderr)
