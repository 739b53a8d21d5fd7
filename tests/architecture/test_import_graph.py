"""The package's import graph, built from the source, has no circle: neither between modules
nor between packages (each module collapsed to its package under ``sidecar``, the Python
client ``sidecar_client`` one more node).

Every ``import`` counts, those under ``TYPE_CHECKING`` and inside functions included: a
circle hidden from the interpreter is still a circle for a reader. A module that imports a
package depends on its ``__init__``; ``from pkg import name`` depends on ``pkg.name`` when
that is a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import ROOT

PACKAGE = ROOT / "sidecar"
CLIENT = ROOT / "clients" / "python" / "sidecar_client"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for top in (PACKAGE, CLIENT):
        for path in top.rglob("*.py"):
            parts = list(path.relative_to(top.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" for a in node.names] + [source]
            for target in targets:
                owner = _owner(target, modules)
                if owner is not None and owner != mod:
                    graph[mod].add(owner)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def package_of(module: str) -> str:
    """``sidecar.engine.ledger`` -> ``sidecar.engine``; ``sidecar_client._client`` ->
    ``sidecar_client``; a module at the top of ``sidecar`` (``__main__``) is its own node."""
    parts = module.split(".")
    if parts[0] != "sidecar":
        return parts[0]
    return ".".join(parts[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        node = out.setdefault(package_of(mod), set())
        node.update(package_of(d) for d in deps if package_of(d) != package_of(mod))
    return out


def test_the_package_has_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_no_circle_between_packages() -> None:
    """Lazy imports count: ``replay`` reading ``tools`` while ``tools`` read ``replay`` was a
    circle no interpreter saw."""
    assert circles(package_graph(import_graph())) == []


def test_the_package_graph_finds_a_lazy_circle() -> None:
    """The checker can fail: a function-level import of ``sidecar_client`` from a package
    the client depends on closes a circle between packages."""
    graph = package_graph(import_graph())
    assert "sidecar.shared_daemon" in graph["sidecar_client"]
    graph["sidecar.shared_daemon"].add("sidecar_client")
    assert circles(graph) != []


def test_only_main_is_loose_at_the_top() -> None:
    """The layout shows the architecture: every module of ``sidecar`` lives in a package,
    besides ``__main__`` (``python -m sidecar``)."""
    loose = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py", "__main__.py"}
    assert loose == set()


def test_the_graph_sees_type_checking_imports_and_finds_a_circle() -> None:
    """The checker itself can fail: a circle closed only under TYPE_CHECKING is found."""
    graph = import_graph()
    assert "sidecar.store.backend" in graph["sidecar.store.store"]
    graph["sidecar.store.backend"].add("sidecar.store.store")
    assert circles(graph) != []


def test_lower_layers_never_import_the_server() -> None:
    """Boundaries: only the server, the CLI and the tools may know the server."""
    graph = import_graph()
    lower = ("sidecar.model", "sidecar.protocol", "sidecar.store", "sidecar.engine")
    bad = {
        m: sorted(d for d in deps if d.startswith("sidecar.server"))
        for m, deps in graph.items()
        if m.startswith(lower)
    }
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_model_layer_imports_only_itself() -> None:
    """``sidecar/model`` is the bottom layer: msgspec Structs, config and the catalog."""
    graph = import_graph()
    bad = {
        m: sorted(d for d in deps if not d.startswith("sidecar.model"))
        for m, deps in graph.items()
        if m.startswith("sidecar.model")
    }
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_ledger_takes_nothing_from_the_extractive_writer() -> None:
    """The ledger reads summaries through their shared vocabulary
    (``summarizers/sections.py``), not through the writer that happens to produce them."""
    deps = import_graph()["sidecar.engine.ledger"]
    assert "sidecar.summarizers.sections" in deps
    assert {"sidecar.summarizers.extractive", "sidecar.summarizers._text"} & deps == set()


def test_status_runs_without_loading_pygls(tmp_path: Path) -> None:
    """``status`` and ``connect`` run on every editor start: they never import the server."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from sidecar.cli import main\n"
        f"main(['status', '--socket', {str(tmp_path / 's.sock')!r}])\n"
        "print('pygls' in sys.modules, 'sidecar.server.protocol' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.stdout.strip().splitlines()[-1] == "False False", done.stderr


def test_every_package_is_in_the_distribution() -> None:
    """``pip install .`` (the README's quick start) ships only the packages pyproject lists."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py")}
    assert found - listed == set()
