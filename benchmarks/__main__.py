"""Dispatch `python -m benchmarks NAME [args]` to `benchmarks.NAME.main(args)`."""

import importlib
import sys

import birdjepa.common.cli_args as cli_args

NAMES = ("transforms", "loader", "views", "train", "ckpt", "birdset", "embed", "plan", "bird_mae",
         "bytes", "scoring")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in NAMES:
        p = cli_args.Parser("python -m benchmarks", "Benchmarks that print figures (speed, "
                            "memory): `python -m benchmarks NAME --help` lists NAME's options.")
        p.add_argument("name", metavar="NAME", choices=NAMES,
                       help=f"the benchmark to run: one of {', '.join(NAMES)}")
        p.parse_args(argv[:1])  # --help: exit 0; nothing or a wrong name: one line, exit 2
    module = importlib.import_module(f"benchmarks.{argv[0]}")
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
