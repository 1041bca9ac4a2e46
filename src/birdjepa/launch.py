"""`python -m birdjepa.launch --sweep FILE ...`: the public name of `birdjepa.runtime.launch`
(sweeps on Slurm or local processes). A plain re-export of the same names, and an entry point."""

import sys

from birdjepa.runtime.launch import (
    LaunchConfig,
    SlurmConfig,
    SweepError,
    check_shards,
    is_complete,
    launch,
    load_sweep,
    main,
    make_executor,
    resolve,
    run_id_for,
)

__all__ = ["LaunchConfig", "SlurmConfig", "SweepError", "check_shards", "is_complete", "launch",
           "load_sweep", "main", "make_executor", "resolve", "run_id_for"]

if __name__ == "__main__":
    sys.exit(main())
