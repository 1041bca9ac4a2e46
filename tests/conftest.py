"""Shared pytest configuration and fixtures. The Slurm cluster fixture lives in
tests/slurm_cluster.py."""

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
