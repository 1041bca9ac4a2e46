"""`python -m birdjepa.launch --sweep FILE ...` (birdjepa.launch.sweep)."""

import sys

import birdjepa.launch.sweep

sys.exit(birdjepa.launch.sweep.main())
