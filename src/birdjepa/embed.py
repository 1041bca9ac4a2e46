"""`python -m birdjepa.embed MODEL SOURCE... --out FILE.parquet` (birdjepa.models.embed_cli).

In Python, `birdjepa.embed(encoder_or_run_dir, source, ...)` after a plain `import birdjepa` is
the embedding function (birdjepa.models.inference.embed), found by the package's lazy
`__getattr__`. This module is the command line only. Importing it (`import birdjepa.embed`) makes
Python bind the name `birdjepa.embed` to this module, as it does for every submodule; the
function is then `birdjepa.embed.embed(...)` (re-exported here), or
`birdjepa.models.inference.embed(...)` under every import. Nothing in the package imports this
module, so `birdjepa.embed(...)` stays the function unless the user imports it
(tests/test_structure.py checks)."""

import sys

from birdjepa.models.embed_cli import main
from birdjepa.models.inference import embed

__all__ = ["embed", "main"]

if __name__ == "__main__":
    sys.exit(main())
