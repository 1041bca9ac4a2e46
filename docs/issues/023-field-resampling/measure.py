"""Issue 36 item 5: our resamplers against soxr HQ in log-mel terms, and their CPU cost.

    .venv/bin/python docs/issues/023-field-resampling/measure.py [--repeats 30]

Accuracy: bird-like field recordings (tests/test_audio_resample.py's generator: low-frequency
background at -30 dBFS, a white floor at -62 dBFS, harmonic chirps up to 20 kHz), 8 s, written as
16-bit FLAC and decoded, at 16, 22.05, 44.1 and 48 kHz; each filter's log-mel
(birdjepa.audio.fbank at 32 kHz) against soxr HQ's: relative L2 of the whole matrix and mean
|difference| in its top 16 mel bins; soxr VHQ against HQ for scale. Response: each
resampler's gain at tones near 16 kHz (48 kHz input). Speed: CPU time
(time.process_time, best of --repeats) of resampling 6 s of 44.1 and 48 kHz audio to 32 kHz, the
resampler built and warm (as the loader's per-worker cache holds it); soxr HQ for scale.
"""

import argparse
import pathlib
import sys
import tempfile
import time
from functools import partial

import numpy as np
import soundfile
import soxr

import birdjepa.audio

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from test_audio_resample import field_recording, log_mel_figures  # noqa: E402

DST = 32000
FILTERS = ("rubato-bh2-1024", "soxr-hq")


def cell(ours: np.ndarray, ref: np.ndarray) -> str:
    rel, top = log_mel_figures(ours, ref)
    return f"{rel:.2e} / {top:.4f}"


def accuracy(rates=(16000, 22050, 44100, 48000), seeds=(0, 1), seconds=8.0) -> None:
    print("| rate | recording | rubato-bh2-1024 (before) | soxr-hq (after) | soxr VHQ vs HQ |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for src in rates:
            for seed in seeds:
                path = pathlib.Path(tmp) / f"{src}-{seed}.flac"
                soundfile.write(path, field_recording(src, seconds, seed), src, subtype="PCM_16")
                x, _ = birdjepa.audio.decode(path)
                hq = soxr.resample(x, src, DST, quality="HQ")
                cells = []
                for name in FILTERS:
                    ours = birdjepa.audio.resample(x, src, DST, resampler=name)
                    cells.append(cell(ours, hq))
                vhq = soxr.resample(x, src, DST, quality="VHQ")
                cells.append(cell(vhq, hq))
                print(f"| {src} | seed {seed} | " + " | ".join(cells) + " |")


def response(src: int = 48000, tones=(14000, 14600, 15000, 15300, 15500, 15800, 15950, 16200)):
    """Gain (dB) of each resampler at tones near the output Nyquist frequency: a 1 s sine,
    resampled, its RMS away from the edges against the input's."""
    print(f"\n| {src} Hz tone | rubato-bh2-1024 (before) | soxr-hq (after) | soxr HQ | soxr VHQ |")
    print("| --- | --- | --- | --- | --- |")
    for f in tones:
        x = (0.5 * np.sin(2 * np.pi * f * np.arange(src) / src)).astype(np.float32)
        ys = [birdjepa.audio.resample(x, src, DST, resampler=n) for n in FILTERS]
        ys += [soxr.resample(x, src, DST, quality=q) for q in ("HQ", "VHQ")]
        db = [20 * np.log10(max(np.sqrt(np.mean(y[2000:-2000].astype(np.float64) ** 2)), 1e-12)
                            / (0.5 / np.sqrt(2))) for y in ys]
        print(f"| {f} | " + " | ".join(f"{d:.1f}" for d in db) + " |")


def cpu_ms(fn, repeats: int, inner: int = 5) -> float:
    """Best CPU milliseconds per call over `repeats` timings of `inner` calls."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(inner):
            fn()
        best = min(best, (time.process_time() - t0) / inner)
    return best * 1e3


def speed(repeats: int) -> None:
    print("\n| rate | rubato-bh2-1024 (before) | soxr-hq (after) | soxr HQ (libsoxr) |")
    print("| --- | --- | --- | --- |")
    for src in (44100, 48000):
        x = field_recording(src, 6.0, 0).astype(np.float32)
        calls = [partial(birdjepa.audio.resample, x, src, DST, resampler=n) for n in FILTERS]
        calls.append(partial(soxr.resample, x, src, DST, quality="HQ"))
        cells = [cpu_ms(call, repeats) for call in calls]
        print(f"| {src} | " + " | ".join(f"{c:.2f} ms" for c in cells) + " |")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=30)
    a = p.parse_args()
    accuracy()
    response()
    speed(a.repeats)
