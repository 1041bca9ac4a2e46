"""CPU cost of Bird-MAE embedding: `python -m benchmarks bird_mae [--windows 6 --windows 600] [--size base]`.

Random weights of the published size (the cost does not depend on the values) under the
published key names, imported with `birdjepa.models.bird_mae.convert`; then
`birdjepa.embeddings(model, (wave, 32000), window_s=5, pool="mean")` on a synthetic recording of
5 s per window (mono, 32 kHz: no resampling), once to compile (not counted) and then timed.
Prints windows per second (wall clock) and the CPU threads JAX had. The machine may be shared:
run it when nothing else is, and read the numbers as an upper bound on the cost.
"""

import os
import time

import numpy as np

import birdjepa.common.cli_args as cli_args

SIZES = {"base": (768, 12, 12), "large": (1024, 24, 16), "huge": (1280, 32, 16)}


def random_state_dict(d: int, depth: int, seed: int = 0) -> dict[str, np.ndarray]:
    import birdjepa.config.architecture
    import birdjepa.models.bird_mae as bird_mae

    cfg = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(preset="bird-mae-base", width=d, depth=depth,
                                        n_heads=SIZES["base"][2] if d == 768 else 16))
    rng = np.random.default_rng(seed)
    return {k: (0.02 * rng.standard_normal(s)).astype(np.float32)
            for k, s in bird_mae.expected_shapes(cfg, 256).items()}


def main(argv: list[str] | None = None) -> int:
    int_ = cli_args.converter(int)
    p = cli_args.Parser("python -m benchmarks bird_mae", __doc__)
    p.add_list("windows", "recording lengths to time, in 5 s windows; repeat the flag "
               "(default: 6 and 600)", type=int_)
    p.add_argument("--size", choices=sorted(SIZES), default="base", help="published size")
    p.add_argument("--batch_size", type=int_, default=64, help="windows per call")
    args = p.parse_args(argv)
    args.windows = args.windows or [6, 600]

    import birdjepa
    import birdjepa.models.bird_mae as bird_mae

    d, depth, heads = SIZES[args.size]
    model = bird_mae.convert(random_state_dict(d, depth), f"bird-mae-{args.size}")
    rng = np.random.default_rng(1)
    print(f"bird-mae-{args.size}: {os.cpu_count()} CPUs visible, affinity "
          f"{len(os.sched_getaffinity(0))}; batch_size {args.batch_size}")
    for n in args.windows:
        wave = (0.1 * rng.standard_normal(n * 5 * 32000)).astype(np.float32)
        bs = min(args.batch_size, n)
        birdjepa.embeddings(model, (wave[: 5 * 32000 * bs], 32000), pool="mean", batch_size=bs)
        t0, c0 = time.perf_counter(), time.process_time()
        out = birdjepa.embeddings(model, (wave, 32000), pool="mean", batch_size=bs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert len(out["mean"]) == n
        print(f"{n:5d} windows: {wall:8.2f} s wall, {cpu:8.2f} s CPU, "
              f"{n / wall:6.2f} windows/s, {wall / n * 1000:7.1f} ms/window")
    return 0
