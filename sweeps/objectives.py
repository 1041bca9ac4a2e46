"""Objective comparison on the demo corpus: supervised vs LeJEPA vs MAE, same budget and probe.

    python -m birdjepa.launch --sweep sweeps/objectives.py --executor local
"""

BASE = "../configs/demo.toml"


def make_cfgs() -> list[dict]:
    return [
        {"objective.name": "supervised", "data.n_views": 1},
        {"objective.name": "lejepa", "data.n_views": 2},
        {"objective.name": "mae", "data.n_views": 1},
    ]
