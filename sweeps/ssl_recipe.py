"""The label-free recipe study on the demo corpus (docs/issues/017-ssl-recipe): LeJEPA settings
from the paper and from audio, against the supervised `make demo` encoder.

    nice -n 19 python -m birdjepa.launch --sweep sweeps/ssl_recipe.py --executor local \
        --max_parallel 1
    python -m birdjepa.evaluate --cfg configs/eval-demo.toml --shots 0 \
        --out_dir runs/eval-ssl-recipe --encoders runs/ssl_recipe-*

Every entry spells out all the settings the study varies on top of `OLD` (the recipe
configs/demo-lejepa.toml shipped before this study), so an entry resolves to the same config
(and run id) whatever BASE holds now. Entries are only ever appended: an entry's index is part
of its run id.
"""

BASE = "../configs/demo-lejepa.toml"

OLD = {
    "n_steps": 800,
    "batch_size": 64,
    "model.patch": (32, 32),
    "data.n_local": 4,
    "data.local_s": 2.0,
    "data.local_frames": 192,
    "objective.name": "lejepa",
    "objective.lejepa.lambd": 0.05,
    "objective.lejepa.n_slices": 256,
    "objective.lejepa.proj_hidden": 512,
    "objective.lejepa.proj_dim": 64,
    "optim.lr": 1e-3,
    "optim.warmup": 30,
    "optim.final_lr_frac": 0.01,
}
SLICES = {"model.patch": (8, 128)}
"""configs/demo.toml's encoder: full-band time slices, the supervised baseline's architecture."""
PAPER = {
    "data.n_local": 6,
    "objective.lejepa.lambd": 0.02,
    "objective.lejepa.n_slices": 1024,
    "objective.lejepa.proj_hidden": 2048,
    "objective.lejepa.proj_dim": 16,
}
"""The LeJEPA paper's settings (views 2 + 6, SIGReg on 1,024 slices, lambda 0.02 of MINIMAL.md,
a wide BN projector to 16 dimensions) at our learning rate."""


DEFAULT = {
    "n_steps": 1600,
    "objective.lejepa.proj_hidden": 2048,
    "data.local_s": 1.0,
    "data.local_frames": 96,
}
"""The three single changes that gained (entries 3, 6, 8), together: configs/demo-lejepa.toml
since session 2 (`make ssl-demo` trains it as runs/demo-lejepa)."""
MAE = {
    "objective.name": "mae",
    "objective.mae.mask_ratio": 0.75,
    "objective.mae.block": (2, 1),
    "data.n_local": 0,
}
"""The MAE objective on the same encoder: 3 of every 4 time slices hidden (in runs of 2), a
2-block decoder reconstructs the normalised slices; both 5 s views are examples."""


def make_cfgs() -> list[dict]:
    """One setting at a time on top of entry 0 from entry 3 on (session 2 of the study)."""
    return [
        {**OLD, **SLICES},  # 0: the supervised encoder's patches (cmAP 0.620; the default)
        {**OLD, **SLICES, **PAPER},  # 1: + the paper's settings (0.560)
        {**OLD},  # 2: the old default, the anchor (not run)
        {**OLD, **SLICES, "n_steps": 1600},  # 3: twice the steps (the cosine stretched)
        {**OLD, **SLICES, "objective.lejepa.lambd": 0.1},  # 4: SIGReg weighed twice as much
        {**OLD, **SLICES, "data.n_local": 6},  # 5: the paper's 6 local crops, nothing else
        {**OLD, **SLICES, "objective.lejepa.proj_hidden": 2048},  # 6: the paper's wide projector
        {**OLD, **SLICES, **MAE},  # 7: MAE, the contender
        {**OLD, **SLICES, "data.local_s": 1.0, "data.local_frames": 96},  # 8: 1 s local crops
        {**OLD, **SLICES, "objective.lejepa.lambd": 0.02},  # 9: MINIMAL.md's lambda alone
        {**OLD, **SLICES, "seed": 1},  # 10: entry 0 again, another seed (run-to-run spread)
        {**OLD, **SLICES, **DEFAULT},  # 11: entries 3, 6 and 8 together: the new default
        {**OLD, **SLICES, **DEFAULT, "seed": 1},  # 12: entry 11, another seed
        {**OLD, **SLICES, **DEFAULT, "seed": 2},  # 13: entry 11, a third seed (session 3)
    ]
