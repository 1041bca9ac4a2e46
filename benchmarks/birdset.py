"""BirdSet-as-published benchmark: `python -m benchmarks birdset [--only NAME ...]`.

* `paths`: the same recordings path-only (BirdSet's cache) and packed into embedded-bytes
  shards (`birdjepa.sources pack`), page cache warm: train clips per CPU-second of the process
  (all threads), 1 worker; target: path-only within 1.15x of embedded.
* `open`: opening a 500,000-row path-only dataset in 8 shards (HF Audio struct, bytes null):
  seconds and peak RSS of a fresh process that opens a Loader (path check included); target
  < 2 s and < 300 MB. The same for 500,000 embedded rows (1 byte each) beside it.
* `events`: long mostly-silent recordings (60 s of faint noise, 2 short calls each, the
  events known): the fraction of 5 s train crops that overlap an event, crop = "random" vs
  "events", same rows; target >= 95 % for events.
* `pack`: packing throughput (audio MB/s) against reading the same files sequentially
  (Python, 1 MB reads, page cache warm, the peer: what the file system gives a reader); target
  >= 80 % of the read speed.

Everything is written to a temporary directory (or `--dir`) from the demo generator.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

import birdjepa.common.cli_args as cli_args
import birdjepa.data
import birdjepa.data.pack
import birdjepa.demo_data.birdset as birdset
import birdjepa.demo_data.catalogue as catalogue
import birdjepa.demo_data.codecs as codecs

NAMES = [s.code for s in catalogue.SPECIES]


def _cpu() -> float:
    return time.process_time()


def bench_paths(d: str, n_batches: int = 12) -> dict:
    s = birdset.write(os.path.join(d, "bs"), n_recordings=48, n_soundscapes=1, n_segments=1,
                      min_s=10.0, max_s=30.0, overwrite=True)
    packed = os.path.join(d, "packed")
    birdjepa.data.pack.pack(birdjepa.data.resolve_shards(s["train"]), packed, shard_mb=4,
                            progress=False)
    out = {}
    for name, spec in (("path-only", s["train"]), ("embedded", packed)):
        kw = dict(batch_size=16, label_column="ebird_code", n_workers=1, seed=1)
        with birdjepa.data.Loader(spec, **kw) as warm:  # page cache warm, allocator warm
            for _ in range(n_batches):
                next(warm)
        best = 0.0
        for rep in range(3):
            with birdjepa.data.Loader(spec, **{**kw, "seed": 2 + rep}) as loader:
                c0, t0 = _cpu(), time.perf_counter()
                for _ in range(n_batches):
                    next(loader)
                cpu, wall = _cpu() - c0, time.perf_counter() - t0
            best = max(best, 16 * n_batches / cpu)
        out[name] = {"clips_per_cpu_s": best, "last_wall_s": wall}
    out["ratio_embedded_over_path_only"] = (out["embedded"]["clips_per_cpu_s"]
                                            / out["path-only"]["clips_per_cpu_s"])
    out["ok"] = out["ratio_embedded_over_path_only"] <= 1.15
    return out


def _write_big(d: str, n_rows: int, n_shards: int, path_only: bool, target: str) -> str:
    os.makedirs(d, exist_ok=True)
    schema = pa.schema([("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("label", pa.int64())])
    per = n_rows // n_shards
    for k in range(n_shards):
        with pa.OSFile(os.path.join(d, f"data-{k:05d}-of-{n_shards:05d}.arrow"), "wb") as f, \
                pa.ipc.new_stream(f, schema) as w:
            for a in range(0, per, 1000):
                n = min(1000, per - a)
                paths = pa.array([f"{target}"] * n)
                data = pa.array([None] * n, pa.binary()) if path_only else \
                    pa.array([b"x"] * n, pa.binary())
                audio = pa.StructArray.from_arrays([data, paths], names=["bytes", "path"])
                w.write_batch(pa.RecordBatch.from_arrays(
                    [audio, pa.array(np.arange(n) % 100, pa.int64())], schema=schema))
    return d


_OPEN = """
import json, resource, sys, time
t0 = time.perf_counter()
import birdjepa.data
t1 = time.perf_counter()
loader = birdjepa.data.Loader(sys.argv[1], batch_size=8, n_workers=1, transform="audio")
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "dataset_open_s": loader.open_s,
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
loader.close()
"""


def bench_open(d: str, n_rows: int = 500_000) -> dict:
    target = os.path.join(d, "one.ogg")
    x = (0.01 * np.random.default_rng(0).standard_normal((32000 * 6, 1))).astype(np.float32)
    with open(target, "wb") as f:
        f.write(codecs.encode(x, 32000, "ogg"))
    out = {}
    for name, path_only in (("path-only", True), ("embedded", False)):
        ds = _write_big(os.path.join(d, f"big-{name}"), n_rows, 8, path_only, target)
        runs = [json.loads(subprocess.run([sys.executable, "-c", _OPEN, ds], check=True,
                                          capture_output=True, text=True).stdout)
                for _ in range(3)]
        out[name] = min(runs, key=lambda r: r["open_s"])
    p = out["path-only"]
    out["ok"] = p["open_s"] < 2.0 and p["max_rss_mb"] < 300
    return out


def _silent_corpus(d: str, n: int = 32, seconds: float = 60.0, seed: int = 0) -> str:
    """Faint noise with two 0.4 s calls per recording at random places; events exact."""
    rng = np.random.default_rng(seed)
    audio = os.path.join(d, "audio")
    os.makedirs(audio, exist_ok=True)
    rows = []
    for i in range(n):
        x = (0.002 * rng.standard_normal(int(seconds * 32000))).astype(np.float32)
        events = []
        for t in sorted(rng.uniform(1.0, seconds - 1.0, 2)):
            a = int(t * 32000)
            k = np.arange(int(0.4 * 32000))
            x[a:a + len(k)] += 0.5 * np.sin(2 * np.pi * 3000 * k / 32000).astype(np.float32)
            events.append([round(t, 4), round(t + 0.4, 4)])
        path = os.path.join(audio, f"XC{i}.ogg")
        with open(path, "wb") as f:
            f.write(codecs.encode(x[:, None], 32000, "ogg", i))
        rows.append(birdset.row(path, label=i % 12, labels=[i % 12], events=events,
                                length=int(seconds)))
    spec = os.path.join(d, "ds", "data.arrow")
    os.makedirs(os.path.dirname(spec), exist_ok=True)
    birdset.write_split(spec, rows, birdset.features(NAMES))
    return spec


def bench_events(d: str, n_batches: int = 16) -> dict:
    spec = _silent_corpus(os.path.join(d, "silent"))
    events = {i: r["detected_events"] for i, r in enumerate(
        pa.ipc.open_stream(pa.memory_map(spec)).read_all().to_pylist())}
    out = {}
    for crop in ("random", "events"):
        hits = total = 0
        with birdjepa.data.Loader(spec, batch_size=8, label_column="ebird_code", crop=crop,
                                  n_workers=2, seed=5) as loader:
            for _ in range(n_batches):
                b = next(loader)
                for s, i in zip(b["start_s"], b["index"], strict=True):
                    total += 1
                    hits += any(a < s + 5.0 and e > s for a, e in events[int(i)])
        out[crop] = {"crops": total, "overlap_fraction": hits / total}
    out["ok"] = out["events"]["overlap_fraction"] >= 0.95
    return out


def bench_pack(d: str, n_rows: int = 1200) -> dict:
    s = birdset.write(os.path.join(d, "bs-pack"), n_recordings=24, n_soundscapes=1,
                      n_segments=1, min_s=20.0, max_s=60.0, overwrite=True)
    (src,) = birdjepa.data.resolve_shards(s["train"])
    rows = pa.ipc.open_stream(pa.memory_map(src)).read_all().to_pylist()
    many = [{**rows[i % len(rows)], "filepath": f"row{i}"} for i in range(n_rows)]
    spec = os.path.join(d, "pack-src", "data.arrow")
    os.makedirs(os.path.dirname(spec), exist_ok=True)
    birdset.write_split(spec, many, birdset.features(NAMES))
    files = [r["audio"]["path"] for r in many]
    total = sum(os.path.getsize(f) for f in files)
    best_read = 0.0
    for _ in range(3):  # the peer: read every file in 1 MB blocks, sequentially
        t0 = time.perf_counter()
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                while fh.read(1 << 20):
                    pass
        best_read = max(best_read, total / (time.perf_counter() - t0))
    direct = _direct_read_mb_s(d)
    out = {"audio_mb": total / 1e6, "read_warm_mb_s": best_read / 1e6,
           "disk_read_direct_mb_s": direct, "disk_write_mb_s": _write_mb_s(d)}
    # Into the same disk, and into memory (/dev/shm: what pack itself sustains).
    for name, where in (("disk", d), ("shm", "/dev/shm" if os.path.isdir("/dev/shm") else d)):
        best = 0.0
        for _ in range(3):
            dst = tempfile.mkdtemp(dir=where, prefix="birdjepa-pack-")
            t0 = time.perf_counter()
            birdjepa.data.pack.pack([spec], dst, shard_mb=64, workers=2, progress=False)
            best = max(best, total / (time.perf_counter() - t0))
            shutil.rmtree(dst)
        out[f"pack_to_{name}_mb_s"] = best / 1e6
    out["fraction_of_direct_read"] = out["pack_to_disk_mb_s"] / direct
    out["fraction_of_direct_read_writing_to_shm"] = out["pack_to_shm_mb_s"] / direct
    out["ok"] = out["fraction_of_direct_read"] >= 0.8
    return out


def _direct_read_mb_s(d: str, mb: int = 512) -> float:
    """The disk's sequential read speed: dd with O_DIRECT (no page cache) of a fresh file."""
    path = os.path.join(d, "seq.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(mb << 20))
        os.fsync(f.fileno())
    r = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct"],
                       capture_output=True, text=True, check=True).stderr
    os.unlink(path)
    secs = float(r.strip().splitlines()[-1].split(" s,")[0].split(",")[-1])
    return mb * (1 << 20) / secs / 1e6


def _write_mb_s(d: str, mb: int = 512) -> float:
    """The disk's sequential write speed: dd with fdatasync."""
    path = os.path.join(d, "seqw.bin")
    r = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}",
                        "conv=fdatasync"], capture_output=True, text=True, check=True).stderr
    os.unlink(path)
    secs = float(r.strip().splitlines()[-1].split(" s,")[0].split(",")[-1])
    return mb * (1 << 20) / secs / 1e6


BENCHES = {"paths": bench_paths, "open": bench_open, "events": bench_events, "pack": bench_pack}


def main(argv: list[str]) -> int:
    p = cli_args.Parser("python -m benchmarks birdset", __doc__)
    p.add_list("only", choices=sorted(BENCHES), help="a benchmark to run (repeat for more; "
               "default: every one)")
    p.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    a = p.parse_args(argv)
    a.only = a.only or list(BENCHES)
    with tempfile.TemporaryDirectory() as tmp:
        d = a.dir or tmp
        for name in a.only:
            t0 = time.perf_counter()
            os.makedirs(os.path.join(d, name), exist_ok=True)
            res = BENCHES[name](os.path.join(d, name))
            print(f"{name} ({time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f}): "
                  f"{json.dumps(res, indent=1)}", flush=True)
    return 0
