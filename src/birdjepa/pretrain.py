"""`python -m birdjepa.pretrain --cfg FILE.toml [...]`: an alias of `python -m birdjepa.train`."""

import sys

import birdjepa.train.cli

if __name__ == "__main__":
    birdjepa.train.cli.exit_with(
        birdjepa.train.cli.main(sys.argv[1:], prog="python -m birdjepa.pretrain"))
