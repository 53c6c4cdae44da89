"""The house's rules, checked on the source: layers import downwards only, no import cycles, modules and
functions stay small, scripts are modules and thin flag shells, the package ships only what it needs, and the
product's files speak of the product."""

import ast
import collections
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "wmspec_jax")

# storage < core (the algorithm, models, detectors, trade-off curves) < lines (text lines: read, scored)
# < lab (experiments) < cli (tools)
STORAGE = {"wmspec_jax.storage", "wmspec_jax.user_cache", "wmspec_jax._lazy"}
RANK = {"storage": 0, "core": 1, "lines": 2, "lab": 3, "cli": 4}


def layer(module: str) -> str:
    if module in STORAGE:
        return "storage"
    if module.startswith("wmspec_jax.lines"):
        return "lines"
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


def arrows_back_into(package: str, graph: dict) -> list:
    """(module in ``package``, module outside it that it imports, the ``package`` modules that one reaches):
    each a loop through ``package`` that the module-level cycle check does not see, since the way back
    may end at another module of the package (models.pairs -> sharding -> models.partitioning)."""
    def inside(m):
        return m == package or m.startswith(package + ".")

    found = []
    for mod in sorted(m for m in graph if inside(m)):
        for out in sorted(t for t in graph[mod] if not inside(t)):
            seen, todo = {out}, [out]
            while todo:  # everything ``out`` imports, directly or not, without walking inside the package
                for t in graph[todo.pop()] - seen:
                    seen.add(t)
                    if not inside(t):
                        todo.append(t)
            back = sorted(t for t in seen if inside(t))
            if back:
                found.append((mod, out, back))
    return found


def test_the_models_import_nothing_that_imports_the_models():
    # The models sit below the modules that use them (the mesh helpers in wmspec_jax.sharding, the
    # decoding loop, the lab): a models module importing one of those, which imports the models in turn,
    # ties the two together, so neither can be loaded, tested or changed without the other.
    toy = {"wmspec_jax.models.pairs": {"wmspec_jax.sharding", "wmspec_jax.lm"},
           "wmspec_jax.sharding": {"wmspec_jax.models.partitioning"}, "wmspec_jax.lm": set(),
           "wmspec_jax.models.partitioning": set()}
    assert arrows_back_into("wmspec_jax.models", toy) == [
        ("wmspec_jax.models.pairs", "wmspec_jax.sharding", ["wmspec_jax.models.partitioning"])]
    arrows = arrows_back_into("wmspec_jax.models", import_graph())
    assert not arrows, "models modules importing modules that import the models: " + ", ".join(
        f"{m} -> {out} -> {back}" for m, out, back in arrows)


def test_the_tools_stand_on_the_library_not_the_lab():
    # The console tools (cli) read lines, models and detectors; the lab is the experiments' layer. A tool
    # importing it would make the experiments' modules part of every install's tools.
    tools_to_lab = sorted((m, t) for m, targets in import_graph().items() if layer(m) == "cli"
                          for t in targets if layer(t) == "lab")
    assert not tools_to_lab, f"cli modules importing the lab: {tools_to_lab}"


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_]*")


def test_the_detectors_name_no_flag():
    # wmspec_jax.detect is statistics, detectors and p-values for any caller; flags are the tools' words.
    # The lines layer names an option by its field (`alpha`) and the tools spell it as their flag.
    assert FLAG.search('raise LineError(f"--alpha must be")') and not FLAG.search("x--y, a -- b, ``-1``")
    hits = [f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()[:100]}"
            for name, path in sorted(modules().items()) if name.startswith("wmspec_jax.detect")
            for i, line in enumerate(open(path, encoding="utf-8"), 1) if FLAG.search(line)]
    assert not hits, "detect modules naming a flag:\n" + "\n".join(hits)


def test_scripts_are_modules_without_path_edits():
    for folder in ("experiments", "benchmarks"):
        assert os.path.isfile(os.path.join(ROOT, folder, "__init__.py"))
        for f in os.listdir(os.path.join(ROOT, folder)):
            if f.endswith(".py"):
                source = open(os.path.join(ROOT, folder, f), encoding="utf-8").read()
                assert "sys.path.insert" not in source and "sys.path.append" not in source, f"{folder}/{f}"


# An experiment script holds its flags, main() and progress lines; what it computes lives in the lab,
# where the tests, the notebooks and other scripts reach it.
MAX_SCRIPT_LINES = 150


def test_experiment_scripts_are_thin_flag_shells():
    folder = os.path.join(ROOT, "experiments")
    long = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".py"):
            with open(os.path.join(folder, f), encoding="utf-8") as fh:
                lines = len(fh.read().splitlines())
            if lines > MAX_SCRIPT_LINES:
                long[f"experiments/{f}"] = lines
    assert not long, f"experiment scripts over {MAX_SCRIPT_LINES} lines (move the logic to wmspec_jax/lab): {long}"


# A module holds one idea and a function one step of it: past these sizes they are split.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def test_modules_and_functions_stay_small():
    big_modules, long_functions = {}, {}
    for name, path in modules().items():
        source = open(path, encoding="utf-8").read()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            big_modules[name] = len(source.splitlines())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions[f"{name}.{node.name}"] = length
    assert not big_modules, f"modules over {MAX_MODULE_LINES} lines: {big_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


def declared_names(path: str) -> tuple:
    """(the module's ``__all__`` as written, or None; every name it binds at top level, imports included)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    declared, bound = None, set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        for target in targets:
            for leaf in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if isinstance(leaf, ast.Name):
                    bound.add(leaf.id)
                    if leaf.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                        declared = [e.value for e in node.value.elts]
                    elif leaf.id == "__all__":
                        declared = "computed"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return declared, bound


def test_every_module_says_what_it_offers():
    # A user may rely on the names a module's __all__ lists (and the packages' lazy names, which point into
    # them); the rest are the module's own helpers, free to change.
    missing, dangling = [], {}
    for name, path in modules().items():
        declared, bound = declared_names(path)
        if declared is None:
            missing.append(name)
        elif declared != "computed" and "__getattr__" not in bound:  # a module __getattr__ computes names
            unknown = [n for n in declared if n not in bound]
            if unknown:
                dangling[name] = unknown
    assert not missing, f"modules without __all__: {missing}"
    assert not dangling, f"__all__ names a module does not bind: {dangling}"
    import importlib

    unexported = []
    faces = [name for name, path in modules().items() if path.endswith("__init__.py")
             and re.search(r"^_NAMES = \{", open(path, encoding="utf-8").read(), re.M)]
    assert {"wmspec_jax", "wmspec_jax.detect", "wmspec_jax.lines"} <= set(faces)
    for package in faces:
        names = getattr(importlib.import_module(package), "_NAMES")
        for public, where in names.items():
            if public.startswith("_"):  # reachable, not public (kept out of the face's __all__)
                assert public not in importlib.import_module(package).__all__, f"{package}.{public}"
                continue
            module = modules()[f"{package}.{where}"]
            declared, _ = declared_names(module)
            if declared != "computed" and public not in declared:
                unexported.append(f"{package}.{public} -> {where}")
    assert not unexported, f"lazy names their module does not list in __all__: {unexported}"


def script_flag_names(path: str) -> set:
    """The absl flags a script defines at import (``flags.DEFINE_*("name", ...)`` at module level)."""
    names = set()
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        call = node.value if isinstance(node, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr.startswith("DEFINE") and call.args and isinstance(call.args[0], ast.Constant)):
            names.add(call.args[0].value)
    return names


def test_scripts_the_tests_import_define_distinct_flags():
    # A test that imports a script registers its flags in absl's one global registry; two scripts with a
    # flag of the same name in one pytest worker raise DuplicateFlagError, depending on which files that
    # worker was handed. Tests reach the logic through the lab instead, or import scripts whose flags differ.
    imported = set()
    for directory, _, files in os.walk(os.path.join(ROOT, "tests")):
        for f in files:
            if f.endswith(".py"):
                tree = ast.parse(open(os.path.join(directory, f), encoding="utf-8").read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.ImportFrom) and node.module in ("experiments", "benchmarks"):
                        imported.update(f"{node.module}/{a.name}.py" for a in node.names)
                    elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in (
                            "experiments", "benchmarks"):
                        imported.add(node.module.replace(".", "/") + ".py")
    seen = {}
    clashes = []
    for script in sorted(imported):
        path = os.path.join(ROOT, script)
        for name in script_flag_names(path) if os.path.isfile(path) else ():
            if name in seen:
                clashes.append((name, seen[name], script))
            seen[name] = script
    assert not clashes, f"flags defined by two scripts the tests import: {clashes}"


def test_the_package_ships_only_the_default_draft():
    assets = os.path.join(PACKAGE, "assets")
    size = sum(os.path.getsize(os.path.join(assets, f)) for f in os.listdir(assets))
    assert size <= 8 * 2 ** 20, f"package data {size / 2 ** 20:.1f} MiB"
    from wmspec_jax.models import builtin

    assert sorted(os.listdir(assets)) == [builtin.DRAFTS[builtin.DEFAULT_DRAFT]]


# What the product's files must not say: how they were made, or where. Each rule is a pattern (matched
# case-insensitively, on each line and across each line break) with sentences it must catch and product
# sentences it must let pass; test_each_rule_catches_what_it_names checks both, so no rule can rot into
# one that never fires.
Rule = collections.namedtuple("Rule", "pattern catches passes")
_START = r"(?<![\w.~$})\]-])"  # a path's first slash: not inside a word, a relative path, ~ or $VAR/...
FORBIDDEN = {
    "machine path": Rule(
        _START + r"/(?:work|home|Users|root|mnt|scratch|private|var/folders)/",
        ["nohup /work/venv/bin/python -m x", "see /home/ann/wm/run.log", "`/Users/bo/x`", "/root/.cache"],
        ["$ROOT/.venv/bin/python", "~/.cache/wmspec_jax", "https://example.org/home/index.html",
         "--target=/ckpt/Llama-2-7b-hf"]),
    "temporary folder as a location": Rule(
        _START + r"/tmp\b",
        ["--json=/tmp/bench_models.json", "W=/tmp/wmspec_f3; mkdir -p $W", "wrote /tmp/exp/x.json"],
        ["tempfile.mkdtemp()", "$TMPDIR/x", "tmp_path / 'w.jsonl'", "src/tmp_files"]),
    "Windows path": Rule(
        r"\b(?-i:[A-Z]):(?:\\{1,2}[\w .-]+){2}",
        [r"C:\Users\ann\wm", r"D:\\work\\repo"],
        [r"re.compile(r'(\d):\s+(\w+)')", "a ratio 3:1"]),
    "virtualenv path": Rule(
        _START + r"/(?:[\w.-]+/)+\.?venv\b",
        ["/opt/venv/bin/python -m x", "/srv/wm/.venv/bin/pytest"],
        ['"$ROOT/.venv/bin/python"', "./.venv/bin/python", "`.venv` present"]),
    "outside the repository": Rule(
        r"(?<![\w.])\.\./(?:shared|main|work|\.?venv)\b",
        ["LaTeX source in `../shared/paper/`", "cd ../main && make"],
        ["[models](../models.md)", "[runs](../docs/measurements/x.md)"]),
    "by hand": Rule(
        r"\bby hand\b",
        ["stopped by hand after 13 chunks", "ids put in place by hand"],
        ["a hand-written decode loop", "handled by the caller"]),
    "stopped run": Rule(
        r"\b(?:stopped|killed|interrupted|aborted|cancelled|halted)\s+(?:by hand|manually|after|early|at step)\b",
        ["# stopped after step 200", "killed early", "interrupted after 12 chunks"],
        ["why it stopped", "resumes where it stopped (--force", "stopped = walking & ~accepted"]),
    "today": Rule(
        r"\btoday\b",
        ["today v1 and v2 are files", "today's shape"],
        ["the day's figures", "at this date"]),
    "work session": Rule(
        r"\b(?:this|that|earlier|later|previous|next|another|last|first|second|third|faster|slower|developer"
        r"|work|coding|agent|chat|review)\s+sessions?\b|\bsessions?\s+(?:above|before|ago|log|notes|history)\b",
        ["a faster session of the same CPU type", "in an earlier session", "this developer session",
         "the sessions above"],
        ["with experiment.Session(settings, out) as session:", '@pytest.fixture(scope="session")',
         "a session and its record store share it", "kept for the session"]),
    "agent": Rule(
        r"(?<![\w-])agent(?:s|ic)?\b",
        ["an agent wrote it", "the agents' notes"],
        ["the User-Agent header", "a reagent"]),
    "issue reference": Rule(
        r"\bissues?\s*#?\s*\d+\b|\b(?:the|this|that) issue\b(?!\s+tracker)",
        ["fixes issue 12", "issue #7", "the issue's target (1e6 tokens/s)", "checks of the issue"],
        ["its documentation or issue tracker", "the issue tracker of vLLM"]),
    "review": Rule(
        r"\breview(?:s|ed|ing|ers?)?\b",
        ["after review", "the reviewer asked", "reviewed by"],
        ["amazon_reviews", "yelp_review_full"]),
    "time budget": Rule(
        r"\b(?:time|CPU|GPU|device) budget\b",
        ["to fit the time budget", "did not fit the CPU budget"],
        ["per-row budget of generated tokens", "fit the budget"]),
    "this machine": Rule(
        r"\bthis (?:CPU|GPU|machine|laptop|box|computer)\b",
        ["on this CPU", "this machine's cores"],
        ["the whole array on this host", "a 2-core x86 CPU"]),
    "history": Rule(
        r"\b(?:it|they|this|that|which) used to\b"
        r"|\bused to (?:be|come|take|lock|fail|raise|return|run|cost|hold|print|load|give)\b"
        r"|\bon (?:main|master)\b(?!\s+(?:memory|thread|process|device|host))|\bsince-merged\b",
        ["(it used to take seconds)", "coins used to come from a key", "(on main: KeyError)",
         "a since-merged module"],
        ["the shape used to compare with the paper's code", "the key is used to seed", "on main memory"]),
    "process word": Rule(
        r"\btickets?\b|\bwas lent\b|\bstop \d+\b",
        ["see ticket 4", "the GPU was lent", "at stop 3"],
        ["stop ids", "a lent key"]),
}

# Legitimate uses of a rule's words: (rule, file, a fragment of the line, why it is the product speaking).
ALLOWED = [
    ("by hand", "wmspec_jax/detect/gumbel.py", "built by hand",
     "statistics a caller builds without the library: an input the API accepts"),
    ("by hand", "wmspec_jax/detect/gumbel.py", "set by hand",
     "a threshold the caller passes instead of calibrating it: an API case"),
    ("by hand", "wmspec_jax/detect/streams_types.py", "built by hand",
     "statistics a caller builds without the library: an input the API accepts"),
    ("by hand", "wmspec_jax/models/hf.py", "downloaded by hand",
     "a checkpoint the user fetched without the hub client: an input the loader accepts"),
    ("by hand", "wmspec_jax/sharding.py", "communicates by hand",
     "explicit collectives, as opposed to those the compiler inserts: a design statement"),
    ("by hand", "benchmarks/bench_speculative.py", "done by hand",
     "the benchmark's own minimal decode loop, the baseline it measures against"),
]

SCANNED = ["README.md", "setup.py", "pytest.ini", ".gitignore", ".ci/run", "drafts/README.md", "docs",
           "wmspec_jax", "experiments", "benchmarks", "tests", "colab", "scripts"]
EXTENSIONS = (".py", ".md", ".ipynb", ".sh", ".txt", ".ini", ".cfg", ".toml", ".yml", ".yaml")
# not the product's own words: third-party model weights and tokenizer data, build and cache output
SKIPPED = {os.path.join("wmspec_jax", "assets"), "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}


def product_files():
    for entry in SCANNED:
        path = os.path.join(ROOT, entry)
        if os.path.isfile(path):
            yield path
            continue
        for directory, subdirs, files in os.walk(path):
            subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED and not d.endswith(".egg-info")
                                and os.path.relpath(os.path.join(directory, d), ROOT) not in SKIPPED)
            for f in sorted(files):
                if f.endswith(EXTENSIONS):
                    yield os.path.join(directory, f)


def product_lines():
    """(file relative to the root, where in it, line) of every scanned line; a notebook's cell sources
    only (its JSON framing is not prose, and the notebook test keeps it free of outputs)."""
    for path in product_files():
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        text = open(path, encoding="utf-8", errors="replace").read()
        if path.endswith(".ipynb"):
            for c, cell in enumerate(json.loads(text)["cells"]):
                source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                yield rel, [(f"cell {c} line {n}", line) for n, line in enumerate(source.splitlines(), 1)]
        else:
            yield rel, [(str(n), line) for n, line in enumerate(text.splitlines(), 1)]


_CONTINUATION = re.compile(r"^\s*(?:#+|//|\*|>)?\s*")  # a comment or quote marker that continues a line


def violations(name: str, rule: Rule):
    """'file:line: text' of every match of ``rule`` outside ALLOWED, and the ALLOWED entries it used."""
    this_file = os.path.relpath(os.path.abspath(__file__), ROOT).replace(os.sep, "/")
    pattern = re.compile(rule.pattern, re.IGNORECASE)
    allowed = [a for a in ALLOWED if a[0] == name]
    hits, used = [], set()
    for rel, lines in product_lines():
        if rel == this_file:  # its samples are offending on purpose
            continue
        for i, (where, line) in enumerate(lines):
            nxt = _CONTINUATION.sub("", lines[i + 1][1], count=1) if i + 1 < len(lines) else ""
            joined = line.rstrip() + " " + nxt
            # matches in this line, or across its end into the next line
            for m in pattern.finditer(joined):
                if m.start() >= len(line.rstrip()):
                    continue  # the next line's own match, reported there
                # an allowed use: the entry's fragment, in this file, around the match
                exempt = [a for a in allowed if a[1] == rel and any(
                    f.start() <= m.start() and m.end() <= f.end() for f in re.finditer(re.escape(a[2]), joined))]
                if exempt:
                    used.update(exempt)
                else:
                    hits.append(f"{rel}:{where}: {line.strip()[:110]}")
                    break
    return hits, used


def test_each_rule_catches_what_it_names():
    for name, rule in FORBIDDEN.items():
        pattern = re.compile(rule.pattern, re.IGNORECASE)
        assert rule.catches and rule.passes, name
        for sample in rule.catches:
            assert pattern.search(sample), f"rule {name!r} misses {sample!r}"
        for sample in rule.passes:
            assert not pattern.search(sample), f"rule {name!r} flags product text {sample!r}"
    for name, rel, fragment, reason in ALLOWED:
        assert name in FORBIDDEN and reason and re.search(FORBIDDEN[name].pattern, fragment, re.IGNORECASE), \
            f"allowed entry {rel}: {fragment!r} must name a rule and contain the words it allows"


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_the_product_speaks_of_the_product(name):
    hits, used = violations(name, FORBIDDEN[name])
    stale = [f"{a[1]}: {a[2]!r}" for a in ALLOWED if a[0] == name and a not in used]
    assert not stale, f"ALLOWED entries of rule {name!r} that match nothing any more: {stale}"
    assert not hits, f"rule {name!r}:\n" + "\n".join(hits[:30]) + (
        f"\n... {len(hits) - 30} more" if len(hits) > 30 else "")


_UP = re.compile(r"(?<![\w.])((?:\.\./)+)")


def leaves_the_repository(rel: str, line: str) -> bool:
    """Whether a relative path in ``line`` of file ``rel`` climbs above the repository's root (read from
    the file's folder, as a link is: docs/a.md may say ../README.md, README.md may not say ../x)."""
    depth = rel.count("/")
    return any(m.group(1).count("../") > depth for m in _UP.finditer(line))


def test_no_relative_path_leaves_the_repository():
    assert leaves_the_repository("README.md", "LaTeX source in `../shared/paper/`")
    assert leaves_the_repository("docs/measurements/x.md", "[y](../../../y.md)")
    assert not leaves_the_repository("docs/measurements/x.md", "[models](../models.md)")
    assert not leaves_the_repository("drafts/README.md", "[v1](../docs/measurements/v1.md)")
    this_file = os.path.relpath(os.path.abspath(__file__), ROOT).replace(os.sep, "/")
    hits = [f"{rel}:{where}: {line.strip()[:110]}" for rel, lines in product_lines() for where, line in lines
            if rel != this_file and leaves_the_repository(rel, line)]
    assert not hits, "\n".join(hits)
