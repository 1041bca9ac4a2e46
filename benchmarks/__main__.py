"""Dispatch `python -m benchmarks NAME [args]` to `benchmarks.NAME.main(args)`."""

import importlib
import sys

NAMES = ("transforms", "loader", "views", "train", "ckpt", "birdset", "bird_mae")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in NAMES:
        print(f"usage: python -m benchmarks {{{','.join(NAMES)}}} [args]", file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{argv[0]}")
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
