"""Issue 36 item 5, the design step: which Kaiser-windowed sinc matches soxr HQ?

    .venv/bin/python docs/issues/023-field-resampling/sweep.py

A prototype in numpy/scipy (scipy.signal.resample_poly with our own filter at the upsampled
rate), not birdjepa's Rust filter: the passband end (fraction of the lower Nyquist frequency;
soxr.h documents 0.913) and the stopband attenuation (HQ is soxr's 20-bit quality, ~120 dB) of
a Kaiser design with its stopband from the Nyquist frequency on, each against soxr HQ's log-mel
(relative L2 / top-16-bin mean |diff|) on one 6 s field recording per rate (measure.py's).
"""

import math
import pathlib
import sys

import numpy as np
import scipy.signal
import soxr

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests"))
from test_audio_resample import field_recording, log_mel_figures  # noqa: E402

DST = 32000
RATES = (48000, 44100, 22050, 16000)


def kaiser_resample(x: np.ndarray, src: int, passband_end: float, att_db: float) -> np.ndarray:
    g = math.gcd(src, DST)
    up, down = DST // g, src // g
    nyquist = min(src, DST) / 2
    cutoff = (passband_end + 1) / 2 * nyquist
    width = (1 - passband_end) * nyquist
    beta = 0.1102 * (att_db - 8.7)
    taps = math.ceil((att_db - 7.95) / (2.285 * 2 * np.pi * width / src))
    n = taps * up | 1
    t = np.arange(n) - (n - 1) / 2
    h = 2 * cutoff / (src * up) * np.sinc(2 * cutoff / (src * up) * t) * np.kaiser(n, beta)
    return scipy.signal.resample_poly(x, up, down, window=h)


def main() -> None:
    xs = {src: field_recording(src, 6.0, 0) for src in RATES}
    hq = {src: soxr.resample(x, src, DST, quality="HQ") for src, x in xs.items()}
    print("| passband end | attenuation | " + " | ".join(f"{s} Hz" for s in RATES) + " |")
    print("| --- | --- |" + " --- |" * len(RATES))
    for pe in (0.905, 0.912, 0.913, 0.9136, 0.915, 0.92):
        for att in (120.4, 126.0, 130.0, 132.0):
            cells = []
            for src in RATES:
                y = kaiser_resample(xs[src], src, pe, att).astype(np.float32)
                rel, top = log_mel_figures(y, hq[src])
                cells.append(f"{rel:.1e} / {top:.4f}")
            print(f"| {pe} | {att} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
