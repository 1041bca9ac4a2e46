"""`python -m birdjepa.demo_data`: see birdjepa.demo_data.cli."""

import sys

import birdjepa.demo_data.cli

sys.exit(birdjepa.demo_data.cli.main())
