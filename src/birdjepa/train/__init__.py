"""Training: `state` (init, mesh, sharding), `step` (loss, update, eval), `run` (run directory
and resume policy), `loop` (the loop, `loop.main(cfg)`), `cli` (the command line)."""
