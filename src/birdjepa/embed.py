"""`python -m birdjepa.embed MODEL SOURCE... --out FILE.parquet`: the command line of
birdjepa.models.embed_cli. The Python function is `birdjepa.embeddings(...)`."""

import sys

from birdjepa.models.embed_cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
