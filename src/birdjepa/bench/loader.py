"""Loader benchmark: `python -m birdjepa.bench loader [--transform audio|debug] [--data DIR]`.

Prints, for the Rust loader with 1 and 2 workers: clips/s, clips/s per core (clips per second of
process CPU time), peak RSS, time to open the shards, and time from restoring a state to the first
batch; then the same clips through a plain-Python peer (soundfile seek + soxr + vectorised numpy
fbank) run as a multiprocessing pool of the same size feeding batches to the parent, and the
ratio. Without --data it writes a synthetic corpus (FLAC/OGG noise + chirps, 8-40 s recordings at
mixed sample rates, HF Arrow schema) to a temporary directory.
"""

import argparse
import io
import math
import multiprocessing
import os
import tempfile
import threading
import time

import numpy as np

import birdjepa.data

# -- a plain-Python peer ---------------------------------------------------------------------------

def _mel_banks(n_mels: int, n_fft: int, sr: int, low: float = 20.0) -> np.ndarray:
    """Kaldi-style triangular mel filters on the mel scale 1127 ln(1 + f / 700)."""
    mel = lambda f: 1127.0 * np.log1p(np.asarray(f) / 700.0)  # noqa: E731
    lo, hi = mel(low), mel(sr / 2)
    centres = np.linspace(lo, hi, n_mels + 2)
    freqs = mel(np.arange(n_fft // 2 + 1) * sr / n_fft)
    left, centre, right = centres[:-2, None], centres[1:-1, None], centres[2:, None]
    up = (freqs - left) / (centre - left)
    down = (right - freqs) / (right - centre)
    return np.maximum(0.0, np.minimum(up, down)).astype(np.float32)


def numpy_fbank(x: np.ndarray, sr: int, n_mels: int = 128) -> np.ndarray:
    """Kaldi-compatible log-mel fbank (25 ms / 10 ms, povey window, pre-emphasis 0.97, no dither),
    vectorised over frames. Returns (frames, n_mels) float32."""
    win, hop = int(0.025 * sr), int(0.010 * sr)
    n_fft = 1 << (win - 1).bit_length()
    if len(x) < win:
        x = np.pad(x, (0, win - len(x)))
    n = 1 + (len(x) - win) // hop
    frames = np.lib.stride_tricks.sliding_window_view(x.astype(np.float32), win)[::hop][:n].copy()
    frames -= frames.mean(axis=1, keepdims=True)
    frames[:, 1:] -= 0.97 * frames[:, :-1]
    frames[:, 0] *= 1 - 0.97
    frames *= (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / (win - 1))) ** 0.85
    power = np.abs(np.fft.rfft(frames, n=n_fft)) ** 2
    mel = power.astype(np.float32) @ _mel_banks(n_mels, n_fft, sr).T
    return np.log(np.maximum(mel, np.finfo(np.float32).eps))


def _peer_clip(args):
    data, crop, clip_s, sr, n_frames, n_mels, mean, std = args
    import soundfile
    import soxr

    with soundfile.SoundFile(io.BytesIO(data)) as f:
        length = f.frames / f.samplerate
        start = int(crop * max(0.0, length - clip_s) * f.samplerate)
        f.seek(start)
        x = f.read(int(clip_s * f.samplerate), dtype="float32", always_2d=True).mean(axis=1)
        native = f.samplerate
    if native != sr:
        x = soxr.resample(x, native, sr)
    feats = numpy_fbank(x, sr, n_mels)[:n_frames]
    out = np.zeros((n_frames, n_mels), np.float32)
    out[: len(feats)] = (feats - mean) / (2 * std)
    return out


def run_peer(paths, n_clips, batch_size, n_workers, clip_s=5.0, sr=32000):
    """Clips/s of the Python peer: a process pool decoding clips, batches assembled in the parent."""
    import pyarrow.ipc

    blobs = []
    for p in paths:
        with open(p, "rb") as f:
            is_file = f.read(6) == b"ARROW1"
        tbl = (pyarrow.ipc.open_file(p) if is_file else pyarrow.ipc.open_stream(p)).read_all()
        blobs += [a["bytes"] for a in tbl.column("audio").to_pylist()]
        if len(blobs) >= n_clips:
            break
    rng = np.random.default_rng(0)
    jobs = [(blobs[i % len(blobs)], float(rng.random()), clip_s, sr, 512, 128, -7.2, 4.43)
            for i in range(n_clips)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(n_workers) as pool:
        pool.map(_peer_clip, jobs[: n_workers * 2])  # warm up imports
        t0 = time.perf_counter()
        batch = []
        for x in pool.imap(_peer_clip, jobs, chunksize=4):
            batch.append(x)
            if len(batch) == batch_size:
                np.stack(batch)
                batch = []
        wall = time.perf_counter() - t0
    return n_clips / wall


# -- the Rust loader -------------------------------------------------------------------------------

class _PeakRss:
    """Samples this process's RSS every 20 ms."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.is_set():
            with open("/proc/self/statm") as f:
                self.peak = max(self.peak, int(f.read().split()[1]) * page)
            time.sleep(0.02)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def run_rust(paths, n_batches, batch_size, n_workers, transform):
    kw = dict(batch_size=batch_size, n_workers=n_workers, transform=transform)
    with _PeakRss() as rss:
        loader = birdjepa.data.Loader(paths, **kw)
        it = iter(loader)
        next(it)  # warm-up: threads started, first batch
        cpu0, t0 = time.process_time(), time.perf_counter()
        for _ in range(n_batches):
            next(it)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        state = loader.state_dict()
        loader.close()
        t1 = time.perf_counter()
        with birdjepa.data.Loader(paths, state=state, **kw) as resumed:
            open_s = resumed.open_s
            next(iter(resumed))
        restore_s = time.perf_counter() - t1
    clips = n_batches * batch_size
    return {
        "clips_per_s": clips / wall,
        "clips_per_cpu_s": clips / cpu,
        "peak_rss_mb": rss.peak / 2**20,
        "open_s": open_s,
        "restore_to_first_batch_s": restore_s,
    }


# -- a synthetic corpus ----------------------------------------------------------------------------

def write_corpus(d: str, n_rows: int, n_shards: int = 4) -> list[str]:
    import pyarrow as pa
    import soundfile

    rng = np.random.default_rng(0)
    audio_t = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    paths, per = [], math.ceil(n_rows / n_shards)
    for s in range(n_shards):
        rows, labels = [], []
        for i in range(s * per, min(n_rows, (s + 1) * per)):
            sr = int(rng.choice([22050, 32000, 44100, 48000]))
            dur = float(rng.uniform(8, 40))
            t = np.arange(int(sr * dur)) / sr
            x = 0.05 * rng.standard_normal(len(t)) + 0.3 * np.sin(2 * np.pi * (2000 + 500 * t) * t)
            buf = io.BytesIO()
            fmt = "FLAC" if i % 2 else "OGG"
            soundfile.write(buf, x.astype(np.float32), sr, format=fmt)
            rows.append({"bytes": buf.getvalue(), "path": f"{i}.{fmt.lower()}"})
            labels.append(i % 50)
        tbl = pa.table({"audio": pa.array(rows, type=audio_t), "label": pa.array(labels, pa.int64())})
        path = os.path.join(d, f"data-{s:05d}-of-{n_shards:05d}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, tbl.schema) as w:
            for b in tbl.to_batches(max_chunksize=100):
                w.write_batch(b)
        paths.append(path)
    return paths


def write_sorted_corpus(d: str, n_shards: int = 4, rows: int = 8000, n_classes: int = 40):
    """Shards of tiny payloads sorted by label (the worst case for a sequential reader)."""
    import pyarrow as pa

    audio_t = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    total, paths = n_shards * rows, []
    for s in range(n_shards):
        idx = range(s * rows, (s + 1) * rows)
        audio = pa.array([{"bytes": b"%d" % i, "path": ""} for i in idx], type=audio_t)
        label = pa.array([i * n_classes // total for i in idx], pa.int64())
        tbl = pa.table({"audio": audio, "label": label})
        path = os.path.join(d, f"sorted-{s:03d}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, tbl.schema) as w:
            w.write_table(tbl, max_chunksize=1000)
        paths.append(path)
    return paths


def quality(batch_size: int) -> None:
    """Shuffle quality of several (block_size, shuffle_window) settings vs a uniform permutation."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_sorted_corpus(tmp)
        print(f"4 shards x 8000 rows, 40 classes, rows sorted by label; batch {batch_size}; "
              "one epoch")
        print(f"{'block':>6} {'window':>7} {'entropy':>8} {'uniform':>8} {'ratio':>6} "
              f"{'shard ac':>9} {'uniform ac':>10}")
        settings = [(32000, 1), (64, 4096), (64, 8192), (32, 8192), (16, 4096), (16, 8192),
                    (32, 16384)]
        for bs, w in settings:
            q = birdjepa.data.shuffle_quality(paths, batch_size=batch_size, block_size=bs,
                                              shuffle_window=w)
            lo, un = q["loader"], q["uniform"]
            print(f"{bs:>6} {w:>7} {lo['label_entropy']:8.4f} {un['label_entropy']:8.4f} "
                  f"{q['entropy_ratio']:6.4f} {lo['shard_autocorr']:9.4f} "
                  f"{un['shard_autocorr']:10.4f}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m birdjepa.bench loader", description=__doc__)
    p.add_argument("--data", help="directory of Arrow shards (default: write a synthetic corpus)")
    p.add_argument("--rows", type=int, default=400, help="rows of the synthetic corpus")
    p.add_argument("--transform", default="audio", choices=["audio", "debug"])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batches", type=int, default=8, help="timed batches per configuration")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--quality", action="store_true",
                   help="only measure shuffle quality on a label-sorted corpus (no decoding)")
    args = p.parse_args(argv)
    if args.quality:
        quality(256 if args.batch_size == 32 else args.batch_size)
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        paths = birdjepa.data.resolve_shards(args.data) if args.data else write_corpus(tmp, args.rows)
        if not args.data:
            print(f"wrote {args.rows} synthetic recordings in {time.perf_counter() - t0:.1f} s")
        try:
            birdjepa.data.Loader(paths, batch_size=args.batch_size, transform=args.transform).close()
        except birdjepa._rs.BadArgumentError as e:
            print(f"cannot run with transform={args.transform!r}: {e}\n(try --transform debug)")
            return 1
        results = {}
        for w in (int(x) for x in args.workers.split(",")):
            r = run_rust(paths, args.batches, args.batch_size, w, args.transform)
            results[w] = r
            print(f"rust  workers={w}: {r['clips_per_s']:8.1f} clips/s  "
                  f"{r['clips_per_cpu_s']:8.1f} clips/cpu-s  peak RSS {r['peak_rss_mb']:.0f} MB  "
                  f"open {r['open_s'] * 1e3:.1f} ms  restore->first batch "
                  f"{r['restore_to_first_batch_s'] * 1e3:.0f} ms")
            if not args.no_peer and args.transform == "audio":
                py = run_peer(paths, args.batches * args.batch_size, args.batch_size, w)
                print(f"peer  workers={w}: {py:8.1f} clips/s   rust/peer = "
                      f"{r['clips_per_s'] / py:.2f}x")
        if args.transform == "debug":
            print("(transform=debug: no decoding; the Python peer comparison is skipped)")
    return 0
