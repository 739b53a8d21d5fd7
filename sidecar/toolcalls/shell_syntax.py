"""A small POSIX-shell lexer and parser: a command line as the simple commands it runs.

Quotes, escapes, ``$(...)``/backticks kept inside words, comments, heredocs, redirections,
pipelines and ``&&``/``||``/``;`` lists, and each command's working directory as ``cd`` left
it. Not ``shlex.split`` on the whole line: that loses the operators and the heredoc bodies, and
fails outright on the unbalanced quotes real transcripts contain. ``shell`` reads what the
commands do to files from this.

Pure functions, no I/O. Anything it cannot parse yields fewer commands, never an exception.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

# -- lexing -------------------------------------------------------------------------------------

_OPERATORS = ("&&", "||", ";;", "|&", ";", "|", "&", "(", ")", "\n")
_REDIR = re.compile(r"(\d*)(&>>|&>|>>|>\||>&|<<<|<<-|<<|<&|<>|>|<)")


@dataclass
class Redirect:
    op: str  # ">", ">>", "<", "<<", ...
    fd: str  # "" (default), "1", "2", ...
    target: str  # the word after the operator (a heredoc's delimiter for "<<")
    body: str = ""  # a heredoc's text


@dataclass
class Command:
    """One simple command: its words, redirections, source text and the directory it runs in."""

    words: list[str]
    redirects: list[Redirect] = field(default_factory=list)
    text: str = ""
    cwd: str = ""  # from a preceding ``cd`` in the same line ("" = unknown / session dir)
    piped: bool = False  # its input is the previous command's output (``a | b``)

    @property
    def program(self) -> str:
        """The command name without directories, env assignments, ``sudo``/``env`` and the like."""
        words = self.argv
        return posixpath.basename(words[0]) if words else ""

    @property
    def argv(self) -> list[str]:
        words = list(self.words)
        while words and (_ASSIGN.match(words[0]) or words[0] in _PREFIXES):
            words.pop(0)
        return words


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Words before the real command: wrappers and the keywords that open a compound command.
_PREFIXES = frozenset(
    {
        "sudo",
        "env",
        "command",
        "exec",
        "time",
        "nohup",
        "do",
        "then",
        "else",
        "elif",
        "if",
        "while",
        "until",
        "!",
        "{",
    }
)


@dataclass
class _Tok:
    kind: str  # "word" | "op" | "redir"
    value: str
    start: int
    end: int
    fd: str = ""


def _read_word(s: str, i: int) -> tuple[str, int]:
    """One shell word starting at ``i``: quotes removed, ``$(...)``/backticks kept verbatim."""
    out: list[str] = []
    n = len(s)
    while i < n:
        c = s[i]
        if c in " \t\n;&|()<>":
            # "<(" / ">(" process substitution is part of a word
            if c in "<>" and i + 1 < n and s[i + 1] == "(" and out:
                pass
            else:
                break
        if c == "\\":
            if i + 1 < n and s[i + 1] != "\n":
                out.append(s[i + 1])
            i += 2
            continue
        if c == "'" or s.startswith("$'", i):  # '...' and $'...' (ANSI-C): the text inside
            start = i + 1 if c == "'" else i + 2
            j = s.find("'", start)
            j = n if j < 0 else j
            out.append(s[start:j])
            i = j + 1
            continue
        if c == '"':
            i = _read_double_quoted(s, i + 1, out)
            continue
        if c == "$" and s.startswith("$(", i):
            j = _skip_parens(s, i + 1)
            out.append(s[i:j])
            i = j
            continue
        if c == "`":
            j = s.find("`", i + 1)
            j = n if j < 0 else j
            out.append(s[i : j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), i


def _read_double_quoted(s: str, i: int, out: list[str]) -> int:
    """The inside of ``"..."`` from ``i`` onto ``out`` (``\\"`` and the like unescaped,
    ``$(...)`` kept verbatim); the index after the closing quote."""
    n = len(s)
    while i < n and s[i] != '"':
        if s[i] == "\\" and i + 1 < n and s[i + 1] in '"\\$`':
            out.append(s[i + 1])
            i += 2
            continue
        if s[i] == "$" and s.startswith("$(", i):
            j = _skip_parens(s, i + 1)
            out.append(s[i:j])
            i = j
            continue
        out.append(s[i])
        i += 1
    return i + 1


def _skip_parens(s: str, i: int) -> int:
    """Index after the ``)`` matching the ``(`` at ``i`` (quotes respected)."""
    depth = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c in "'\"":
            j = s.find(c, i + 1)
            i = n if j < 0 else j
        elif c == "\\":
            i += 1
        i += 1
    return n


def _tokens(s: str) -> Iterator[_Tok]:
    i, n = 0, len(s)
    at_word_start = True
    while i < n:
        c = s[i]
        if c in " \t":
            i += 1
            at_word_start = True
            continue
        if c == "\\" and i + 1 < n and s[i + 1] == "\n":  # line continuation
            i += 2
            continue
        if c == "#" and at_word_start:
            j = s.find("\n", i)
            i = n if j < 0 else j
            continue
        m = _REDIR.match(s, i)
        if m:  # tokens start here, so "2>" is a redirection and "a2>" never reaches this
            op = m.group(2)
            if not (op in ("<", ">") and s.startswith("(", m.end())):  # not <( ) / >( )
                yield _Tok("redir", op, i, m.end(), fd=m.group(1))
                i = m.end()
                at_word_start = True
                continue
        op_found = next((op for op in _OPERATORS if s.startswith(op, i)), None)
        if op_found is not None:
            yield _Tok("op", op_found, i, i + len(op_found))
            i += len(op_found)
            at_word_start = True
            continue
        word, j = _read_word(s, i)
        if j == i:  # a lone character the word reader refuses: skip it
            j = i + 1
        yield _Tok("word", word, i, j)
        i = j
        at_word_start = False


def parse(script: str) -> list[Command]:
    """The simple commands of ``script`` in order, heredoc bodies attached, ``cd`` tracked.

    A ``cd DIR`` applies to the commands after it in the same line (``cd d && make``,
    ``cd d; make``); inside ``( ... )`` it ends with the group.
    """
    commands: list[Command] = []
    pending_heredocs: list[Redirect] = []
    current = Command(words=[])
    start = -1
    cwd_stack: list[str] = [""]
    toks = _tokens(script)
    end = 0
    for tok in toks:
        if tok.kind == "word":
            if start < 0:
                start = tok.start
            current.words.append(tok.value)
            end = tok.end
            continue
        if tok.kind == "redir":
            if start < 0:
                start = tok.start
            target = next(toks, None)
            if target is None or target.kind != "word":
                continue
            end = target.end
            r = Redirect(op=tok.value, fd=tok.fd, target=target.value)
            current.redirects.append(r)
            if tok.value in ("<<", "<<-"):
                pending_heredocs.append(r)
            continue
        # an operator ends the simple command
        if current.words or current.redirects:
            current.text = script[start:end]
            current.cwd = cwd_stack[-1]
            _apply_cd(current, cwd_stack)
            commands.append(current)
        current, start = Command(words=[], piped=tok.value in ("|", "|&")), -1
        if tok.value == "(":
            cwd_stack.append(cwd_stack[-1])
        elif tok.value == ")" and len(cwd_stack) > 1:
            cwd_stack.pop()
        if tok.value == "\n" and pending_heredocs:
            # Heredoc bodies start on the next line; consume them and restart lexing after.
            pos = tok.end
            for r in pending_heredocs:
                pos = _heredoc(script, pos, r)
            pending_heredocs = []
            rest = parse_from(script, pos, cwd_stack[-1])
            commands.extend(rest)
            return commands
    if current.words or current.redirects:
        current.text = script[start:end]
        current.cwd = cwd_stack[-1]
        commands.append(current)
    if pending_heredocs:  # a heredoc with its body after the last operator
        pos = len(script)
        for r in pending_heredocs:
            pos = _heredoc(script, pos, r)
    return commands


def parse_from(script: str, pos: int, cwd: str) -> list[Command]:
    """``parse`` of ``script[pos:]`` with the working directory ``cwd`` carried over."""
    rest = script[pos:]
    if not rest.strip():
        return []
    out = parse(rest)
    if cwd:
        for cmd in out:
            cmd.cwd = join(cwd, cmd.cwd) if cmd.cwd else cwd
    return out


def _heredoc(script: str, pos: int, r: Redirect) -> int:
    """Read the heredoc body for ``r`` from ``pos``; return the index after its delimiter line."""
    delim = r.target
    strip_tabs = r.op == "<<-"
    lines: list[str] = []
    i = pos
    n = len(script)
    while i < n:
        j = script.find("\n", i)
        line = script[i:] if j < 0 else script[i:j]
        nxt = n if j < 0 else j + 1
        check = line.lstrip("\t") if strip_tabs else line
        if check.rstrip() == delim:
            r.body = "\n".join(lines)
            return nxt
        lines.append(check)
        i = nxt
    r.body = "\n".join(lines)
    return n


def _apply_cd(cmd: Command, cwd_stack: list[str]) -> None:
    argv = cmd.argv
    if not argv or argv[0] not in ("cd", "pushd"):
        return
    args = [a for a in argv[1:] if not a.startswith("-")]
    if not args or "$" in args[0] or args[0].startswith("~"):
        cwd_stack[-1] = ""  # unknown from here on
        return
    cwd_stack[-1] = join(cwd_stack[-1], args[0])


def join(cwd: str, path: str) -> str:
    """``path`` as seen from directory ``cwd`` ("" = unknown: ``path`` as written)."""
    if not path:
        return path
    slash = "/" if path.endswith("/") and path != "/" else ""  # "dir/" stays a directory
    if not cwd or path.startswith("/") or path.startswith("~"):
        return posixpath.normpath(path) + slash
    return posixpath.normpath(posixpath.join(cwd, path)) + slash
