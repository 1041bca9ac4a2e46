"""`python -m birdjepa.predict MODEL SOURCE... --out detections.csv`: per-window species
detections from a model's class head (birdjepa.models.detect), and `birdjepa.predict(model,
source, ...)`: importing this module makes it callable as birdjepa.models.detect.predict (the
rows the command line writes), as birdjepa.embed is."""

import sys
import types

import birdjepa.models.detect


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return birdjepa.models.detect.predict(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
main = birdjepa.models.detect.main

if __name__ == "__main__":
    sys.exit(main())
