"""`python -m birdjepa.embed MODEL SOURCE... --out FILE.parquet` (birdjepa.models.embed_cli), and
still `birdjepa.embed(encoder_or_run_dir, source, ...)`: importing this module makes it callable
as that function (birdjepa.models.inference.embed), so the package attribute works either way."""

import sys
import types

import birdjepa.models.embed_cli
import birdjepa.models.inference


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return birdjepa.models.inference.embed(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
main = birdjepa.models.embed_cli.main

if __name__ == "__main__":
    sys.exit(main())
