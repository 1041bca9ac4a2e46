"""`python -m birdjepa.evaluate --cfg configs/eval-demo.toml [--encoders RUN_DIR ...]` (one
`--encoders` per run directory).

A bad setting, split, class list or encoder is one line on stderr and exit status 2, before
anything is embedded (see birdjepa.evaluate.checks and runner.load_encoders); so are audio that
fails to decode beyond max_failure_fraction (birdjepa.TooManyFailuresError) and non-finite
embeddings (runner.check_finite), found while embedding.
"""

import logging
import sys

import birdjepa.common.cli_args as cli_args
import birdjepa.common.errors as errors
import birdjepa.config
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.runner as runner

_NOISE = ("RuntimeError('Event loop is closed')", "sys.meta_path is None")
_LEFTOVER = "coroutine object _read_array_index_and_device_put"


def quiet_orbax() -> None:
    """For the rest of this process (`python -m birdjepa.evaluate` calls it): a failed
    checkpoint read leaves Orbax/tensorstore read coroutines that Python finalises at exit with
    tracebacks ("Event loop is closed", 140 of them behind a one-line error): drop exactly
    those, every other unraisable exception still prints. Orbax's absl warnings about opening a
    checkpoint read-only (every evaluation does) and asyncio's "exception was never retrieved"
    for the same failed reads are not shown either: evaluate runs no asyncio code of its own.
    The error itself is reported, in one line."""
    previous = sys.unraisablehook

    def hook(args):
        if _LEFTOVER in repr(args.object) or any(n in repr(args.exc_value) for n in _NOISE):
            return
        previous(args)

    sys.unraisablehook = hook
    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = eval_config.cli(argv)
        runner.run(cfg)
    except (birdjepa.config.ConfigError, FileNotFoundError, KeyError, errors.Error) as e:
        return cli_args.fail(e)  # data errors included
    return 0


def entry() -> int:
    """The `birdjepa-evaluate` script ([project.scripts]): `python -m birdjepa.evaluate`."""
    quiet_orbax()
    return main()


if __name__ == "__main__":
    quiet_orbax()
    sys.exit(main())
