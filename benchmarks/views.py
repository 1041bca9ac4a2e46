"""Views from one decode: `python -m benchmarks views [--window_s S] [--local N] [--workers 1,2]`.

Two views per sample, each its own decode (view_window_s=0) against both cut from one decoded
window of `--window_s` s (and, with `--local N`, N more 2 s local crops cut from it: multi-crop)
for 1, 2, 4, 8 and 14 workers (docs/issues/008-views-from-one-decode): views/s, views per CPU-second of
the whole process and peak RSS, each configuration in a fresh process, best of --repeat. The
corpus is `benchmarks.loader`'s (60 s demo recordings by default).

`python -m benchmarks views --config vit-s [--batch_size 256] [--workers 2]`: the loader at a
training config's data settings (views, view window, frames, mels, sample rate) over `--data`
(default: the demo corpus, data/demo/train) as stored and packed by `sources pack --codec C
--sample_rate <the config's>` for each codec of `--pack` (wav,flac), with the features made on
the host (float32: before issue 46; bfloat16) and on the device (`data.features = "device"`):
clips/s, clips per CPU-second of the whole process, transform CPU per clip, peak RSS and the
ratios to the host's float32 features of the corpus as stored and of the same corpus
(docs/issues/022-gpu-kept-busy, docs/issues/028-step-beats-peer). `--after_compile`: each form also in a process that first
compiled the config's update, as a training process has (section 7 there).
"""

import dataclasses
import json
import multiprocessing
import os
import tempfile
import time

import benchmarks.configs
import benchmarks.loader as loader
import birdjepa.common.cli_args as cli_args
import birdjepa.config
import birdjepa.data
import birdjepa.data.loader_config
import birdjepa.data.pack


def bench(paths, args) -> dict:
    """Two views per sample, each its own decode (view_window_s=0) against both cut from one
    decoded window of `--window_s` s (+ `--local` 2 s local crops): views/s and views per
    CPU-second (local crops counted as views), best of --repeat."""
    workers = [int(x) for x in args.workers.split(",")]
    w_s = args.window_s
    print(f"{os.cpu_count()} cores; load average {loader._load()}; 2 views per sample, batch "
          f"{args.batch_size}, {args.batches} timed batches per run; window {w_s} s")
    print(f"{'views from':<16} {'workers':>7} {'views/s':>8} {'views/cpu-s':>11} {'peak RSS':>8} "
          f"{'buffers+300MB':>13}")
    configs = {"decode-each": dict(view_window_s=0.0), "window": dict(view_window_s=w_s)}
    if args.local:  # multi-crop: + N local crops of 2 s (192 frames) from the same window
        configs["window+local"] = dict(view_window_s=w_s, n_local=args.local, local_s=2.0,
                                       local_frames=192)
    out: dict = {}
    for w in workers:
        for name, extra in configs.items():
            best = None
            for _ in range(args.repeat):
                r = loader.run_rust_isolated(paths, args.batches, args.batch_size, w,
                                             args.transform, n_views=2, **extra)
                if best is None or r["clips_per_cpu_s"] > best["clips_per_cpu_s"]:
                    best = r
            per = 2 + extra.get("n_local", 0)  # views per sample
            vps, vpc = per * best["clips_per_s"], per * best["clips_per_cpu_s"]
            frames = 2 * loader.N_FRAMES + extra.get("n_local", 0) * 192
            budget = loader.buffer_estimate_mb(args.batch_size, w,
                                               frames_per_sample=frames)["mb"] + 300
            out[f"{w}w-{name}"] = {"views_per_s": vps, "views_per_cpu_s": vpc,
                                   "peak_rss_mb": best["peak_rss_mb"], "budget_mb": budget}
            label = name if name != "window+local" else f"+{args.local} local"
            ok = loader._verdict(best["peak_rss_mb"] <= budget)
            print(f"{label:<16} {w:>7} {vps:8.1f} {vpc:11.1f} {best['peak_rss_mb']:6.0f}MB "
                  f"{budget:6.0f}MB {ok}  {loader._load()}", flush=True)
        win, each = out[f"{w}w-window"], out[f"{w}w-decode-each"]
        ratio = win["views_per_cpu_s"] / each["views_per_cpu_s"]
        print(f"  {w} worker(s): one window / a decode each, views per CPU-s: {ratio:.2f}x "
              f"(goal >= 2x: {loader._verdict(ratio >= 2)}); views per CPU-s "
              f"{win['views_per_cpu_s']:.0f} (goal >= 200: "
              f"{loader._verdict(win['views_per_cpu_s'] >= 200)})")
    return out


def _after_compile(cfg_name: str, *run_args, **run_kw) -> dict:
    """`loader.run_rust` in a process that first compiled configs/NAME.toml's update (XLA,
    nothing allocated), as the loader of a training process runs: the allocator's arenas then
    hold what the compiler freed."""
    import benchmarks.train

    cfg = benchmarks.configs.load(cfg_name, None, "gpu")  # the config's own batch
    benchmarks.train.memory_analysis(dataclasses.replace(cfg, n_classes=cfg.n_classes or 10))
    return loader.run_rust(*run_args, **run_kw)


def _isolated(fn, *args, **kw):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args, kw)


FEATURES = {"host": {}, "host bf16": {"batch_dtype": "bfloat16"},
            "device": {"features": "device"}}
"""The loader's three forms at a config's settings: features made by its workers as float32
(before issue 46, the baseline), the same as bfloat16 (what a bfloat16 model's trainer asks for)
and the window carried for the step to featurize on the device (`data.features = "device"`)."""


def at_config(args) -> dict:
    """Clips per CPU-second at a training config's data settings (`--config`), over `--data`
    as stored and packed at the config's sample rate by `sources pack --codec C` for each C of
    `--pack`, each with the features made on the host (float32, bfloat16) and on the device
    (`FEATURES`): each form in a fresh process, best of `--repeat`; the ratios are to the host's
    float32 features of the corpus as stored (before issue 46) and of the same corpus."""
    cfg = birdjepa.config.load(benchmarks.configs.CONFIGS / f"{args.config}.toml")
    d = cfg.data
    loader_cfg = birdjepa.data.loader_config.LoaderConfig(**{
        f.name: getattr(d, f.name) for f in dataclasses.fields(birdjepa.data.loader_config.LoaderConfig)})
    loader_cfg = dataclasses.replace(loader_cfg, features="host")
    workers = [int(x) for x in args.workers.split(",")]
    data = args.data or str(benchmarks.configs.CONFIGS.parent / "data" / "demo" / "train")
    window = f"one {d.view_window_s:g} s window" if d.view_window_s else "a decode each"
    print(f"{os.cpu_count()} cores; load average {loader._load()}; configs/{args.config}.toml's data "
          f"settings: {d.n_views} view(s) of {d.n_frames} x {d.n_mels} from {window} at "
          f"{d.sample_rate} Hz; batch {args.batch_size}, {args.batches} timed batches per run, "
          f"best of {args.repeat}")
    print(f"{'corpus':<24} {'features':<10} {'workers':>7} {'clips/s':>8} {'clips/cpu-s':>11} "
          f"{'xform ms':>8} {'peak RSS':>8} {'vs stored':>9} {'vs host':>7}")
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        forms = {"as stored": data}
        for codec in [c for c in args.pack.split(",") if c]:
            out = os.path.join(tmp, codec)
            t0 = time.perf_counter()
            s = birdjepa.data.pack.pack(birdjepa.data.resolve_shards(data), out, codec=codec,
                                        sample_rate=d.sample_rate, progress=False)
            print(f"(sources pack --codec {codec} --sample_rate {d.sample_rate}: "
                  f"{s['bytes'] / 1e6:.0f} MB in {time.perf_counter() - t0:.0f} s)", flush=True)
            forms[f"packed {codec} {d.sample_rate // 1000} kHz"] = out
        kinds = [k for k in FEATURES if k in args.features.split(",")]
        for w in workers:
            for name, path in forms.items():
                paths = birdjepa.data.resolve_shards(path)
                for kind in kinds:
                    extra = dict(FEATURES[kind])
                    c = dataclasses.replace(loader_cfg, n_workers=w,
                                            features=extra.pop("features", "host"))
                    runs = [loader.run_rust_isolated(paths, args.batches, args.batch_size, w,
                                                     "audio", config=c, **extra)
                            for _ in range(args.repeat)]
                    r = max(runs, key=lambda x: x["clips_per_cpu_s"])
                    res[f"{w}w {name} {kind}"] = r
                    base = res.get(f"{w}w as stored {kinds[0]}", r)["clips_per_cpu_s"]
                    host = res.get(f"{w}w {name} {kinds[0]}", r)["clips_per_cpu_s"]
                    print(f"{name:<24} {kind:<10} {w:>7} {r['clips_per_s']:8.1f} "
                          f"{r['clips_per_cpu_s']:11.1f} {r['worker_cpu_ms_per_clip']:8.2f} "
                          f"{r['peak_rss_mb']:6.0f}MB {r['clips_per_cpu_s'] / base:8.2f}x "
                          f"{r['clips_per_cpu_s'] / host:6.2f}x  {loader._load()}", flush=True)
                    if args.after_compile:
                        a = max((_isolated(_after_compile, args.config, paths, args.batches,
                                           args.batch_size, w, "audio", config=c, **extra)
                                 for _ in range(args.repeat)), key=lambda x: x["clips_per_cpu_s"])
                        res[f"{w}w {name} {kind} after compile"] = a
                        print(f"{'  after a compile':<24} {kind:<10} {w:>7} "
                              f"{a['clips_per_s']:8.1f} {a['clips_per_cpu_s']:11.1f} "
                              f"{a['worker_cpu_ms_per_clip']:8.2f} {a['peak_rss_mb']:6.0f}MB "
                              f"{a['clips_per_cpu_s'] / base:8.2f}x  {loader._load()}",
                              flush=True)
    return res


def main(argv: list[str]) -> int:
    int_, float_ = cli_args.converter(int), cli_args.converter(float)
    p = cli_args.Parser("python -m benchmarks views", __doc__)
    p.add_argument("--data", help="corpus directory: used if it holds *.arrow, else written there")
    p.add_argument("--rows", type=int_, default=48, help="recordings of a written corpus")
    p.add_argument("--seconds", type=float_, default=60.0, help="recording length of a corpus")
    p.add_argument("--transform", default="audio", choices=["audio", "debug"],
                   help="the real audio transform, or the debug one (no decoding)")
    p.add_argument("--batch_size", type=int_, default=32, help="clips per batch")
    p.add_argument("--batches", type=int_, default=8, help="timed batches per configuration")
    p.add_argument("--workers", default="1,2,4,8,14",
                   help="worker counts (the GPU node's 14; a 2-core machine is oversubscribed)")
    p.add_argument("--repeat", type=int_, default=2, help="runs per configuration (best kept)")
    p.add_argument("--window_s", type=float_, default=6.0,
                   help="window seconds (>= the 5 s clip)")
    p.add_argument("--local", type=int_, default=0,
                   help="also measure this many 2 s local crops per sample (multi-crop)")
    p.add_argument("--config", default=None,
                   help="instead: clips per CPU-second at configs/NAME.toml's data settings "
                   "(e.g. vit-s) over --data (default: the demo corpus, data/demo/train) as "
                   "stored and packed (--pack), --batch_size clips, --workers, best of --repeat")
    p.add_argument("--pack", default="wav,flac",
                   help="with --config: the corpus also packed with these codecs at the config's "
                   "sample rate (comma-separated; empty: as stored only)")
    p.add_argument("--features", default="host,host bf16,device",
                   help="with --config: the loader's forms to measure, comma-separated, of "
                   f"{', '.join(FEATURES)} (the first is the ratios' baseline)")
    p.add_argument("--after_compile", action="store_true",
                   help="with --config: each form also in a process that first compiled the "
                   "config's update (XLA), as in training")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    if args.config:
        res = at_config(args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({k: {x: y for x, y in v.items() if x != "indices"}
                           for k, v in res.items()}, f, indent=1)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = loader.demo_corpus(args.data or os.path.join(tmp, "demo"), args.rows, args.seconds)
        res = bench(paths, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0
