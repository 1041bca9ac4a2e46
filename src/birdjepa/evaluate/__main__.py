"""`python -m birdjepa.evaluate`: see birdjepa.evaluate.cli."""

import sys

import birdjepa.evaluate.cli

sys.exit(birdjepa.evaluate.cli.main())
