"""The import graph of ``src/`` and ``bench/``: no cycle, and layers in the order docs/architecture.md gives.

Every import counts, at module level or inside a function: a lazy import is still a call that
goes one way. The layer table is read from the architecture document itself, so the document
and the code cannot drift apart without this test failing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
BENCH = ROOT / "bench"
DOC = ROOT / "docs" / "architecture.md"

#: Third-party packages the pure layers never import at module level (they work without them).
HEAVY = ("pyspark", "delta", "deltalake", "psycopg", "py4j")


def _modules(base: Path, package: str | None) -> dict[str, Path]:
    out = {}
    for path in base.rglob("*.py") if package else base.glob("*.py"):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module of ``known`` that module ``name`` (at ``path``) imports, anywhere in it."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
            targets = subs + ([module] if len(subs) < len(node.names) else [])
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _graph(base: Path, package: str | None) -> dict[str, set[str]]:
    known = _modules(base, package)
    return {name: set(_imports(name, path, known)) for name, path in known.items()}


def documented_layers() -> list[list[str]]:
    """The layer table of docs/architecture.md: the fenced block after ``<!-- layers -->``, a
    layer per numbered line (``N  name  modules…  what it is``, lowest first), its modules
    continued on the indented lines below it."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- layers -->\s*```\w*\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no layer table (a fenced block after <!-- layers -->)"
    layers: list[list[str]] = []
    for line in block.group(1).splitlines():
        fields = line.split()
        if fields and fields[0].isdigit():
            layers.append([])
        if layers:
            layers[-1].extend(f for f in fields if re.fullmatch(r"walspark(\.\w+)*", f))
    return layers


def _layer_of(module: str, layers: list[list[str]]) -> int:
    best, where = "", -1
    for i, prefixes in enumerate(layers):
        for p in prefixes:  # the bare package name stands for its __init__ only
            if (module == p or ("." in p and module.startswith(p + "."))) and len(p) > len(best):
                best, where = p, i
    return where


def test_src_has_no_import_cycle() -> None:
    assert _cycles(_graph(SRC, "walspark")) == []


def test_bench_has_no_import_cycle() -> None:
    assert _cycles(_graph(BENCH, None)) == []


def test_every_module_imports_only_its_own_layer_and_those_below() -> None:
    layers = documented_layers()
    graph = _graph(SRC, "walspark")
    unplaced = sorted(m for m in graph if _layer_of(m, layers) < 0)
    assert not unplaced, f"modules in no layer of docs/architecture.md: {unplaced}"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if _layer_of(b, layers) > _layer_of(a, layers))  # fmt: skip
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_the_pure_layer_needs_no_spark_and_no_database() -> None:
    """protocol/ and values/ work alone: no module-level import of Spark, Delta or psycopg."""
    layers = documented_layers()
    for name, path in _modules(SRC, "walspark").items():
        if _layer_of(name, layers) != 0:
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] in HEAVY for n in names), f"{name} imports {names} at module level"


def test_nothing_below_the_data_source_needs_spark() -> None:
    """Files, source, changes and staging (the stager with them) run without Spark or Delta."""
    layers = documented_layers()
    spark = ("pyspark", "delta", "py4j")
    for name, path in _modules(SRC, "walspark").items():
        if _layer_of(name, layers) >= _layer_of("walspark.spark.datasource", layers):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.split(".")[0] in spark for n in names), f"{name} imports {names} at module level"
