"""`python -m birdjepa.predict MODEL SOURCE... --out detections.csv`: per-window species
detections from a model's class head (birdjepa.models.detect)."""

import sys

import birdjepa.models.detect

main = birdjepa.models.detect.main

if __name__ == "__main__":
    sys.exit(main())
