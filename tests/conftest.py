"""Shared pytest configuration and fixtures. Helpers live in tests/support/ (on the path by
pyproject's pythonpath): the Slurm cluster fixture (slurm_cluster.py), tiny run configs
(tiny.py), resume harness (resume_helpers.py), loader shards, batches and runs."""

import atexit
import os
import shutil
import tempfile

import pytest
import submitit  # noqa: F401 (imported before any test: see below)

import birdjepa.demo_data

# Importing submitit runs `logging.config.dictConfig`, which closes every logging handler; absl's
# closes the stream it holds unless that is the current sys.stderr. Imported first inside a test
# (`birdjepa.launch`, run alone), it closed pytest's global capture ("I/O operation on closed
# file" at teardown). Here, at start-up, absl's stream is sys.stderr and stays open.

# Runs in tests (and the processes they start) share one compilation cache, made empty for this
# session and removed after it (issue 50 item 7: the tiny trainings of the suite compile the same
# few updates again and again). A hit loads the executable a miss would compile, sealed and
# checked by birdjepa.runtime.compiles.CheckedCache: a test computes the same bits either way,
# and needs no other test to have run. test_compiles and test_compile_cache_damage set their
# own directories; a run may still turn it off (compile_cache = "off").
_COMPILE_CACHE = tempfile.mkdtemp(prefix="birdjepa-test-compile-cache-")
atexit.register(shutil.rmtree, _COMPILE_CACHE, ignore_errors=True)
os.environ["BIRDJEPA_COMPILE_CACHE"] = _COMPILE_CACHE

pytest_plugins = ["slurm_cluster"]


@pytest.fixture(scope="session")
def demo_corpus(tmp_path_factory):
    """`demo_corpus(**kw)`: the demo corpus birdjepa.demo_data.write(DIR, **kw) writes (its
    summary: out_dir, shards, ...), written once per session for each distinct `kw`: the one
    way a test module gets a small corpus, so modules asking for the same one share it. Read it,
    never write into it (copy it first)."""
    written: dict[tuple, dict] = {}

    def corpus(**kw) -> dict:
        kw = {"n_shards": 1, "workers": 1, "seed": 0, **kw}
        key = tuple(sorted(kw.items()))
        if key not in written:
            out = tmp_path_factory.mktemp("demo-corpus") / "corpus"
            written[key] = birdjepa.demo_data.write(out, **kw)
        return written[key]

    return corpus


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory, demo_corpus):
    """A small demo corpus (12 train recordings in 2 shards, 6 eval) for multi-process runs:
    ROOT/train and ROOT/eval."""
    root = tmp_path_factory.mktemp("tiny-corpus")
    train = demo_corpus(n_recordings=12, n_shards=2, min_s=3.0, max_s=6.0, seed=0)
    evaluation = demo_corpus(n_recordings=6, n_shards=1, min_s=3.0, max_s=6.0, seed=1)
    (root / "train").symlink_to(train["out_dir"], target_is_directory=True)
    (root / "eval").symlink_to(evaluation["out_dir"], target_is_directory=True)
    return root


@pytest.fixture
def embed_calls(monkeypatch):
    """Counts calls of the functions that compute log-mel features and embeddings
    (birdjepa.models.features.features / inference.encode): evaluate's checks must come before
    them."""
    import birdjepa.models.features as features
    import birdjepa.models.inference as inference

    calls = {"features": 0, "encode": 0}

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(features, "features", counted("features", features.features))
    monkeypatch.setattr(inference, "encode", counted("encode", inference.encode))
    return calls


SERIAL_GROUPS = {
    "hosts": ("test_distributed", "test_host_faults", "test_many_hosts", "test_slurm_cluster",
              "test_slurm_training", "test_launch_interrupt"),
}
"""Modules that start several training processes (simulated hosts, the local Slurm cluster)
run one after another on one worker under `pytest -n 2`: one Slurm cluster at a time, and no
two multi-process runs sharing the cores."""


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`: -n 2 --dist loadgroup), each module's tests stay
    together on one worker (its module fixtures, trainings among them, are made once), and
    SERIAL_GROUPS' modules share one worker."""
    group_of = {m: g for g, ms in SERIAL_GROUPS.items() for m in ms}
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else item.nodeid
        item.add_marker(pytest.mark.xdist_group(group_of.get(module, module)))
