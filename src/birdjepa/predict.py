"""`python -m birdjepa.predict MODEL SOURCE... --out detections.csv`: the command line of
birdjepa.models.detect. The Python function is `birdjepa.detections(...)`."""

import sys

from birdjepa.models.detect import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
