"""The clients' method wrappers, generated from the method table.

``python -m sidecar.protocol.clients`` writes ``clients/python/sidecar_client/_methods.py``
and ``clients/typescript/src/methods.ts`` (``--check``: fail instead when they differ, as
``tests/protocol/test_clients_generated.py`` does). Each row with a ``call`` becomes one
wrapper in each client: every field of its params Struct is a parameter (positional as the
row's ``Call`` says, the rest keyword-only in Python, an ``options`` object in TypeScript), and
the row's result type is what it returns. A row whose params are one raw object of its result
type (``message/update``, ``part/update``) echoes it: the stored object comes back typed by
the tag of the one sent. What a table cannot say (spawn, connect, reconnect, the assembled
window) stays hand-written in the clients.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

import msgspec

from sidecar.protocol.methods import REQUESTS, TO_DAEMON, Call, RequestSpec

ROOT = Path(__file__).resolve().parents[2]
PYTHON_OUT = ROOT / "clients" / "python" / "sidecar_client" / "_methods.py"
TS_OUT = ROOT / "clients" / "typescript" / "src" / "methods.ts"

#: Result types the Python client decodes into its own Structs (``sidecar_client._types``).
PY_RESULTS = {"MessagesPage": "MessagesPage", "ContextResult": "ContextResult"}


class Field(msgspec.Struct, frozen=True):
    name: str  # the Python name
    wire: str
    type: Any
    required: bool
    default: Any


def fields(params: type[Any]) -> list[Field]:
    hints = get_type_hints(params, include_extras=False)
    out = []
    for f in msgspec.structs.fields(params):
        required = f.required
        default = None if required or f.default is msgspec.NODEFAULT else f.default
        out.append(Field(f.name, f.encode_name, hints[f.name], required, default))
    return out


def served() -> list[tuple[RequestSpec, Call]]:
    return [(r, r.call) for r in REQUESTS if r.direction == TO_DAEMON and r.call is not None]


def echoes(r: RequestSpec) -> Field | None:
    """The one raw field a row's result echoes (``part`` of ``part/update``), if it has one."""
    fs = fields(r.params)
    if len(fs) == 1 and fs[0].type is msgspec.Raw and r.result is not None:
        return fs[0]
    return None


def tag_field(union: Any) -> str:
    (tag,) = {m.__struct_config__.tag_field for m in get_args(union)}
    return str(tag)


# -- Python ----------------------------------------------------------------------------------


class _PyTypes:
    """Renders Python types as source, collecting what the module must import."""

    def __init__(self) -> None:
        self.imports: dict[str, set[str]] = {}

    def name_of(self, tp: Any) -> str:
        if isinstance(tp, type):
            module, name = tp.__module__, tp.__name__
        else:  # a union alias (``Part``): the name its module binds it to
            module = get_args(tp)[0].__module__
            name = next(n for n, v in vars(sys.modules[module]).items() if v == tp)
        if module == "builtins":
            return name
        if name in PY_RESULTS and module == "sidecar.model.rpc":
            module, name = "sidecar_client._types", PY_RESULTS[name]
        self.imports.setdefault(module, set()).add(name)
        return name

    def render(self, tp: Any, *, arg: bool = False) -> str:
        origin = get_origin(tp)
        if tp is type(None) or tp is None:
            return "None"
        if tp is Any:
            return "Any"
        if origin is Annotated:
            return self.render(get_args(tp)[0], arg=arg)
        if origin in (typing.Union, types.UnionType):
            if all(isinstance(a, type) and issubclass(a, msgspec.Struct) for a in get_args(tp)):
                return self.name_of(tp)  # a tagged union of the model (``Part``)
            return " | ".join(self.render(a, arg=arg) for a in get_args(tp))
        if origin is Literal:
            return f"Literal[{', '.join(repr(a) for a in get_args(tp))}]"
        if origin is list:
            inner = self.render(get_args(tp)[0], arg=arg)
            return f"Sequence[{inner}]" if arg else f"list[{inner}]"
        if origin is dict:
            key, value = (self.render(a, arg=arg) for a in get_args(tp))
            return f"Mapping[{key}, {value}]" if arg else f"dict[{key}, {value}]"
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct) and arg:
            return f"{self.name_of(tp)} | Mapping[str, Any]"
        return self.name_of(tp)


def _py_param(f: Field, types_: _PyTypes, positional: bool) -> str:
    text = f"{f.name}: {types_.render(f.type, arg=True)}"
    if f.required:
        return text
    return f"{text} = {f.default!r}"


def _py_doc(r: RequestSpec, more: str = "") -> list[str]:
    text = f'"""``{r.method}``{": " + r.doc if r.doc else ""}.{" " + more if more else ""}"""'
    return textwrap.wrap(text, 100, initial_indent=" " * 8, subsequent_indent=" " * 8)


def _py_wrapper(r: RequestSpec, call: Call, types_: _PyTypes) -> list[str]:
    doc = _py_doc(r)
    if (echo := echoes(r)) is not None:
        return _py_echo(r, call, echo, types_)
    fs = {f.name: f for f in fields(r.params)}
    first = [fs[n] for n in call.args]
    rest = [f for n, f in fs.items() if n not in call.args]
    params = ["self", *(_py_param(f, types_, True) for f in first), "*"]
    params += [_py_param(f, types_, False) for f in rest]
    params.append("timeout: float | UnsetType | None = UNSET")
    body = "{" + ", ".join(f'"{f.wire}": {f.name}' for f in fs.values()) + "}"
    sent = f"clean_params({body})" if fs else "{}"
    result = "None" if r.result is None else types_.render(r.result)
    returns = result
    if call.unwrap:
        returns = types_.render(get_type_hints(r.result)[call.unwrap])
    lines = [f"    async def {call.name}({', '.join(params)}) -> {returns}:", *doc]
    decode = "None" if r.result is None else result
    got = f'await self._rpc("{r.method}", {sent}, {decode}, timeout)'
    if r.result is None:
        return [*lines, f"        {got}"]
    lines.append(f"        result: {result} = {got}")
    return [*lines, f"        return result{'.' + call.unwrap if call.unwrap else ''}"]


def _py_echo(r: RequestSpec, call: Call, echo: Field, types_: _PyTypes) -> list[str]:
    stored = types_.render(r.result)
    var = f"_{stored}T"
    types_.imports.setdefault("#typevar", set()).add(f'{var} = TypeVar("{var}", bound={stored})')
    tail = "*, timeout: float | UnsetType | None = UNSET"
    name = echo.name
    either = f"{stored} | Mapping[str, Any]"
    known = f"type({name}) if isinstance({name}, msgspec.Struct) else {stored}"
    return [
        "    @overload",
        f"    async def {call.name}(self, {name}: {var}, {tail}) -> {var}: ...",
        "",
        "    @overload",
        f"    async def {call.name}(self, {name}: Mapping[str, Any], {tail}) -> {stored}: ...",
        "",
        f"    async def {call.name}(self, {name}: {either}, {tail}) -> {stored}:",
        *_py_doc(r, "The stored object comes back as the type sent (a mapping: by its tag)."),
        f"        result_type: Any = {known}",
        f'        stored: {stored} = await self._rpc("{r.method}", {{"{echo.wire}": {name}}}, '
        "result_type, timeout)",
        "        return stored",
    ]


def python_source() -> str:
    types_ = _PyTypes()
    methods: list[str] = []
    for r, call in served():
        methods += ["", *_py_wrapper(r, call, types_)]
    typevars = sorted(types_.imports.pop("#typevar", set()))
    imports = [
        f"from {module} import {', '.join(sorted(names))}"
        for module, names in sorted(types_.imports.items())
    ]
    head = [
        '"""Generated: the ``Client``\'s method wrappers, one per row of the method table.',
        "",
        "Written by ``python -m sidecar.protocol.clients`` from ``sidecar/protocol/methods.py``.",
        'Do not edit: change the table and regenerate."""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Mapping, Sequence",
        "from typing import Any, Literal, TypeVar, overload",
        "",
        "import msgspec",
        "from msgspec import UNSET, UnsetType",
        "",
        *imports,
        "",
        *typevars,
        "",
        "",
        "def clean_params(params: Mapping[str, Any]) -> dict[str, Any]:",
        '    """The params without their ``None`` values (left out: the daemon\'s default)."""',
        "    return {k: v for k, v in params.items() if v is not None}",
        "",
        "",
        "class Methods:",
        '    """Each request a client sends, typed: params in, the result decoded out."""',
        "",
        "    async def _rpc(",
        "        self, method: str, params: Any, result: Any, timeout: float | UnsetType | None",
        "    ) -> Any:",
        '        """Send ``method`` and decode its reply into ``result`` (``Client.request``)."""',
        "        raise NotImplementedError",
    ]
    return _ruff("\n".join([*head, *methods]) + "\n")


def _ruff(source: str) -> str:
    """``source`` with its imports sorted and formatted as ``ruff`` would (CI checks both)."""
    name = str(PYTHON_OUT.relative_to(ROOT))
    for step in (["check", "--select", "I", "--fix-only", "--quiet"], ["format"]):
        source = subprocess.run(
            [sys.executable, "-m", "ruff", *step, "--stdin-filename", name, "-"],
            input=source,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return source


# -- TypeScript --------------------------------------------------------------------------------


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(w.capitalize() for w in rest)


def _ts_wrapper(r: RequestSpec, call: Call) -> list[str]:
    m = f'"{r.method}"'
    fs = {f.name: f for f in fields(r.params)}
    lead = [fs[n] for n in (call.ts if call.ts is not None else call.args)]
    rest = [f for f in fs.values() if f not in lead]
    doc = f"  /** `{r.method}`{': ' + r.doc if r.doc else ''}. */"
    name = _camel(call.name)
    if (echo := echoes(r)) is not None:
        stored = f"Extract<ResultOf<{m}>, {{ {tag_field(r.result)}: T[{tag_field(r.result)!r}] }}>"
        stored = stored.replace("'", '"') + " & { id: string }"
        return [
            doc[:-3] + "The stored object: of the same tag as the one sent, with every field"
            " its type has (not the narrowed type sent). */",
            f"  {name}<T extends ResultOf<{m}>>({echo.wire}: T): Promise<{stored}> {{",
            f"    return this.call({m}, {{ {echo.wire} }}) as Promise<{stored}>;",
            "  }",
        ]
    params = [f"{f.wire}{'' if f.required else '?'}: ParamsOf<{m}>[{f.wire!r}]" for f in lead]
    params = [p.replace("'", '"') for p in params]
    sent = [f.wire for f in lead]
    if rest:
        omitted = " | ".join(f'"{f.wire}"' for f in lead)
        shape = f"Omit<ParamsOf<{m}>, {omitted}>" if lead else f"ParamsOf<{m}>"
        optional = all(not f.required for f in rest)
        params.append(f"options: {shape}{' = {}' if optional else ''}")
        sent.append("...options")
    body = "{ " + ", ".join(sent) + " }" if sent else "{}"
    if call.unwrap:
        returns = f"ResultOf<{m}>[{call.unwrap!r}]".replace("'", '"')
        got = f"(await this.call({m}, {body})).{call.unwrap}"
        return [doc, *_ts_signature(f"async {name}", params, returns), f"    return {got};", "  }"]
    returns = f"ResultOf<{m}>"
    got = f"this.call({m}, {body})"
    return [doc, *_ts_signature(name, params, returns), f"    return {got};", "  }"]


def _ts_signature(name: str, params: list[str], returns: str) -> list[str]:
    """A method's first lines, one parameter a line when they do not fit on one."""
    line = f"  {name}({', '.join(params)}): Promise<{returns}> {{"
    if len(line) <= 100:
        return [line]
    return [f"  {name}(", *(f"    {p}," for p in params), f"  ): Promise<{returns}> {{"]


def typescript_source() -> str:
    methods: list[str] = []
    for r, call in served():
        methods += _ts_wrapper(r, call)
    head = [
        "/* Generated by `python -m sidecar.protocol.clients` from the method table",
        " * (sidecar/protocol/methods.py). Do not edit: change the table and regenerate. */",
        'import type { Protocol } from "./protocol";',
        "",
        'type Requests = Protocol["requests"];',
        "",
        "/** Requests a client sends (`session/create`, ...). */",
        "export type ClientRequest = {",
        '  [M in keyof Requests]: Requests[M]["direction"] extends "client->daemon" ? M : never;',
        "}[keyof Requests];",
        'export type ParamsOf<M extends keyof Requests> = Requests[M]["params"];',
        'export type ResultOf<M extends keyof Requests> = Requests[M]["result"];',
        "",
        "/** Each request a client sends, typed: params in, the row's result out. */",
        "export abstract class Methods {",
        "  /** Send a request (`SidecarClient.request`). */",
        "  protected abstract call<M extends ClientRequest>(",
        "    method: M,",
        "    params: ParamsOf<M>,",
        "  ): Promise<ResultOf<M>>;",
        "",
    ]
    return "\n".join([*head, *methods, "}"]) + "\n"


def outputs() -> dict[Path, str]:
    return {PYTHON_OUT: python_source(), TS_OUT: typescript_source()}


def main(argv: list[str]) -> int:
    made = outputs()
    stale = [path for path, text in made.items() if not path.exists() or path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path} is out of date: run python -m sidecar.protocol.clients", file=sys.stderr)
        return 1 if stale else 0
    for path, text in made.items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
