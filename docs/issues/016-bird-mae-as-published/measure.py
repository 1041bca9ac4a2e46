"""Before/after of issue 27: `birdjepa.embeddings(<Bird-MAE-Base on random weights>, (wave, sr),
window_s=5, pool="mean")` against the independent reference of the published pipeline
(tests/support/bird_mae_ref.py: kaldi-native-fbank, min padding, float64 forward).

Run with the package under test first on PYTHONPATH:
    PYTHONPATH=/work/main/src:tests/support python docs/issues/016-bird-mae-as-published/measure.py
    PYTHONPATH=src:tests/support python docs/issues/016-bird-mae-as-published/measure.py
Clips (synthetic bird-like chirps with harmonics and noise): 1.5 s, 5 s and 12.3 s at 32 kHz,
and 7 s of 48 kHz stereo (resampled by us; the reference resamples with soxr HQ, as a user of
the Hugging Face extractor would). Prints, per clip, the largest per-window relative L2
difference and the smallest cosine.
"""

import sys

import bird_mae_ref as ref
import numpy as np

import birdjepa
import birdjepa.models.bird_mae as bird_mae


def song(seconds, sr, channels=1, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(int(round(seconds * sr))) / sr
    f = 1500 + 2500 * (t % 1.3) / 1.3
    x = 0.3 * np.sin(2 * np.pi * np.cumsum(f) / sr) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    x = x[:, None] * (1.0 + 0.25 * np.arange(channels))[None] + 0.01 * rng.standard_normal(
        (len(t), channels))
    return (x[:, 0] if channels == 1 else x).astype(np.float32)


def main() -> int:
    d, depth, heads = ref.SIZES["base"]
    sd = ref.random_state_dict(d, depth, seed=2)
    model = bird_mae.convert(sd, "bird-mae-base")
    print(f"package: {birdjepa.__file__}")
    for name, (seconds, sr, ch) in {"1.5 s": (1.5, 32000, 1), "5 s": (5.0, 32000, 1),
                                    "12.3 s": (12.3, 32000, 1),
                                    "7 s 48k stereo": (7.0, 48000, 2)}.items():
        wave = song(seconds, sr, ch, seed=3)
        w32 = ref.to_mono_32k(wave, sr)
        n = ref.SR * 5
        k = 1 + max(0, -(-(len(w32) - n) // n))
        want = ref.forward(sd, np.stack([ref.features(w32[i * n:]) for i in range(k)]), heads)
        got = np.asarray(birdjepa.embeddings(model, (wave, sr), window_s=5, pool="mean")["emb_mean"],
                         np.float64)
        rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
        cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        print(f"{name:>15}: {k} window(s), relative L2 max {rel.max():.2e}, "
              f"cosine min {cos.min():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
