"""`python -m birdjepa.export RUN_DIR --out_dir DIR`: a run's encoder as safetensors + JSON + a model
card (birdjepa.models.artifact)."""

import sys

import birdjepa.models.artifact

export = birdjepa.models.artifact.export
main = birdjepa.models.artifact.main

if __name__ == "__main__":
    sys.exit(main())
