"""Benchmark `birdjepa.embeddings` on small and long jobs: `python -m benchmarks embed CASE [...]`.

Cases (one per process, so peak RSS is the case's own; run the same command with
PYTHONPATH=<other checkout>/src to compare two versions: only the public API is used):

- `small [--batch_size N]`: wall seconds to embed one 30 s recording as 6 windows of 5 s with a
  Bird-MAE-Base-shaped encoder (random weights: the compute is the architecture's, the weights are
  not published on any hub reachable here), model construction excluded.
- `rate [--n_windows 600] [--preset vit-s]`: windows per second over n_windows 5 s windows of
  60 s recordings, default batch size, compile included (what a user waits for).
- `memory --minutes M --files F`: peak RSS (MiB) of embedding F recordings of M minutes each
  (FLAC, 32 kHz mono) with a small encoder: the transform and batching, not the model, dominate.
"""

import pathlib
import resource
import tempfile
import time

import jax
import numpy as np
import soundfile

import birdjepa
import birdjepa.common.cli_args as cli_args
import birdjepa.config.architecture
import birdjepa.model

SR = 32000


def encoder(preset: str) -> birdjepa.model.ViT:
    cfg = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(preset=preset, compute_dtype="float32", remat="none"))
    return birdjepa.model.ViT(cfg, n_frames=512, n_mels=128, key=jax.random.key(0))


def recording(path: pathlib.Path, seconds: float, seed: int = 0) -> str:
    """A chirp with a little noise, written in 1-minute blocks (FLAC compresses it well)."""
    rng = np.random.default_rng(seed)
    with soundfile.SoundFile(path, "w", SR, 1, "PCM_16", format="FLAC") as f:
        for i in range(0, int(seconds * SR), 60 * SR):
            t = (i + np.arange(min(60 * SR, int(seconds * SR) - i))) / SR
            x = 0.3 * np.sin(2 * np.pi * (1500 + 1000 * np.sin(t)) * t)
            f.write((x + 0.01 * rng.standard_normal(len(t))).astype(np.float32))
    return str(path)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def small(args, tmp: pathlib.Path) -> None:
    enc = encoder("bird-mae-base")
    f = recording(tmp / "r.flac", 30.0)
    t0 = time.perf_counter()
    out = birdjepa.embeddings(enc, [f], window_s=5.0, batch_size=args.batch_size)
    dt = time.perf_counter() - t0
    print(f"small: {len(out['row'])} windows, bird-mae-base, batch_size {args.batch_size}: "
          f"{dt:.1f} s")


def rate(args, tmp: pathlib.Path) -> None:
    enc = encoder(args.preset)
    n_files = -(-args.n_windows // 12)
    files = [recording(tmp / f"r{i}.flac", 60.0, seed=i) for i in range(n_files)]
    t0 = time.perf_counter()
    out = birdjepa.embeddings(enc, files, window_s=5.0)
    dt = time.perf_counter() - t0
    n = len(out["row"])
    print(f"rate: {n} windows, {args.preset}, batch_size 64: {dt:.1f} s, {n / dt:.2f} windows/s")


def memory(args, tmp: pathlib.Path) -> None:
    enc = encoder("debug")
    files = [recording(tmp / f"r{i}.flac", 60.0 * args.minutes, seed=i)
             for i in range(args.files)]
    base = peak_rss_mib()
    t0 = time.perf_counter()
    out = birdjepa.embeddings(enc, files, window_s=5.0)
    print(f"memory: {args.files} x {args.minutes} min -> {len(out['row'])} windows in "
          f"{time.perf_counter() - t0:.1f} s; peak RSS {peak_rss_mib():.0f} MiB (before "
          f"embedding {base:.0f} MiB)")


def main(argv: list[str]) -> int:
    int_, float_ = cli_args.converter(int), cli_args.converter(float)
    p = cli_args.Parser("python -m benchmarks embed", __doc__)
    p.add_argument("case", choices=("small", "rate", "memory"))
    p.add_argument("--batch_size", type=int_, default=64, help="small: windows per call")
    p.add_argument("--n_windows", type=int_, default=600, help="rate: windows to embed")
    p.add_argument("--preset", default="vit-s", help="rate: the encoder's architecture preset")
    p.add_argument("--minutes", type=float_, default=60.0, help="memory: minutes per file")
    p.add_argument("--files", type=int_, default=1, help="memory: number of files")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        {"small": small, "rate": rate, "memory": memory}[args.case](args, pathlib.Path(tmp))
    return 0
