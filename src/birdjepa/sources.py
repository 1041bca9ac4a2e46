"""`birdjepa.sources`: the public name of `birdjepa.data.sources` (how shard arguments resolve),
and `python -m birdjepa.sources pack SRC DST ...` (birdjepa.data.pack). A plain re-export of the
same functions, and an entry point."""

import sys

from birdjepa.data.sources import class_names, main, resolve

__all__ = ["class_names", "main", "resolve"]

if __name__ == "__main__":
    sys.exit(main())
