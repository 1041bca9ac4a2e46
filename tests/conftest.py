"""Shared pytest configuration and fixtures. Helpers live in tests/support/ (on the path by
pyproject's pythonpath): the Slurm cluster fixture (slurm_cluster.py), tiny run configs
(tiny.py), resume harness (resume_helpers.py), loader shards, batches and runs."""

import pytest

import birdjepa.demo_data

pytest_plugins = ["slurm_cluster"]


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """A small demo corpus (12 train recordings in 2 shards, 6 eval) for multi-process runs."""
    root = tmp_path_factory.mktemp("tiny-corpus")
    birdjepa.demo_data.write(root / "train", n_recordings=12, n_shards=2, min_s=3.0, max_s=6.0,
                             workers=1, seed=0)
    birdjepa.demo_data.write(root / "eval", n_recordings=6, n_shards=1, min_s=3.0, max_s=6.0,
                             workers=1, seed=1)
    return root


@pytest.fixture
def embed_calls(monkeypatch):
    """Counts calls of the functions that compute log-mel features and embeddings
    (birdjepa.models.inference.features / encode): evaluate's checks must come before them."""
    import birdjepa.models.inference as embed

    calls = {"features": 0, "encode": 0}

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(embed, "features", counted("features", embed.features))
    monkeypatch.setattr(embed, "encode", counted("encode", embed.encode))
    return calls
