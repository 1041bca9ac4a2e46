"""Will a config fit, and use the fused kernels, on a given GPU? Answered without the GPU, from
XLA's GPU compiler: `python -m benchmarks plan` (and `make gpu-plan`) compile the real train step
for the target configs in `targets/` and record one row per compile; this package holds the
parts that need no JAX: the GPU kinds (`targets`), and the fit rule, the choice of settings, the
rows' schema and the plan file (`rules`), which `python -m birdjepa.launch --dry_run` reads."""
