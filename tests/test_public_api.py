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
import birdjepa.runtime.launch
import birdjepa.sources


def test_loader_and_audio_names():
    for name in ("Loader", "LoaderConfig", "resolve_shards", "shuffle_quality", "DEFAULT_MEAN",
                 "DEFAULT_STD"):
        assert hasattr(birdjepa.data, name), name


def test_public_modules_re_export_the_same_functions():
    """birdjepa.audio, .sources and .launch are plain modules (no sys.modules swap) that
    re-export the functions of their homes: the same objects, every name in __all__."""
    for public, home in ((birdjepa.audio, birdjepa.data.audio),
                         (birdjepa.sources, birdjepa.data.sources),
                         (birdjepa.launch, birdjepa.runtime.launch)):
        assert public is not home and public.__all__, public
        for name in public.__all__:
            assert getattr(public, name) is getattr(home, name), (public.__name__, name)
    for name in ("as_mono", "decode", "resample", "fbank", "clip", "info"):
        assert name in birdjepa.audio.__all__, name
    assert {"resolve", "class_names", "main"} <= set(birdjepa.sources.__all__)
    assert {"main", "resolve", "load_sweep", "LaunchConfig"} <= set(birdjepa.launch.__all__)


def test_a_patch_in_the_home_module_reaches_the_package_code(monkeypatch):
    """birdjepa.audio is a re-export, not the same module: a patch goes to the home module,
    where the package's code looks functions up; the alias keeps the object it imported."""
    original = birdjepa.data.audio.decode
    monkeypatch.setattr(birdjepa.data.audio, "decode", lambda *a, **k: "patched")
    assert birdjepa.data.audio.decode(b"") == "patched"
    assert birdjepa.audio.decode is original


def test_embed_is_the_function_after_import_birdjepa():
    """`birdjepa.embed(...)` is the documented Python entry: after `import birdjepa` (and every
    other public module) it is the function; `import birdjepa.embed` (the command line's module)
    binds the module instead, whose `embed` is that function."""
    code = ("import birdjepa, birdjepa.audio, birdjepa.sources, birdjepa.launch, birdjepa.data, "
            "birdjepa.models, birdjepa.evaluate, birdjepa.export, birdjepa.predict\n"
            "import birdjepa.models.inference as inf\n"
            "assert birdjepa.embed is inf.embed, birdjepa.embed\n"
            "import birdjepa.embed\n"
            "assert birdjepa.embed.embed is inf.embed and callable(birdjepa.embed.main)\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_lazy_top_level_names_and_exceptions():
    assert callable(birdjepa.load_encoder) and callable(birdjepa.embed)
    for name in ("AudioError", "DatasetError", "BadArgumentError", "TooManyFailuresError",
                 "StateMismatchError", "LoaderError", "CorruptAudioError"):
        assert issubclass(getattr(birdjepa, name), birdjepa.Error), name


def test_entry_points_answer_help_under_the_names_users_type():
    for mod in ("birdjepa.pretrain", "birdjepa.train", "birdjepa.launch", "birdjepa.embed"):
        out = subprocess.run([sys.executable, "-m", mod, "--help"], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, (mod, out.stderr[-2000:])
        assert "--cfg" in out.stdout or mod in ("birdjepa.launch", "birdjepa.embed"), mod
