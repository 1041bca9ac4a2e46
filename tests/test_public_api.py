"""The public surface users import stays where the README says it is, whatever the package's
internal layout: the loader, the audio transforms, the encoder for notebooks, embeddings, the
exception hierarchy, and the entry-point module names users type."""

import subprocess
import sys

import birdjepa
import birdjepa.audio
import birdjepa.data
import birdjepa.data.audio
import birdjepa.data.sources
import birdjepa.launch
import birdjepa.launch.sweep
import birdjepa.sources


def test_loader_and_audio_names():
    for name in ("Loader", "LoaderConfig", "resolve_shards", "shuffle_quality", "DEFAULT_MEAN",
                 "DEFAULT_STD"):
        assert hasattr(birdjepa.data, name), name


def test_public_modules_re_export_the_same_functions():
    """birdjepa.audio, .sources and .launch are plain modules (no sys.modules swap) that
    re-export the functions of their homes: the same objects, every name in __all__
    (birdjepa.sources also holds its command line, `main`; the launcher's is
    birdjepa.launch.__main__)."""
    for public, home in ((birdjepa.audio, birdjepa.data.audio),
                         (birdjepa.sources, birdjepa.data.sources)):
        assert public is not home and public.__all__, public
        for name in public.__all__:
            assert getattr(public, name) is getattr(home, name), (public.__name__, name)
    for name in birdjepa.launch.__all__:  # each from its own module of the package
        obj = getattr(birdjepa.launch, name)
        home = sys.modules[obj.__module__]
        assert home.__name__.startswith("birdjepa.launch.") and getattr(home, name) is obj, name
    for name in ("as_mono", "decode", "resample", "fbank", "clip", "info"):
        assert name in birdjepa.audio.__all__, name
    assert {"resolve", "class_names"} <= set(birdjepa.sources.__all__)
    assert callable(birdjepa.sources.main)  # the command's own, not a re-export
    assert {"resolve", "load_sweep", "LaunchConfig", "check_shards"} <= set(birdjepa.launch.__all__)


def test_a_patch_in_the_home_module_reaches_the_package_code(monkeypatch):
    """birdjepa.audio is a re-export, not the same module: a patch goes to the home module,
    where the package's code looks functions up; the alias keeps the object it imported."""
    original = birdjepa.data.audio.decode
    monkeypatch.setattr(birdjepa.data.audio, "decode", lambda *a, **k: "patched")
    assert birdjepa.data.audio.decode(b"") == "patched"
    assert birdjepa.audio.decode is original


IMPORT_EVERYTHING = """
import importlib, pkgutil, sys, types
import birdjepa
PUBLIC = [birdjepa, *(importlib.import_module(m) for m in (
    "birdjepa.data", "birdjepa.models", "birdjepa.evaluate", "birdjepa.launch", "birdjepa.audio",
    "birdjepa.sources"))]
before = {(p.__name__, n): getattr(p, n) for p in PUBLIC for n in p.__all__}
for info in pkgutil.walk_packages(birdjepa.__path__, "birdjepa."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
changed = [k for k, v in before.items() if getattr(sys.modules[k[0]], k[1]) is not v]
assert not changed, changed
assert callable(birdjepa.embeddings) and callable(birdjepa.detections)
assert isinstance(birdjepa.embed, types.ModuleType) and isinstance(birdjepa.predict, types.ModuleType)
print(len(before))
"""


def test_importing_every_submodule_leaves_every_public_name_as_it_was():
    """`import birdjepa, birdjepa.embed` (or any other submodule) leaves every documented public
    name (each public package's `__all__`, the root's lazy `embeddings`, `detections`,
    `load_encoder` and exceptions among them) the object it was: no public name is also the name
    of a submodule. Before, `import birdjepa.embed` turned the function `birdjepa.embed` into the
    command line's module."""
    out = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) > 40


def test_no_public_name_is_also_a_submodule():
    """The static form of the rule above, for every package (`__all__` against the files): a
    public name may be a submodule only as that submodule itself."""
    import importlib
    import pathlib
    clashes = []
    for init in sorted(pathlib.Path(birdjepa.__file__).parent.rglob("__init__.py")):
        pkg = ".".join(init.parent.relative_to(pathlib.Path(birdjepa.__file__).parents[1]).parts)
        subs = {p.stem for p in init.parent.glob("*.py")} | {
            p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()}
        mod = importlib.import_module(pkg)
        names = set(getattr(mod, "__all__", ()))
        clashes += [f"{pkg}.{n}" for n in sorted(names & subs)
                    if getattr(mod, n) is not importlib.import_module(f"{pkg}.{n}")]
    assert clashes == []


def test_lazy_top_level_names_and_exceptions():
    assert callable(birdjepa.load_encoder) and callable(birdjepa.embeddings)
    for name in ("AudioError", "DatasetError", "BadArgumentError", "TooManyFailuresError",
                 "StateMismatchError", "LoaderError", "CorruptAudioError"):
        assert issubclass(getattr(birdjepa, name), birdjepa.Error), name


def test_entry_points_answer_help_under_the_names_users_type():
    for mod in ("birdjepa.pretrain", "birdjepa.launch", "birdjepa.embed"):
        out = subprocess.run([sys.executable, "-m", mod, "--help"], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, (mod, out.stderr[-2000:])
        assert "--cfg" in out.stdout or mod in ("birdjepa.launch", "birdjepa.embed"), mod
