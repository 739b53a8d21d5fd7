"""What a shell command line does to files, read from the commands ``shell_syntax`` parses.

Agents change files with shell commands as often as with edit tools (``sed -i``, ``cat > f <<EOF``,
``tee``, ``patch``, ``git apply``, ``mv``/``cp``/``rm``, a Python one-off that opens a file for
writing). The ledger must see those writes, so this module reads each simple command's words:
what it reads, writes, runs and applies. It is the one shell parser's face: ``Command``,
``parse`` and ``join`` are ``shell_syntax``'s, named here for its callers.

Pure functions, no I/O. Anything it cannot parse yields fewer facts, never an exception.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from sidecar.toolcalls.shell_syntax import Command as Command
from sidecar.toolcalls.shell_syntax import Redirect as Redirect
from sidecar.toolcalls.shell_syntax import join as join
from sidecar.toolcalls.shell_syntax import parse as parse
from sidecar.toolcalls.shell_syntax import parse_from as parse_from

# -- what commands do ---------------------------------------------------------------------------


@dataclass
class Effects:
    """Files a command line writes and reads, heredoc bodies written to files, programs run."""

    written: list[str] = field(default_factory=list)
    # the subset written by a redirection: the shell truncates the target before the command
    # runs, so these are written even when the command then fails
    redirected: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)
    # file -> text written into it by a heredoc (``cat > f <<EOF``): lets the ledger learn what
    # a script or patch created earlier will touch when it is run / applied later.
    bodies: dict[str, str] = field(default_factory=dict)
    # (file, directory it ran in): ``python f.py``, ``bash f.sh``; ``git apply f``, ``patch < f``
    scripts_run: list[tuple[str, str]] = field(default_factory=list)
    patches_applied: list[tuple[str, str]] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)

    def _add(self, bucket: list[str], path: str) -> None:
        if path and path not in bucket:
            bucket.append(path)

    def _ran(self, bucket: list[tuple[str, str]], cmd: Command, path: str) -> None:
        if path and (path, cmd.cwd) not in bucket:
            bucket.append((path, cmd.cwd))


_NOT_FILES = re.compile(r"^(?:/dev/|/proc/|&|-$)|[$`*?\[]")  # devices, variables, globs
READERS = frozenset({"cat", "head", "tail", "less", "more", "nl", "bat", "batcat", "view"})
INTERPRETERS = frozenset(
    {"python", "python3", "python2", "node", "bash", "sh", "zsh", "ruby", "perl", "deno", "bun"}
)
_PY_VERSION = re.compile(r"^python\d+(?:\.\d+)*$")


def is_interpreter(program: str) -> bool:
    """``python``, ``node``, ``python3.11``...: a program that runs the script it is given."""
    return program in INTERPRETERS or bool(_PY_VERSION.match(program))


# Writes inside scripts: open('f', 'w'), Path('f').write_text(...), fs.writeFileSync('f', ...).
_SCRIPT_WRITES = (
    re.compile(r"""\bopen\(\s*(?:r|f)?(['"])([^'"\n]+)\1\s*,\s*(?:mode\s*=\s*)?['"][wax+]"""),
    re.compile(r"""\bPath\(\s*(?:r|f)?(['"])([^'"\n]+)\1\s*\)\s*\.\s*write_(?:text|bytes)\b"""),
    re.compile(
        r"""\b(?:fs\.)?(?:writeFileSync|writeFile|appendFileSync|appendFile)\(\s*(['"`])([^'"`\n]+)\1"""
    ),
)
_DIFF_FILE = re.compile(
    r"^\*\*\* (?:(?:Add|Update|Delete) File|Move to): (.+?)\s*$"
    r"|^\+\+\+ (?:[ab]/)?(.+?)(?:\t.*)?\s*$",
    re.M,
)


_PATCHED = re.compile(
    r"^(?:patching file '?([^'\n]+?)'?|Applied patch (?:to )?'?([^'\n]+?)'? cleanly\.?"
    r"|Applied patch (?:to )?'?([^'\n]+?)'? with conflicts\.?)\s*$",
    re.M,
)


def patched_files(output: str) -> list[str]:
    """Files ``patch`` or ``git apply -v`` says it changed ("patching file a.py",
    "Applied patch a.py cleanly.")."""
    out: list[str] = []
    for m in _PATCHED.finditer(output):
        path = next(g for g in m.groups() if g is not None).strip()
        if path and path not in out:
            out.append(path)
    return out


def diff_files(text: str) -> list[str]:
    """Target files named by a unified diff or an apply_patch envelope."""
    out: list[str] = []
    for m in _DIFF_FILE.finditer(text):
        path = (m.group(1) or m.group(2) or "").strip()
        if path and path != "/dev/null" and path not in out:
            out.append(path)
    return out


def script_writes(text: str) -> list[str]:
    """Literal file names a Python/JS snippet opens for writing."""
    out: list[str] = []
    for pattern in _SCRIPT_WRITES:
        for m in pattern.finditer(text):
            path = m.group(2).strip()
            if path and path not in out and "{" not in path:
                out.append(path)
    return out


def _file(cmd: Command, word: str) -> str:
    """``word`` as a path, joined to the command's ``cd`` directory; "" when not a file."""
    if not word or _NOT_FILES.search(word) or word in (".", ".."):
        return ""
    return join(cmd.cwd, word) if cmd.cwd else word


def analyse(script: str) -> Effects:
    """What ``script`` does to files (best effort; never raises)."""
    fx = Effects()
    try:
        commands = parse(script)
    except (RecursionError, IndexError, ValueError):
        return fx
    fx.commands = list(commands)
    _effects(fx, commands, depth=0)
    return fx


def _effects(fx: Effects, commands: list[Command], depth: int) -> None:
    for i, cmd in enumerate(commands):
        _redirects(fx, cmd)
        _command(fx, cmd)
        source = commands[i - 1] if cmd.piped and i > 0 else None
        for inner, found in _started_commands(cmd, source):
            _command(fx, inner)  # sed -i {} / ed {}: the files found are what it writes
            _found(fx, found)
        script = _nested_script(cmd)
        if script and depth < _MAX_NESTING:
            nested = [_moved(c, cmd.cwd) for c in parse(script)]
            fx.commands.extend(nested)
            _effects(fx, nested, depth + 1)


_MAX_NESTING = 4
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "su"})
FOUND = "{}"  # stands for the files ``find -exec`` / ``xargs`` hand to the command they start


def _moved(cmd: Command, cwd: str) -> Command:
    """``cmd`` of a nested script, its directory seen from the outer command's."""
    if cwd:
        cmd.cwd = join(cwd, cmd.cwd) if cmd.cwd else cwd
    return cmd


def _nested_script(cmd: Command) -> str:
    """The script of ``bash -c "..."`` (``sh -lc``, ``su -c``, ``eval "..."``): "" when none."""
    argv = cmd.argv
    if cmd.program == "eval":
        return " ".join(argv[1:])
    if cmd.program not in SHELLS:
        return ""
    for i, w in enumerate(argv[1:-1], 1):
        if w.startswith("-") and not w.startswith("--") and w.endswith("c"):
            return argv[i + 1]
    return ""


def _started_commands(cmd: Command, source: Command | None) -> list[tuple[Command, str]]:
    """Commands another one starts on files it finds: ``find ... -exec sed -i ... {} \\;`` and
    ``... | xargs sed -i ...``; each with what the files found are ("src/**/*.py")."""
    argv = cmd.argv
    out: list[tuple[Command, str]] = []
    if cmd.program == "find":
        found = _find_files(cmd)
        if "-delete" in argv:
            out.append((Command(words=["rm", FOUND], cwd=cmd.cwd), found))
        i = 0
        while i < len(argv):
            if argv[i] in ("-exec", "-execdir", "-ok", "-okdir"):
                j = i + 1
                while j < len(argv) and argv[j] not in (";", "+"):
                    j += 1
                out.append((Command(words=argv[i + 1 : j], cwd=cmd.cwd), found))
                i = j
            i += 1
    elif cmd.program == "xargs":
        words, placeholder = _xargs_command(argv)
        if words:
            if placeholder:
                words = [w.replace(placeholder, FOUND) for w in words]
            else:
                words = [*words, FOUND]
            found = _listed_files(source) if source is not None else ""
            out.append((Command(words=words, cwd=cmd.cwd), found or "(files given to xargs)"))
    return out


_XARGS_VALUE = frozenset({"-n", "-L", "-P", "-s", "-d", "-E", "-a", "--max-args", "--delimiter"})


def _xargs_command(argv: list[str]) -> tuple[list[str], str]:
    """The command ``xargs`` starts and its replace string (``-I {}``)."""
    placeholder = ""
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        w = argv[i]
        if w == "-I" and i + 1 < len(argv):
            placeholder = argv[i + 1]
            i += 2
            continue
        if w.startswith("-I") and len(w) > 2:
            placeholder = w[2:]
        elif w in _XARGS_VALUE:
            i += 1
        i += 1
    return argv[i:], placeholder


def _find_files(cmd: Command) -> str:
    """What ``find ROOT -name PATTERN`` finds, as a glob: ``ROOT/**/PATTERN``."""
    argv = cmd.argv
    roots: list[str] = []
    for w in argv[1:]:
        if w.startswith("-") or w in ("(", "!", "\\("):
            break
        roots.append(w)
    root = join(cmd.cwd, roots[0]) if roots else (cmd.cwd or ".")
    name = ""
    for flag in ("-name", "-iname", "-path", "-ipath", "-wholename"):
        if flag in argv[:-1]:
            name = argv[argv.index(flag) + 1]
            break
    tail = name if flag in ("-name", "-iname") or not name else name.lstrip("./*")
    base = "" if root in (".", "./") else (root.rstrip("/") or "/")
    return posixpath.join(base, "**", tail) if tail else posixpath.join(base, "**")


def _listed_files(source: Command) -> str:
    """The files the command before ``| xargs`` lists, as well as it can be told."""
    if source.program == "find":
        return _find_files(source)
    argv = source.argv
    if source.program in ("grep", "egrep", "rg", "ag", "git"):
        ops = [w for w in argv[1:] if not w.startswith("-")]
        if source.program == "git" and ops[:1] == ["grep"]:
            ops = ops[1:]
        paths = ops[1:] if len(ops) > 1 else []
        root = join(source.cwd, paths[0]) if paths else (source.cwd or ".")
        pattern = ops[0] if ops else ""
        base = "" if root in (".", "./") else root.rstrip("/") + "/"
        return f"{base}** (files containing {pattern!r})" if pattern else ""
    if source.program in ("ls", "echo", "printf", "cat"):
        return f"(files listed by `{source.text[:60]}`)"
    return ""


def _found(fx: Effects, found: str) -> None:
    """Put what the started command's ``{}`` stands for in place of it."""
    for bucket in (fx.written, fx.read):
        for i, path in enumerate(bucket):
            if path == FOUND or path.endswith("/" + FOUND):
                bucket[i] = found
        deduped = list(dict.fromkeys(bucket))
        bucket[:] = deduped


def _redirects(fx: Effects, cmd: Command) -> None:
    heredoc = next((r.body for r in cmd.redirects if r.op in ("<<", "<<-") and r.body), "")
    herestring = next((r.target for r in cmd.redirects if r.op == "<<<"), "")
    for r in cmd.redirects:
        if r.op in (">", ">>", ">|", "&>", "&>>", "<>"):
            path = _file(cmd, r.target)
            if path:
                fx._add(fx.written, path)
                fx._add(fx.redirected, path)
                if heredoc and cmd.program in ("cat", "tee", ""):
                    fx.bodies[path] = heredoc
        elif r.op == "<":
            path = _file(cmd, r.target)
            if path and cmd.program in ("patch",):
                fx._ran(fx.patches_applied, cmd, path)
            elif path and is_interpreter(cmd.program):
                fx._ran(fx.scripts_run, cmd, path)
    _inline_writes(fx, cmd, heredoc, herestring)


def _inline_writes(fx: Effects, cmd: Command, heredoc: str, herestring: str) -> None:
    """Files written by code given inline: a snippet fed to an interpreter on stdin
    (python - <<EOF ... EOF) or with -c / -e, a diff fed to patch or git apply."""
    prog = cmd.program
    if is_interpreter(prog):
        code = heredoc or herestring
        argv = cmd.argv
        for flag in ("-c", "-e", "--eval"):
            if flag in argv[1:-1]:
                code += "\n" + argv[argv.index(flag) + 1]
        for path in script_writes(code):
            fx._add(fx.written, _file(cmd, path) or path)
    if prog in ("patch", "apply_patch", "applypatch") and heredoc:
        for path in diff_files(heredoc):
            fx._add(fx.written, _file(cmd, path) or path)
    if prog == "git" and "apply" in cmd.argv and heredoc:
        for path in diff_files(heredoc):
            fx._add(fx.written, _file(cmd, path) or path)


def _operands(argv: list[str], with_value: frozenset[str] = frozenset()) -> list[str]:
    """Non-option words after the program (``--`` ends options; ``with_value`` take one arg)."""
    out: list[str] = []
    skip = False
    dashdash = False
    for w in argv[1:]:
        if skip:
            skip = False
            continue
        if dashdash:
            out.append(w)
        elif w == "--":
            dashdash = True
        elif w.startswith("-") and len(w) > 1:
            if w in with_value:
                skip = True
        elif w:  # an empty word ("sed -i '' ...") is no operand
            out.append(w)
    return out


def _command(fx: Effects, cmd: Command) -> None:
    argv = cmd.argv
    prog = cmd.program
    if not argv:
        return
    if prog == "tee":
        for w in _operands(argv):
            fx._add(fx.written, _file(cmd, w))
    elif in_place(cmd):
        _sed(fx, cmd, fx.written)
    elif prog == "sed":
        _sed(fx, cmd, fx.read)
    elif prog in READERS:
        for w in _operands(argv, frozenset({"-n", "-c", "--lines", "--bytes"})):
            if not w.lstrip("+-").isdigit():
                fx._add(fx.read, _file(cmd, w))
    elif prog in ("touch", "rm", "unlink", "truncate", "shred"):
        for w in _operands(argv, frozenset({"-s", "--size", "-d", "-t", "-r"})):
            fx._add(fx.written, _file(cmd, w))
    elif prog in ("mv", "cp", "install", "rsync", "ln"):
        ops = _operands(argv, frozenset({"-t", "--target-directory", "-S", "-m", "-o", "-g"}))
        if len(ops) >= 2:
            if prog == "mv":
                for w in ops[:-1]:
                    fx._add(fx.written, _file(cmd, w))
            fx._add(fx.written, _file(cmd, ops[-1]))
    elif prog == "dd":
        for w in argv[1:]:
            if w.startswith("of="):
                fx._add(fx.written, _file(cmd, w[3:]))
    elif prog == "patch":
        _patch(fx, cmd, argv)
    elif prog == "git":
        _git(fx, cmd, argv)
    else:
        _program(fx, cmd)


def _program(fx: Effects, cmd: Command) -> None:
    """Programs that write the files they are given (``ed``, formatters) and scripts run."""
    argv = cmd.argv
    prog = cmd.program
    if prog in ("ed", "ex"):
        heredoc = next((r.body for r in cmd.redirects if r.op in ("<<", "<<-")), None)
        if heredoc is None or re.search(r"^\s*(?:w|wq|x)\b", heredoc, re.M):
            for w in _operands(argv, frozenset({"-p"})):
                fx._add(fx.written, _file(cmd, w))
    elif (formatted := formatter_files(argv)) is not None:
        for w in formatted:
            fx._add(fx.written, _file(cmd, w))
    elif is_interpreter(prog):
        ops = _operands(argv, frozenset({"-m", "-c", "-e", "-W", "-X", "--eval", "-r"}))
        if "-m" in argv:
            i = argv.index("-m")
            formatted = formatter_files(argv[i + 1 :]) if i + 1 < len(argv) else None
            for w in formatted or ():  # python -m black f.py
                fx._add(fx.written, _file(cmd, w))
            return
        if "-c" in argv or "-e" in argv:
            return
        if ops:
            fx._ran(fx.scripts_run, cmd, _file(cmd, ops[0]))


def in_place(cmd: Command) -> bool:
    """``sed -i`` / ``perl -pi`` / ``gawk -i inplace``: the files named are edited, not only
    read."""
    prog = cmd.program
    argv = cmd.argv
    if prog in ("awk", "gawk"):
        return any(
            w in ("-i", "--include") and argv[i + 1 : i + 2] == ["inplace"]
            for i, w in enumerate(argv[:-1])
        ) or any(w in ("-iinplace", "--include=inplace") for w in argv)
    return prog in ("sed", "perl") and any(
        w.startswith("-i") or w == "--in-place" or (prog == "perl" and re.match(r"^-\w*i", w))
        for w in argv[1:]
    )


def _sed(fx: Effects, cmd: Command, into: list[str]) -> None:
    """sed's (perl's, awk's) file operands: the first is the script unless -e or -f gave it
    (awk's ``-i inplace`` names a library, not a file)."""
    argv = cmd.argv
    if cmd.program in ("awk", "gawk"):
        argv = [w for i, w in enumerate(argv) if w != "inplace" or argv[i - 1] != "-i"]
        argv = [w for w in argv if w not in ("-i", "-iinplace", "--include=inplace")]
    ops = _operands(argv, frozenset({"-e", "-f", "--expression", "--file", "-v", "-F"}))
    has_script_flag = any(w in ("-e", "--expression", "-f", "--file") for w in argv[1:])
    for w in ops if has_script_flag else ops[1:]:
        fx._add(into, _file(cmd, w))


# Formatters and fixers that rewrite the files they are given, with the flag that makes them
# write (None: they write unless told only to check) and the flags that make them only check.
_FORMATTERS: dict[str, tuple[frozenset[str] | None, frozenset[str]]] = {
    "black": (None, frozenset({"--check", "--diff"})),
    "isort": (None, frozenset({"--check", "--check-only", "-c", "--diff"})),
    "autopep8": (frozenset({"-i", "--in-place"}), frozenset()),
    "yapf": (frozenset({"-i", "--in-place"}), frozenset()),
    "autoflake": (frozenset({"-i", "--in-place"}), frozenset()),
    "prettier": (frozenset({"--write", "-w"}), frozenset({"--check", "-c"})),
    "eslint": (frozenset({"--fix"}), frozenset()),
    "gofmt": (frozenset({"-w"}), frozenset()),
    "goimports": (frozenset({"-w"}), frozenset()),
    "rustfmt": (None, frozenset({"--check"})),
    "clang-format": (frozenset({"-i"}), frozenset()),
    "shfmt": (frozenset({"-w", "--write"}), frozenset()),
    "stylua": (None, frozenset({"--check", "-c"})),
    "biome": (frozenset({"--write", "--apply", "--fix"}), frozenset()),
}
_FORMATTER_VALUE = frozenset({"--config", "-c", "--line-length", "-l", "--target-version", "-t"})
# Runners that start the formatter: "npx prettier", "uv run black", "poetry run ruff".
_LAUNCHERS = frozenset({"npx", "bunx", "pnpx", "uvx", "pipx", "uv", "poetry", "pipenv", "pnpm"})


def formatter_files(argv: list[str]) -> list[str] | None:
    """The operands a formatter rewrites (``black f.py``, ``ruff check --fix f.py``, ``ruff
    format f.py``, ``prettier --write f``, ``gofmt -w f``); ``None`` when ``argv`` runs no
    formatter, ``[]`` when it only checks."""
    while argv and posixpath.basename(argv[0]) in _LAUNCHERS:
        argv = [w for w in argv[1:] if w not in ("run", "exec", "dlx", "x", "tool")]
    if not argv:
        return None
    prog = posixpath.basename(argv[0])
    flags = set(argv[1:])
    if prog == "ruff":
        words = [w for w in argv[1:] if not w.startswith("-")]
        sub = words[0] if words and words[0] in ("check", "format") else ""
        writes = (sub == "format" and not flags & {"--check", "--diff"}) or (
            sub in ("check", "") and bool(flags & {"--fix", "--fix-only"}) and "--diff" not in flags
        )
        ops = _operands(argv, _FORMATTER_VALUE)
        return [w for w in (ops[1:] if sub else ops)] if writes else []
    if prog not in _FORMATTERS:
        return None
    needs, checks = _FORMATTERS[prog]
    if flags & checks or (needs is not None and not flags & needs):
        return []
    ops = _operands(argv, _FORMATTER_VALUE)
    return [w for w in ops if w != "."]


def _patch(fx: Effects, cmd: Command, argv: list[str]) -> None:
    for flag in ("-i", "--input"):
        if flag in argv[:-1]:
            fx._ran(fx.patches_applied, cmd, _file(cmd, argv[argv.index(flag) + 1]))
    ops = _operands(argv, frozenset({"-p", "-i", "--input", "-d", "-o", "-r", "-F", "-B"}))
    if ops:  # patch [options] [originalfile [patchfile]]
        fx._add(fx.written, _file(cmd, ops[0]))


_GIT_OPTS_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree"})


def _git(fx: Effects, cmd: Command, argv: list[str]) -> None:
    rest = argv[1:]
    while rest and rest[0].startswith("-"):  # global options: git -C dir apply ...
        rest = rest[2:] if rest[0] in _GIT_OPTS_WITH_VALUE else rest[1:]
    if not rest:
        return
    sub, args = rest[0], ["git-" + rest[0], *rest[1:]]
    if sub == "apply" or sub == "am":
        if "--check" in args or "--stat" in args:
            return
        for w in _operands(args, frozenset({"-p", "--directory", "--exclude", "--include"})):
            fx._ran(fx.patches_applied, cmd, _file(cmd, w))
    elif sub in ("checkout", "restore"):
        if "--" in args:
            files = args[args.index("--") + 1 :]
        elif sub == "restore":
            files = _operands(args, frozenset({"-s", "--source"}))
        else:
            return  # "git checkout X" is a branch switch as often as a file restore
        for w in files:
            fx._add(fx.written, _file(cmd, w) if w != "." else (cmd.cwd or "."))
    elif sub in ("rm", "mv"):
        ops = _operands(args)
        for w in ops:
            fx._add(fx.written, _file(cmd, w))


class Bodies:
    """The text of files the session wrote (heredocs, write tools), so that a script run or a
    patch applied later is known to write what it names."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def remember(self, path: str, text: str) -> None:
        self.texts[path] = text

    def find(self, path: str) -> str | None:
        """The known text of ``path``: same path, or the one file whose path ends like it
        (``fix.py`` run from an unknown directory, written as ``/testbed/fix.py``)."""
        if path in self.texts:
            return self.texts[path]
        tail = "/" + path.lstrip("./")
        found = [k for k in self.texts if k.endswith(tail) or path.endswith("/" + k.lstrip("./"))]
        return self.texts[found[0]] if len(found) == 1 else None

    def writes(self, fx: Effects, output: str) -> list[str]:
        """The files a command line writes: its own writes, those its output reports patched,
        and those a known script or patch it runs names (an unknown patch is named itself)."""
        written = list(fx.written)
        self.texts.update(fx.bodies)
        reported = patched_files(output) if fx.patches_applied else []
        written += reported
        for script, cwd in fx.scripts_run + fx.patches_applied:
            known = self.find(script)
            if known is None:
                if (script, cwd) in fx.patches_applied and not reported:
                    written.append(f"{script} (applied patch)")
                continue
            # paths inside a script or patch are relative to where it runs, not where it lies
            for target in script_writes(known) + diff_files(known):
                written.append(join(cwd, target))
        return list(dict.fromkeys(written))
