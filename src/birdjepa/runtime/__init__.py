"""Run infrastructure below training: the run directory (`rundir`), Orbax checkpoints
(`checkpoint`, `integrity`), stop signals (`preemption`), `jax.distributed` (`distributed`),
Slurm's environment (`slurm_env`) and compile tracking (`compiles`). Nothing here imports the
model or the training loop; launching a run (sweeps, the submitit job) is birdjepa.launch."""
