"""Learning-rate sweep on the demo corpus (runs locally on CPU in minutes per entry).

    python -m birdjepa.launch --sweep sweeps/lr.py --executor local
"""

BASE = "../configs/demo.toml"


def make_cfgs() -> list[dict]:
    return [{"optim.lr": lr} for lr in (3e-4, 1e-3, 3e-3)]
