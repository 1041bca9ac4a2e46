"""The package's shape stays as the structure issue left it: no import cycle, no birdjepa import
hidden in a function (but the lazy `__getattr__` of a package), small files and functions, one
home for the COMPLETE marker, and nothing in the package that needs the checkout."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LOOP_LIMIT = 120  # the training loop reads top to bottom in one function
FUNCTION_LIMIT = 80
FILE_LIMIT = 500


def modules() -> dict[str, ast.Module]:
    out = {}
    for f in sorted(SRC.rglob("*.py")):
        name = ".".join(f.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        out[name] = ast.parse(f.read_text(), filename=str(f))
    return out


def top_level_deps(name: str, tree: ast.Module, names: set[str]) -> set[str]:
    """Modules `name` imports at import time (a.b.c also imports a.b), ancestors excluded."""
    deps = set()
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module]
        for t in targets:
            parts = t.split(".")
            for i in range(1, len(parts) + 1):
                p = ".".join(parts[:i])
                if p in names and p != name and not name.startswith(p + "."):
                    deps.add(p)
    return deps


def test_module_graph_has_no_cycle():
    mods = modules()
    graph = {m: top_level_deps(m, t, set(mods)) for m, t in mods.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(u, path):
        state[u] = 1
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                cycles.append(path[path.index(v):] + [v])
            elif v not in state:
                visit(v, path + [v])
        state[u] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_no_birdjepa_import_inside_a_function_but_lazy_package_attributes():
    hidden = []
    for name, tree in modules().items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import) and any(
                        a.name.startswith("birdjepa") for a in node.names):
                    if fn.name != "__getattr__":
                        hidden.append(f"{name}.{fn.name}")
    assert hidden == []


def test_files_and_functions_are_small():
    too_long = []
    for f in sorted([*SRC.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]):
        text = f.read_text()
        if len(text.splitlines()) > FILE_LIMIT:
            too_long.append(f"{f.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for fn in ast.walk(ast.parse(text)):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                n = fn.end_lineno - fn.lineno + 1
                limit = LOOP_LIMIT if (f.name, fn.name) == ("loop.py", "main") else FUNCTION_LIMIT
                if n > limit:
                    too_long.append(f"{f.relative_to(ROOT)}:{fn.lineno} {fn.name}: {n} lines")
    assert too_long == []


def test_one_home_for_the_complete_marker_and_no_checkout_paths():
    hits, checkout = [], []
    for f in sorted(SRC.rglob("*.py")):
        text = f.read_text()
        if '"COMPLETE"' in text:
            hits.append(str(f.relative_to(ROOT)))
        if "parents[" in text:  # a path walked up out of the installed package
            checkout.append(str(f.relative_to(ROOT)))
    assert hits == ["src/birdjepa/rundir.py"]
    assert checkout == []
