"""The house's rules, checked on the source: layers import downwards only, no import cycles, scripts are
modules, the package ships only what it needs, and the product's files speak of the product."""

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "wmspec_jax")

# storage < core (the algorithm, models, detectors, trade-off curves) < lab (experiments) < cli (tools)
STORAGE = {"wmspec_jax.storage", "wmspec_jax.user_cache", "wmspec_jax._lazy"}
RANK = {"storage": 0, "core": 1, "lab": 2, "cli": 3}


def layer(module: str) -> str:
    if module in STORAGE:
        return "storage"
    if module.startswith("wmspec_jax.lab"):
        return "lab"
    if module.startswith("wmspec_jax.cli"):
        return "cli"
    return "core"


def modules() -> dict:
    out = {}
    for directory, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(directory, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


def import_graph() -> dict:
    """module -> the package modules it imports, anywhere in its source (function-local imports too)."""
    mods = modules()

    def resolve(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from pkg import sub`` needs the submodule, not everything the package holds
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                targets = subs or [node.module]
            for t in targets:
                if t.startswith("wmspec_jax") and (r := resolve(t)) and r != mod:
                    graph[mod].add(r)
    return graph


def test_layers_import_downwards_only():
    graph = import_graph()
    upward = sorted((m, t) for m, ts in graph.items() for t in ts if RANK[layer(t)] > RANK[layer(m)])
    assert not upward, "imports from a higher layer: " + ", ".join(f"{m} -> {t}" for m, t in upward)


def test_no_import_cycles():
    graph = import_graph()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_scripts_are_modules_without_path_edits():
    for folder in ("experiments", "benchmarks"):
        assert os.path.isfile(os.path.join(ROOT, folder, "__init__.py"))
        for f in os.listdir(os.path.join(ROOT, folder)):
            if f.endswith(".py"):
                source = open(os.path.join(ROOT, folder, f), encoding="utf-8").read()
                assert "sys.path.insert" not in source and "sys.path.append" not in source, f"{folder}/{f}"


def test_the_package_ships_only_the_default_draft():
    assets = os.path.join(PACKAGE, "assets")
    size = sum(os.path.getsize(os.path.join(assets, f)) for f in os.listdir(assets))
    assert size <= 8 * 2 ** 20, f"package data {size / 2 ** 20:.1f} MiB"
    from wmspec_jax.models import builtin

    assert sorted(os.listdir(assets)) == [builtin.DRAFTS[builtin.DEFAULT_DRAFT]]


# What the product's files must not say: how they were made, or where.
FORBIDDEN = [
    r"\b(this|earlier|later|previous|next|another|third) (developer |work )?sessions?('s?)?\b", r"\bsessions above\b",
    r"\bissues? ?#?\d+\b", r"\bstop \d+\b", r"\bagents?\b", r"\bthis CPU\b", r"\bthis machine's\b",
    r"\breview(ed|ing|er)?\b", r"/work/main\b", r"/tmp/before\b", r"\bwas lent\b", r"\bticket\b",
]
SCANNED = ["README.md", "docs", "wmspec_jax", "experiments", "benchmarks", "tests", "colab", "scripts"]


def product_files():
    for entry in SCANNED:
        path = os.path.join(ROOT, entry)
        if os.path.isfile(path):
            yield path
            continue
        for directory, _, files in os.walk(path):
            if "__pycache__" in directory:
                continue
            for f in files:
                if f.endswith((".py", ".md", ".ipynb", ".sh", ".txt")):
                    yield os.path.join(directory, f)


@pytest.mark.parametrize("pattern", FORBIDDEN)
def test_the_product_speaks_of_the_product(pattern):
    this_file = os.path.abspath(__file__)
    hits = []
    for path in product_files():
        if os.path.abspath(path) == this_file:
            continue
        for number, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            if re.search(pattern, line, flags=re.IGNORECASE):
                hits.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits[:30]) + (f"\n... {len(hits) - 30} more" if len(hits) > 30 else "")
