"""Command line (PROTOCOL.md): each group of commands registers its subparsers from one function
and names the function that runs it (``set_defaults(run=...)``).

Imports are lazy so that ``--help``, ``connect`` and ``status`` do not pay for pygls.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from sidecar import __version__

PROG = "compaction-sidecar"
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
DEFAULT_IDLE_EXIT = 300.0


class UsageError(Exception):
    """A bad combination of arguments: reported without a traceback, exit status 2."""


class CannotWrite(Exception):
    """A path given to write to (a log, a database file) that cannot be: one line, exit 1."""


def writable_file(option: str, path: Path) -> Path:
    """Create ``path``'s folder and open the file for appending, now, so that a path that
    cannot be written is one line naming it instead of a traceback later."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise CannotWrite(f"{option} {path}: cannot write: {exc.strerror or exc}") from None
    return path


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def existing_file(option: str, path: Path | None) -> Path | None:
    if path is not None and not path.is_file():
        raise UsageError(f"{option} {path}: no such file")
    return path


def _log_options(p: argparse.ArgumentParser, log_default: str = "stderr") -> None:
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=None,
        help="daemon log level (default: $SIDECAR_LOG or WARNING)",
    )
    p.add_argument(
        "--log-file", type=Path, help=f"append the daemon's log here (default: {log_default})"
    )


def _log_level(args: argparse.Namespace) -> str:
    level = str(args.log_level or os.environ.get("SIDECAR_LOG") or "WARNING").upper()
    if level not in LOG_LEVELS:
        raise UsageError(f"SIDECAR_LOG={level!r}: use one of {', '.join(LOG_LEVELS)}")
    return level


# -- serve ---------------------------------------------------------------------------------------


def add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the JSON-RPC daemon (stdio unless --listen)")
    serve.add_argument(
        "--db",
        help="SQLite file (default: in the user data dir), or a postgresql:// URL to share one "
        "database between daemons",
    )
    serve.add_argument("--config", type=Path, help="workspace config file (JSON)")
    serve.add_argument(
        "--listen", help="tcp://127.0.0.1:PORT or unix:PATH for a shared daemon (default stdio)"
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        help="TCP only: where the fresh token is written, 0600 (default: in the user runtime "
        "dir; not written when COMPACTION_SIDECAR_TOKEN sets the token)",
    )
    serve.add_argument(
        "--idle-exit",
        type=positive_float,
        metavar="SECONDS",
        help="with --listen: exit after this long with no client connected",
    )
    serve.add_argument(
        "--synchronous",
        choices=["normal", "full"],
        default="normal",
        help="SQLite durability: normal survives a killed daemon, full also a power cut",
    )
    _log_options(serve)
    serve.add_argument(
        "--cpu-split",
        type=Path,
        metavar="FILE",
        help="append the daemon's CPU so far by kind of work (ms: ingest, index, reads, "
        "encode, other, total) to FILE as a JSON line at each session/idle and at exit "
        "(diagnostics: costs ~1-2%% of CPU)",
    )
    # Given by ``connect``: it holds the socket's lock and waits for "ready" on this pipe.
    serve.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    serve.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    existing_file("--config", args.config)
    if args.listen is None and args.idle_exit is not None:
        raise UsageError("--idle-exit needs --listen (a stdio daemon ends with its client)")
    if args.token_file is not None and not str(args.listen or "").startswith("tcp://"):
        raise UsageError("--token-file is for a TCP listener (--listen tcp://127.0.0.1:PORT)")
    level = getattr(logging, _log_level(args))
    fmt = "%(asctime)s %(name)s %(levelname)s %(message)s"
    if args.log_file is not None:
        writable_file("--log-file", args.log_file)
        logging.basicConfig(filename=args.log_file, level=level, format=fmt)
    else:
        logging.basicConfig(stream=sys.stderr, level=level, format=fmt)
    if args.cpu_split is not None:
        from sidecar.model.cpu import SPLIT

        writable_file("--cpu-split", args.cpu_split)
        SPLIT.start(args.cpu_split)
    # pygls logs every error reply with a traceback; ours are client mistakes, not bugs.
    logging.getLogger("pygls").setLevel(max(level, logging.CRITICAL if level > 10 else 10))
    import asyncio

    from sidecar.model.config import ConfigError
    from sidecar.server.daemon import Options, StartError, run
    from sidecar.server.transport import ListenError, parse_listen
    from sidecar.shared_daemon import paths

    if args.listen is None and args.ready_fd is None and sys.stdin.isatty():
        # Run by hand: without this line a daemon waiting on its stdin looks like a hang.
        print(
            f"{PROG}: waiting for JSON-RPC (Content-Length framed, as LSP) on stdin; an editor "
            "or agent spawns this. Quit with Ctrl-D (end of input) or Ctrl-C.",
            file=sys.stderr,
            flush=True,
        )
    try:
        if args.listen is not None:
            parse_listen(args.listen)  # a bad --listen is refused before the store is opened
        db = args.db or paths.default_db_path()
        opts = Options(
            db=db,
            config_file=args.config,
            listen=args.listen,
            synchronous=args.synchronous.upper(),
            idle_exit=args.idle_exit,
            token_file=args.token_file,
            ready_fd=args.ready_fd,
        )
        return asyncio.run(run(opts))
    except (ListenError, StartError, paths.UnsafeDirectory, ConfigError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


# -- the shared background daemon: connect, status, stop ---------------------------------------


def _attach_options(p: argparse.ArgumentParser, socket_help: str) -> None:
    """Where the shared daemon is, and how to start it when none runs (connect, mcp)."""
    p.add_argument("--socket", type=Path, help=socket_help)
    p.add_argument(
        "--db",
        help="SQLite file or postgresql:// URL, for a daemon this starts (default: user data dir)",
    )
    p.add_argument("--config", type=Path, help="config file, for a daemon this starts")
    p.add_argument(
        "--idle-exit",
        type=positive_float,
        default=DEFAULT_IDLE_EXIT,
        metavar="SECONDS",
        help=f"a daemon this starts exits after this long with no client "
        f"(default {DEFAULT_IDLE_EXIT:g})",
    )


def add_shared_daemon(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    socket_help = "the daemon's unix socket (default: compaction-sidecar/daemon.sock in the "
    socket_help += "user runtime dir)"
    connect = sub.add_parser(
        "connect",
        help="bridge stdio to the shared background daemon, starting it if none runs "
        "(what an editor spawns instead of serve)",
    )
    _attach_options(connect, socket_help)
    from sidecar.shared_daemon import paths

    _log_options(connect, log_default=str(paths.default_log_path()))
    connect.set_defaults(run=run_connect)

    status = sub.add_parser("status", help="show the background daemon: pid, clients, sessions")
    status.add_argument("--socket", type=Path, help=socket_help)
    status.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    status.set_defaults(run=run_status)

    mcp = sub.add_parser(
        "mcp",
        help="Model Context Protocol server on stdio (history_search, history_expand, "
        "context_status, compact_now) over the shared background daemon",
    )
    _attach_options(mcp, socket_help)
    scope = mcp.add_mutually_exclusive_group()
    scope.add_argument(
        "--directory",
        help="the project whose sessions the tools see: those whose directory is this one "
        "(default: the working directory)",
    )
    scope.add_argument(
        "--all-projects",
        action="store_true",
        help="let the tools see the sessions of every project (the tool descriptions say so)",
    )
    _log_options(mcp)
    mcp.set_defaults(run=run_mcp)

    stop = sub.add_parser("stop", help="stop the background daemon gracefully")
    stop.add_argument("--socket", type=Path, help=socket_help)
    stop.set_defaults(run=run_stop)


def _socket(args: argparse.Namespace) -> tuple[Path, bool]:
    if args.socket is not None:
        return args.socket, False
    from sidecar.shared_daemon import paths

    return paths.default_socket_path(), True


def run_connect(args: argparse.Namespace) -> int:
    from sidecar.shared_daemon import bridge

    existing_file("--config", args.config)
    _check_config(args.config)
    sock, default = _socket(args)
    target = bridge.Target(
        socket=sock,
        db=args.db,
        config=args.config,
        idle_exit=args.idle_exit,
        log_level=_log_level(args),
        log_file=args.log_file,
    )
    return bridge.main(target, default_socket=default)


def run_mcp(args: argparse.Namespace) -> int:
    from sidecar.mcp import server as mcp_server

    existing_file("--config", args.config)
    return mcp_server.main(
        mcp_server.Options(
            socket=args.socket,
            db=args.db,
            config=args.config,
            idle_exit=args.idle_exit,
            log_level=_log_level(args),
            log_file=args.log_file,
            directory=args.directory,
            all_projects=args.all_projects,
        )
    )


def run_status(args: argparse.Namespace) -> int:
    from sidecar.cli import ctl

    return ctl.status(_socket(args)[0], as_json=args.json)


def run_stop(args: argparse.Namespace) -> int:
    from sidecar.cli import ctl

    return ctl.stop(_socket(args)[0])


# -- config ------------------------------------------------------------------------------------


def _check_config(config: Path | None) -> None:
    """Load the config files a daemon would, so a broken one is a usage error here (exit 2,
    one line naming the file) rather than a daemon that exits before listening."""
    from sidecar.model.config import ConfigError, load_files

    try:
        load_files(config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def add_config(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser(
        "config", help="show the config files a daemon loads and the effective config"
    )
    config.add_argument("--config", type=Path, help="the workspace config file serve would get")
    config.add_argument("--json", action="store_true", help="{files: [...], config: {...}}")
    config.set_defaults(run=run_config)


def run_config(args: argparse.Namespace) -> int:
    import json

    from sidecar.model.config import ConfigError, load_files, shown

    existing_file("--config", args.config)
    try:
        loaded = load_files(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    files = [{"path": str(p), "loaded": p.is_file()} for p in loaded.files]
    effective = shown(loaded.config)
    if args.json:
        print(json.dumps({"files": files, "config": effective}))
        return 0
    print("config files, later wins:")
    for f in files:
        print(f"  {f['path']} ({'loaded' if f['loaded'] else 'not found'})")
    if loaded.environment:
        print(f"  environment: {', '.join(loaded.environment)}")
    print("effective config (header values redacted):")
    print(json.dumps(effective, indent=2))
    return 0


# -- models ------------------------------------------------------------------------------------


def add_models(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = sub.add_parser("models", help="the model catalog: look a model up, refresh it")
    verbs = models.add_subparsers(dest="verb", metavar="VERB", required=True)
    show = verbs.add_parser("show", help="the limits a daemon would use for PROVIDER/MODEL")
    show.add_argument("model", metavar="PROVIDER/MODEL")
    show.add_argument("--config", type=Path, help="the workspace config file serve would get")
    show.add_argument("--json", action="store_true", help="{model, source, limits, usable}")
    show.set_defaults(run=run_models_show)
    refresh = verbs.add_parser(
        "refresh",
        help="replace the catalog with a models.dev api.json (https://models.dev/api.json)",
    )
    refresh.add_argument("file", type=Path, metavar="FILE")
    refresh.set_defaults(run=run_models_refresh)


def run_models_show(args: argparse.Namespace) -> int:
    import json

    from sidecar.engine.overflow import usable
    from sidecar.model.catalog import lookup_with_source
    from sidecar.model.config import ConfigError, load_files

    existing_file("--config", args.config)
    provider, sep, model = str(args.model).partition("/")
    if not sep or not provider or not model:
        raise UsageError(f"{args.model!r}: give PROVIDER/MODEL, e.g. anthropic/claude-sonnet-4-5")
    try:
        cfg = load_files(args.config).config
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    limit, source = lookup_with_source(provider, model, cfg.models)
    room = usable(limit, cfg.compaction) if limit is not None else None
    if args.json:
        import msgspec

        limits = msgspec.to_builtins(limit) if limit is not None else None
        out = {"model": args.model, "source": source, "limits": limits, "usable": room}
        print(json.dumps(out))
    elif limit is None:
        print(f'{args.model}: unknown (set config "models" for it, or models["*"] as a default)')
    else:
        extra = f", input {limit.input:,}" if limit.input else ""
        print(
            f"{args.model}: context {limit.context:,}, output {limit.output:,}{extra}, "
            f"usable {room:,} (from {source})"
        )
    return 0 if limit is not None else 1


def run_models_refresh(args: argparse.Namespace) -> int:
    from sidecar.model.catalog import CatalogError, refresh

    existing_file("FILE", args.file)
    try:
        target, count = refresh(args.file)
    except CatalogError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {target}: {count} models with a context limit, from {args.file}")
    return 0


# -- demo and replay ---------------------------------------------------------------------------


def add_replay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="replay a bundled real transcript with a small window")
    demo.add_argument(
        "--context", type=positive_int, default=None, help="model context window (tokens)"
    )
    demo.add_argument("--method", choices=["standard", "collapse"], default="standard")
    demo.add_argument("--db", type=Path, help="keep the replayed session in this SQLite file")
    demo.add_argument("--quiet", action="store_true", help="only the final summary lines")
    demo.set_defaults(run=run_replay)

    replay = sub.add_parser("replay", help="replay a transcript JSONL through the daemon")
    replay.add_argument("file", type=Path)
    replay.add_argument(
        "--context", type=positive_int, default=None, help="model context window (tokens)"
    )
    replay.add_argument("--method", choices=["standard", "collapse"], default="standard")
    replay.add_argument(
        "--summarizer",
        choices=["extractive", "openai", "anthropic"],
        default="extractive",
        help="who writes summaries: extractive (offline, default); openai (any "
        "OpenAI-compatible server) and anthropic need --model",
    )
    replay.add_argument("--model", help="summarizer model id")
    replay.add_argument("--base-url", help="summarizer base URL")
    replay.add_argument("--api-key-env", help="environment variable holding the API key")
    replay.add_argument("--db", type=Path, help="keep the replayed session in this SQLite file")
    replay.add_argument("--quiet", action="store_true")
    replay.set_defaults(run=run_replay)


MIN_REPLAY_CONTEXT = 4_096
"""The smallest ``--context`` for demo/replay: the replayed model reserves at least 1,024
tokens for output, and a real session's summary needs room in the rest."""


def run_replay(args: argparse.Namespace) -> int:
    _check_config(None)  # the daemon it starts reads the user config file
    if args.context is not None and args.context < MIN_REPLAY_CONTEXT:
        raise UsageError(
            f"--context {args.context}: too small a window to replay a real session in; give "
            f"at least {MIN_REPLAY_CONTEXT} tokens"
        )
    if getattr(args, "summarizer", "extractive") != "extractive" and not args.model:
        raise UsageError(f"--summarizer {args.summarizer} needs --model (the summary model's id)")
    from sidecar.replay import main as replay_main

    if args.db is not None and not args.db.exists():
        writable_file("--db", args.db)  # an empty file is a new database to the daemon
    elif args.db is not None and not args.db.is_file():
        raise CannotWrite(f"--db {args.db}: not a file")
    return replay_main(args)


# -- sessions, inspect, report, import (sidecar.tools) ------------------------------------------


def add_tools(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from sidecar.tools.cli import COMMANDS, add_commands, dispatch

    add_commands(sub)
    for name in COMMANDS:
        sub.choices[name].set_defaults(run=dispatch)


def add_schema(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schema = sub.add_parser("schema", help="print the protocol's JSON Schema (2020-12)")
    schema.set_defaults(run=run_schema)


def run_schema(args: argparse.Namespace) -> int:
    from sidecar.protocol.schema import print_schema

    return print_schema()


# -- entry point -------------------------------------------------------------------------------

REGISTER: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    add_serve,
    add_shared_daemon,
    add_replay,
    add_tools,
    add_schema,
    add_config,
    add_models,
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Conversation store and context-compaction daemon for coding agents.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for register in REGISTER:
        register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
    if run is None:
        p.print_help()
        return 0
    try:
        return run(args)
    except UsageError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except CannotWrite as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: one line and the shell's status for SIGINT (128 + 2), never a traceback.
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output left (``demo | head``): stop quietly, as `cat` would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
