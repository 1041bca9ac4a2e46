"""`python -m birdjepa.evaluate --cfg configs/eval-demo.toml [--encoders RUN_DIR ...]`."""

import sys

import birdjepa.config
import birdjepa.evaluate.config as config
import birdjepa.evaluate.runner as runner


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = config.cli(argv)
        runner.run(cfg)
    except (birdjepa.config.ConfigError, FileNotFoundError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
