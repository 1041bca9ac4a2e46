"""The package's shape stays as the structure issues left it: no import cycle, no birdjepa import
hidden in a function (but the lazy `__getattr__` of a package and the job that runs the loop),
packages by concern (data/, runtime/, config/, train/, evaluate/), nothing outside train/ that
imports train, a config layer without JAX, whole classes that keep to their own state, one home
for each thing (the run directory's names, loading an encoder, opening Arrow IPC files), plain modules,
and nothing in the package that needs the checkout."""

import ast
import importlib
import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
RUN_DIR_NAMES = {"COMPLETE", "checkpoints", "config.toml", "metrics.jsonl", "curves.png",
                 "birdjepa-integrity.json", "lock"}
"""Names inside a run directory, spelled only in birdjepa.runtime.rundir (`run_id`, also a
config key, is left out)."""
HIDDEN_OK = {("birdjepa.launch.job", "__call__")}
"""The submitit job imports the training loop (JAX, the model) where it runs, so that the
launcher that pickles it stays free of JAX."""
TRAIN_IMPORTERS = {"birdjepa.pretrain"}
"""Modules outside train/ allowed to import it at import time: the `pretrain` alias."""


def parse(text: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, again if CPython 3.11's AST depth counter (one per interpreter) was disturbed
    by a traceback formatted meanwhile, in a finaliser or another thread (3.11 formats
    tracebacks with `ast.parse`): "AST constructor recursion depth mismatch" (CI of be700c9;
    the message: python/cpython#106905). The counter restarts on every call: a retry is exact."""
    for attempt in range(3):
        try:
            return ast.parse(text, filename=filename)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def modules() -> dict[str, ast.Module]:
    out = {}
    for f in sorted(SRC.rglob("*.py")):
        name = ".".join(f.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        out[name] = parse(f.read_text(), str(f))
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


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph` (node -> the nodes it imports), each as a closed path."""
    state: dict[str, int] = {}
    found = []

    def visit(u, path):
        state[u] = 1
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                found.append(path[path.index(v):] + [v])
            elif v not in state:
                visit(v, path + [v])
        state[u] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_module_graph_has_no_cycle():
    mods = modules()
    assert cycles({m: top_level_deps(m, t, set(mods)) for m, t in mods.items()}) == []


def named_deps(name: str, tree: ast.Module, names: set[str]) -> set[str]:
    """What `name` names at import time: each imported module itself, and for `from P import X`
    the module P.X, or P when X is a name P defines. Unlike `top_level_deps` it keeps a package
    that a module of it names: `import birdjepa.config` in config/command_line.py reads the
    package's own names, so a package whose __init__ imports that module back is a circle. The
    ancestors Python imports on the way (birdjepa.data before birdjepa.data.ipc) are not named."""
    deps = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            deps |= {a.name for a in node.names if a.name in names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in names:
            deps |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names
                     else node.module for a in node.names}
    return deps - {name}


def test_no_circle_inside_a_package():
    """Issue 50 item 6: config/__init__.py imported config/command_line.py, which imported the
    package back for its names (`birdjepa.config.Config`): a circle `top_level_deps` missed,
    since it leaves out a module's own packages."""
    mods = modules()
    graph = {m: named_deps(m, t, set(mods)) for m, t in mods.items()}
    assert cycles(graph) == []
    circle = {"birdjepa.config": {"birdjepa.config.command_line"},
              "birdjepa.config.command_line": {"birdjepa.config"}}
    assert cycles(circle) == [["birdjepa.config", "birdjepa.config.command_line",
                               "birdjepa.config"]]  # the one today's tree had, as this test sees it


def test_package_graph_has_no_cycle():
    """Issue 39 item 3: packages import in one direction (config and data imported runtime for
    cli_args, and runtime imported them back). Nodes: each subpackage, and each module of the
    root (the root holds modules of several floors, each one a node)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for m, tree in mods.items():
        for d in top_level_deps(m, tree, set(mods)):
            if _node(d) != _node(m):
                graph.setdefault(_node(m), set()).add(_node(d))
    assert cycles(graph) == []
    assert graph.get("birdjepa.common", set()) == set()  # the leaf: imports no other package


FLOORS = (
    ("birdjepa.common",),
    ("birdjepa.data", "birdjepa.demo_data"),
    ("birdjepa.config",),
    ("birdjepa.model", "birdjepa.optim", "birdjepa.runtime"),
    ("birdjepa.objectives",),
    ("birdjepa.params",),
    ("birdjepa.models",),
    ("birdjepa.train", "birdjepa.evaluate"),
    ("birdjepa.launch",),
    ("birdjepa", "birdjepa.audio", "birdjepa.embed", "birdjepa.export", "birdjepa.predict",
     "birdjepa.pretrain", "birdjepa.sources"),
)
"""The house, lowest floor first: leaf utilities; data; the config; the model, optimisers and
run infrastructure; objectives; parameters (the abstract train state); models in and out;
training and evaluation; launching; the user's entry points (the root's facade, the command
lines' modules). Every node (a subpackage, or a module of the root) imports only nodes on lower
floors (docs/issues/027-honest-names draws it)."""


def _node(m: str) -> str:
    parts = m.split(".")
    is_pkg = len(parts) >= 2 and (SRC / "birdjepa" / parts[1]).is_dir()
    return "birdjepa." + parts[1] if is_pkg else m


def test_every_import_goes_down_a_floor():
    """Issue 39 item 3: layers one can draw. Counts every import, those inside functions too
    (the job's import of the training loop, a package's lazy `__getattr__`): runtime/ imported
    train/ from the submitit job, and launching lived in runtime/, below train."""
    mods = modules()
    floor = {n: i for i, nodes in enumerate(FLOORS) for n in nodes}
    assert set(floor) == {_node(m) for m in mods}, set(floor) ^ {_node(m) for m in mods}
    upward = []
    for m, tree in mods.items():
        for imp in sorted(_all_imports(tree)):
            if imp.startswith("birdjepa.") and imp.split(".")[1] != "_rs":
                target = _node(imp)
                if target != _node(m) and floor[target] >= floor[_node(m)]:
                    upward.append(f"{m} -> {imp}")
    assert upward == []


def test_one_definition_parses_a_model_spec_and_one_a_split_spec():
    """Issue 39 item 4: "NAME:WEIGHTS / export / run" was read in four places, "DIR:SPLIT" in
    four: a function that splits on ":" and asks for the imported names (PRESETS, IMPORTED) is
    artifact.parse_spec alone; one that rpartitions on ":" is data.sources.split_spec alone
    (evaluate's config joins relative paths of both kinds: it decides no kind)."""
    spec, split = [], []
    for name, tree in modules().items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            calls = {n.func.attr for n in ast.walk(fn) if isinstance(n, ast.Call)
                     and isinstance(n.func, ast.Attribute)}
            names = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)} | {
                n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
            if "partition" in calls and names & {"PRESETS", "IMPORTED"}:
                spec.append(f"{name}.{fn.name}")
            if "rpartition" in calls:
                split.append(f"{name}.{fn.name}")
    assert spec == ["birdjepa.models.artifact.parse_spec"]
    assert sorted(split) == ["birdjepa.data.sources.split_spec",
                             "birdjepa.evaluate.eval_config._resolve"]


def test_exceptions_are_imported_from_their_module():
    """Issue 39 item 3: low layers raised `birdjepa.X` (the package root, whose facade reaches
    into models) and `birdjepa._rs.X`; they import birdjepa.common.errors."""
    import birdjepa.common.errors as errors

    found = []
    for name, tree in modules().items():
        if name in ("birdjepa", "birdjepa.common.errors"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in errors.NAMES:
                base = ast.unparse(node.value)
                if base in ("birdjepa", "birdjepa._rs"):
                    found.append(f"{name}: {base}.{node.attr}")
    assert found == []


def test_a_module_is_imported_under_its_own_name():
    """Issue 39 item 1: `import birdjepa.models.artifact as export` read as another module; an
    alias may only repeat the file's name (`import birdjepa.data.paths as paths`). In the
    package, and in the tests, benchmarks and investigation scripts that read it."""
    renamed = []
    others = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
              *(ROOT / "docs").rglob("*.py"), *(ROOT / "sweeps").rglob("*.py")]
    trees = {**modules(), **{str(f.relative_to(ROOT)): parse(f.read_text()) for f in others}}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                renamed += [f"{name}: import {a.name} as {a.asname}" for a in node.names
                            if a.name.startswith("birdjepa") and a.asname
                            and a.asname != a.name.rsplit(".", 1)[-1]]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("birdjepa"):
                renamed += [f"{name}: from {node.module} import {a.name} as {a.asname}"
                            for a in node.names if a.asname and a.asname != a.name]
    assert renamed == []


def test_no_birdjepa_import_inside_a_function_but_lazy_package_attributes():
    hidden = []
    for name, tree in modules().items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import) and any(
                        a.name.startswith("birdjepa") for a in node.names):
                    if (name, fn.name) not in HIDDEN_OK and fn.name != "__getattr__":
                        hidden.append(f"{name}.{fn.name}")
    assert hidden == []


def _classes() -> dict[str, list[ast.ClassDef]]:
    """Every class of the package by name."""
    out: dict[str, list[ast.ClassDef]] = {}
    for tree in modules().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(node)
    return out


def _base_names(c: ast.ClassDef) -> list[str]:
    return [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in c.bases]


def _own_names(c: ast.ClassDef) -> set[str]:
    """What a class defines itself: its methods, class attributes with a value, and every
    `self.NAME = ...` (or `object.__setattr__(self, "NAME", ...)`) in its methods."""
    names = {n.name for n in c.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for st in c.body:
        if isinstance(st, ast.Assign):
            names |= {t.id for t in st.targets if isinstance(t, ast.Name)}
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value:
            names.add(st.target.id)
    for n in ast.walk(c):
        if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name) and n.value.id == "self"):
            names.add(n.attr)
        elif (isinstance(n, ast.Call) and ast.unparse(n.func) in ("setattr", "object.__setattr__")
              and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant)):
            names.add(n.args[1].value)
    return names


def test_a_file_or_directory_is_renamed_into_place_by_common_outputs():
    """One owner per concern: writing a file or a directory beside its place and renaming it
    over is birdjepa.common.outputs (`replacing`, `replacing_dir`). runtime/rundir's COMPLETE,
    runtime/integrity's manifest and data/from_files' shard had their own copies; issue 50
    item 5: pack's shards, the demo corpus, the demo soundscapes and from_annotations' split
    each named and renamed their own temporaries, and `outputs.original` knew only its own."""
    found = set()
    for name, tree in modules().items():
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Attribute):
                continue
            f = ast.unparse(n.func)
            if f in ("os.replace", "os.rename") or (
                    n.func.attr in ("rename", "replace") and ast.unparse(n.func.value) == "tmp"):
                found.add(name)
    assert found == {"birdjepa.common.outputs"}


def test_a_class_is_whole_not_split_across_a_private_base():
    """Issue 39 item 5, one class per concern: a base class in the package is a concept of its
    own (an exception family, `Loader` for the test loader), never the private other half of a
    class cut in two to meet a line cap (`Loader(_OpenedShards)`: 146 + 96 lines)."""
    classes = _classes()
    split = [f"{c.name}({b})" for defs in classes.values() for c in defs
             for b in _base_names(c) if b in classes and b.startswith("_")]
    assert split == []


def test_a_class_reads_only_the_private_state_it_or_its_bases_set():
    """Issue 39 item 5: no mixin reaching into a subclass's private state (`IntactSteps` read
    the `_mngr` its subclass `Checkpointer` set; it is now a collaborator holding its own).
    Every `self._NAME` a class reads is set or defined by the class or a base in the package;
    a class with a base from outside the package may also read that base's own (argparse's
    `_actions`), which this test cannot see."""
    classes = _classes()
    reaching = []
    for defs in classes.values():
        for c in defs:
            allowed, stack, outside = _own_names(c), list(_base_names(c)), False
            while stack:
                b = stack.pop()
                outside |= b not in classes
                for bc in classes.get(b, []):
                    allowed |= _own_names(bc)
                    stack += _base_names(bc)
            reads = {n.attr for n in ast.walk(c) if isinstance(n, ast.Attribute)
                     and isinstance(n.value, ast.Name) and n.value.id == "self"
                     and n.attr.startswith("_") and not n.attr.startswith("__")}
            if reads - allowed and not outside:
                reaching.append(f"{c.name}: {sorted(reads - allowed)}")
    assert reaching == []


def _docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):  # a module's, a class's, a function's, or an attribute's
            out |= {id(b.value) for b in body if isinstance(b, ast.Expr)
                    and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str)}
    return out


def test_run_directory_names_are_spelled_in_rundir_only_and_no_checkout_paths():
    """Every path inside a run directory is named by birdjepa.runtime.rundir: no other module
    holds the string "checkpoints", "metrics.jsonl", "COMPLETE", ... (docstrings aside)."""
    hits, checkout = {}, []
    for name, tree in modules().items():
        docs = _docstrings(tree)
        found = sorted({n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                        and n.value in RUN_DIR_NAMES and id(n) not in docs})
        if found:
            hits[name] = found
    for f in sorted(SRC.rglob("*.py")):
        if "parents[" in f.read_text():  # a path walked up out of the installed package
            checkout.append(str(f.relative_to(ROOT)))
    assert hits == {"birdjepa.runtime.rundir": sorted(RUN_DIR_NAMES)}
    assert checkout == []


def _calls(tree: ast.Module, attr: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(tree))


def test_one_load_encoder_and_one_arrow_ipc_opener():
    """`load_encoder` is defined once (birdjepa.models; the old paths re-export it), and Arrow
    IPC files are opened (stream or file, whatever their kind) in birdjepa.data.ipc only."""
    mods = modules()
    defs = [name for name, tree in mods.items() for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.name == "load_encoder"]
    assert defs == ["birdjepa.models"]
    openers = sorted(name for name, tree in mods.items()
                     if _calls(tree, "open_stream") or _calls(tree, "open_file"))
    assert openers == ["birdjepa.data.ipc"]


def test_plain_modules_no_sys_modules_or_class_swaps():
    """No module replaces itself in sys.modules or swaps its __class__ (re-exports instead)."""
    tricks = []
    for name, tree in modules().items():
        for n in ast.walk(tree):
            targets = n.targets if isinstance(n, ast.Assign) else [
                n.target] if isinstance(n, ast.AugAssign | ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "__class__":
                    tricks.append(f"{name}: __class__")
                if isinstance(t, ast.Subscript) and ast.unparse(t.value).endswith("sys.modules"):
                    tricks.append(f"{name}: sys.modules")
    assert tricks == []


def _all_imports(tree: ast.Module) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            out.add(n.module)
    return out


def _command_modules() -> dict[str, str]:
    """{script name: the module its [project.scripts] entry runs}."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return {name: target.split(":")[0] for name, target in scripts.items()}


def test_a_command_line_lives_in_the_module_its_command_names():
    """Issue 50 item 6: one kind of place for commands. `python -m birdjepa.X` (and the script
    birdjepa-X) runs birdjepa/X.py, or birdjepa/X/__main__.py when X is a package: that module
    is the command line (its options, errors to exit statuses); the work is in the rooms below.
    Before, the command lines lived in train/cli.py, evaluate/cli.py, demo_data/cli.py,
    models/birdjepa.embed.py, models/detect.py, models/artifact.py and launch/sweep.py, and training
    answered to two names (`birdjepa.train`, `birdjepa.pretrain`). A module that defines `main`
    is one of these, or a sub-command module a command names (evaluate.report): `main(argv)`."""
    commands = _command_modules()
    for script, module in commands.items():
        name = "birdjepa." + script.removeprefix("birdjepa-").replace("-", "_")
        assert module in (name, f"{name}.__main__"), (script, module)
        assert (module == name) != (SRC / name.replace(".", "/")).is_dir(), (script, module)
    mains = sorted(m for m, tree in modules().items() if any(
        isinstance(n, ast.FunctionDef) and n.name == "main" and n.args.args
        and n.args.args[0].arg == "argv" for n in tree.body))  # not train.loop.main(cfg)
    assert mains == sorted({*commands.values(), "birdjepa.evaluate.report"})
    assert not (SRC / "birdjepa" / "train" / "__main__.py").exists()  # one name: pretrain


def test_models_never_import_evaluate_and_nothing_imports_a_command_line():
    """The packages depend one way (evaluate -> models, data), anywhere in a module; and no
    module imports a command's module (entry points, nothing to build on; tests may)."""
    mods = modules()
    upward = [f"{name} -> {imp}" for name, tree in mods.items() if name.startswith(
        "birdjepa.models") or name.startswith("birdjepa.data")
        for imp in sorted(_all_imports(tree)) if imp.startswith("birdjepa.evaluate")]
    assert upward == []
    cli = set(_command_modules().values())
    users = [f"{name} -> {sorted(cli & _all_imports(tree))}" for name, tree in mods.items()
             if cli & _all_imports(tree) and name not in cli]
    assert users == []


def test_nothing_outside_train_imports_train():
    mods = modules()
    names = set(mods)
    offenders = []
    for name, tree in mods.items():
        if name.startswith("birdjepa.train") or name in TRAIN_IMPORTERS:
            continue
        deps = top_level_deps(name, tree, names)
        offenders += [f"{name} -> {d}" for d in sorted(deps) if d.startswith("birdjepa.train")]
    assert offenders == []


def test_the_root_holds_entry_points_and_model_modules_only():
    """Data concerns live in data/, run infrastructure in runtime/; what stays at the root is
    the model, its parameters, the encoder loader, optimiser and the user-facing aliases and
    entry points (embed, export, predict: thin modules over birdjepa.models)."""
    root = sorted(p.stem for p in (SRC / "birdjepa").glob("*.py"))
    assert root == ["__init__", "audio", "embed", "export", "model", "optim", "params", "predict",
                    "pretrain", "sources"]
    for pkg, members in {"data": {"loader", "sources", "audio", "synthetic", "loader_config"},
                         "runtime": {"checkpoint", "rundir", "preemption", "distributed"},
                         "launch": {"sweep", "job", "__main__"}}.items():
        have = {p.stem for p in (SRC / "birdjepa" / pkg).glob("*.py")}
        assert members <= have, (pkg, members - have)


def test_config_layer_and_launcher_import_no_jax():
    code = ("import sys, birdjepa.launch, birdjepa.config, birdjepa.data\n"
            "bad = [m for m in ('jax', 'equinox', 'optax', 'orbax') if m in sys.modules]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


ROLE_NAMES = {"__main__"}
"""Bare module names that say a role, not a thing: allowed in several packages. Issue 50 item 6:
"config" was one, and birdjepa.evaluate.config imported birdjepa.config, which imported
birdjepa.data.config: three modules called config in one import chain (now
birdjepa.evaluate.eval_config, birdjepa.config, birdjepa.data.loader_config)."""


def test_no_two_modules_share_a_bare_name_unless_they_are_the_same_thing():
    """The README's naming rule: a repeated bare name (a package's is its directory's) is a
    role name, or a top-level public name that re-exports its home module (every name in its
    __all__ is the home's object)."""
    by_name: dict[str, list[str]] = {}
    for name in modules():
        by_name.setdefault(name.split(".")[-1], []).append(name)
    shared = {b: sorted(ms) for b, ms in by_name.items() if len(ms) > 1 and b not in ROLE_NAMES}
    for bare, names in shared.items():
        public = f"birdjepa.{bare}"
        assert len(names) == 2 and public in names, (bare, names)
        home = importlib.import_module(next(n for n in names if n != public))
        alias = importlib.import_module(public)
        assert alias.__all__ and all(getattr(alias, n) is getattr(home, n) for n in alias.__all__)
    assert sorted(shared) == ["audio", "sources"]
def _marks(decorators: list[ast.expr]) -> dict[str, list]:
    """{mark name: its constant arguments} of `pytest.mark.NAME(...)` expressions."""
    out = {}
    for d in decorators:
        call = d if isinstance(d, ast.Call) else None
        attr = call.func if call else d
        if isinstance(attr, ast.Attribute) and ast.unparse(attr).startswith("pytest.mark."):
            out[attr.attr] = [a.value for a in (call.args if call else [])
                              if isinstance(a, ast.Constant)]
    return out


def test_a_test_with_a_timeout_of_300_s_or_more_is_marked_slow():
    """The `slow` mark documents (make test still runs every test): anything allowed 300 s or
    more carries it, on the test or on its module's pytestmark."""
    unmarked = []
    for f in sorted((ROOT / "tests").glob("test_*.py")):
        tree = parse(f.read_text())
        module: dict[str, list] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
                v = node.value
                module = _marks(v.elts if isinstance(v, ast.List | ast.Tuple) else [v])
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                marks = {**module, **_marks(node.decorator_list)}
                if (marks.get("timeout") or [0])[0] >= 300 and "slow" not in marks:
                    unmarked.append(f"{f.name}::{node.name}")
    assert unmarked == []
