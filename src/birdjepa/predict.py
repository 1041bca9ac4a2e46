"""`python -m birdjepa.predict MODEL SOURCE... --out detections.csv` (birdjepa.models.detect).

In Python, `birdjepa.predict(model, source, ...)` after a plain `import birdjepa` is the function
that returns the rows the command line writes (birdjepa.models.detect.predict), found by the
package's lazy `__getattr__`. This module is the command line only: importing it (`import
birdjepa.predict`) binds the name `birdjepa.predict` to this module, as Python does for every
submodule; the function is then `birdjepa.predict.predict(...)` (re-exported here), or
`birdjepa.models.detect.predict(...)` under every import. Nothing in the package or its tests
imports this module (tests/test_structure.py checks), as for birdjepa.embed."""

import sys

from birdjepa.models.detect import main, predict

__all__ = ["main", "predict"]

if __name__ == "__main__":
    sys.exit(main())
