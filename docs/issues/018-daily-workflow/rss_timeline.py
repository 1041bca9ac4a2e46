"""Where the peak RSS of embedding one long file comes from: the feature pipeline alone, then
`birdjepa.embed` (features + the encoder). Run from the repository root:
`PYTHONPATH=src:. python docs/issues/018-daily-workflow/rss_timeline.py [MINUTES]`."""

import pathlib
import sys
import tempfile
import threading
import time

import birdjepa
import birdjepa.models.inference as inference
from benchmarks.embed import encoder, recording


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) / 1024


def main(minutes: float) -> None:
    enc = encoder("debug")
    with tempfile.TemporaryDirectory() as tmp:
        f = recording(pathlib.Path(tmp) / "r.flac", 60.0 * minutes)
        samples, done = [], threading.Event()

        def watch():
            while not done.is_set():
                samples.append(rss_mib())
                time.sleep(0.05)

        t = threading.Thread(target=watch)
        t.start()
        base = rss_mib()
        for _ in inference.features([f], inference.Windows(window_s=5.0), batch_size=64):
            pass
        print(f"features only: peak {max(samples):.0f} MiB (start {base:.0f} MiB)")
        samples.clear()
        birdjepa.embeddings(enc, [f], window_s=5.0)
        done.set()
        t.join()
        print(f"embed: peak {max(samples):.0f} MiB, after {rss_mib():.0f} MiB")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0)
