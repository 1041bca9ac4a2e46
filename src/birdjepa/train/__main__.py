"""`python -m birdjepa.train --cfg FILE.toml [--n_steps=40 ...]`; see birdjepa.train.cli."""

import sys

import birdjepa.train.cli

birdjepa.train.cli.exit_with(birdjepa.train.cli.main(sys.argv[1:]))
