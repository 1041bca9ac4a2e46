"""Shared pytest configuration. The Slurm cluster fixture lives in tests/slurm_cluster.py."""

pytest_plugins = ["slurm_cluster"]
