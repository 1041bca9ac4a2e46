"""Sizes bounded by the memory they imply (issue 23): no arbitrary caps, and no allocation
abort or hang at start-up. Plain data, no JAX; birdjepa.config.validate calls `check`."""

import math

import birdjepa._rs
import birdjepa.config.losses as losses

require = losses.require


BATCHES_IN_FLIGHT = 6
"""Host batches alive at once in a run: the loader's ready queue, the batch being assembled,
the prefetch thread's batch and its device copy (issue 23: 4.3 GB RSS at batch 8 with
n_local=1000, ~0.79 GB of local crops per batch)."""


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check(cfg) -> None:
    """Sizes bounded by what they imply: the bytes of n_classes (probe and supervised head
    weights with their gradients and two Adam moments, and a batch of multi-hot targets per
    batch in flight) and of n_local (a batch of crops per batch in flight) must fit in this
    machine's memory (the loader's own rules, such as n_local against the crop positions of
    the window, are Rust's: birdjepa.data.LoaderConfig.check)."""
    ram, d = birdjepa._rs.physical_memory(), cfg.data
    mats = 2 if cfg.objective.name == "supervised" else 1
    per_class = 4 * (4 * mats * (cfg.model.width + 1) + cfg.batch_size * BATCHES_IN_FLIGHT)
    require(cfg.n_classes * per_class <= ram, "n_classes",
             f"at most {ram // per_class:,} ({_gib(per_class * cfg.n_classes)} of probe/head "
             f"weights, optimiser state and multi-hot targets at this value; this machine has "
             f"{_gib(ram)})", cfg.n_classes)
    if d.n_local:
        per_crop = 4 * d.local_frames * d.n_mels * cfg.batch_size * BATCHES_IN_FLIGHT
        require(d.n_local * per_crop <= ram // 2, "data.n_local",
                 f"at most {ram // 2 // per_crop} (local crops of {BATCHES_IN_FLIGHT} batches in "
                 f"flight take {_gib(d.n_local * per_crop)}; half this machine's memory is "
                 f"{_gib(ram // 2)})", d.n_local)


def local_frames(d, patch_t: int) -> int:
    """`data.local_frames` derived from `d.local_s`: the crop's Kaldi frames, at most n_frames,
    cut to whole patch rows of `patch_t` frames (2 s: 198 -> 192); never more than the crop has."""
    frames = birdjepa._rs.kaldi_frames(d.local_s) if math.isfinite(d.local_s) else 0
    frames = min(frames, d.n_frames) // patch_t * patch_t
    if d.n_local:
        require(frames >= 1, "data.local_s", f"seconds giving at least model.patch[0]={patch_t} "
                "frames", d.local_s)
    return max(frames, patch_t)
