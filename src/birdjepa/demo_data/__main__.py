"""`python -m birdjepa.demo_data --out_dir DIR [--n_recordings N ...]`: write a demo corpus;
`python -m birdjepa.demo_data --out_dir DIR --soundscapes N [--n_segments S]`: the soundscape test
split (birdjepa.demo_data.soundscape)."""

import sys

import birdjepa.common.cli_args as cli_args
import birdjepa.demo_data.birdset as birdset
import birdjepa.demo_data.catalogue as catalogue
import birdjepa.demo_data.soundscape as soundscape
import birdjepa.demo_data.writer as writer


def main(argv: list[str] | None = None) -> int:
    """The command line; its options, in one place."""
    int_, float_ = cli_args.converter(int), cli_args.converter(float)
    p = cli_args.Parser("python -m birdjepa.demo_data", "Write the deterministic synthetic "
                        "bird-song demo corpus (HF datasets format).")
    p.add_argument("--out_dir", required=True, help="directory to write (created)")
    p.add_argument("--n_recordings", type=int_, default=192, help="recordings to write")
    p.add_argument("--n_shards", type=int_, default=4, help="Arrow files to split them over")
    p.add_argument("--seed", type=int_, default=0,
                   help="seed of species, songs, codecs and lengths: the same seed writes the "
                   "same corpus")
    p.add_argument("--min_s", type=float_, default=5.0, help="shortest recording, seconds")
    p.add_argument("--max_s", type=float_, default=60.0, help="longest recording, seconds")
    p.add_argument("--workers", type=int_, default=None, help="processes (default: up to 2)")
    p.add_flag("overwrite", "replace an existing --out_dir")
    p.add_argument("--noise", type=int_, default=None,
                   help="also write this many (>= 0) recordings of background noise alone (no "
                        "bird: `label` \"noise\", one more class), and a multilabel `labels` "
                        "column ([] for them) to train "
                        "\"nothing here\" on (data.label_column = \"labels\")")
    p.add_argument("--soundscapes", type=int_, default=0,
                   help="write instead a test split of this many soundscapes cut into 5 s "
                        "multilabel segments (BirdSet's shape)")
    p.add_argument("--n_segments", type=int_, default=12, help="5 s segments per soundscape")
    p.add_argument("--layout", choices=("hf", "birdset"), default="hf",
                   help="hf: save_to_disk shards with embedded audio; birdset: the corpus as "
                        "BirdSet publishes it (path-only .ogg files in an HF-cache-like tree, "
                        "train and test_5s splits; needs `datasets`)")
    a = p.parse_args(argv)
    if a.layout == "birdset":
        return _birdset(a)
    if a.soundscapes:
        return _soundscapes(a)
    print(
        f"writing {a.n_recordings} recordings of {len(catalogue.SPECIES)} species in {a.n_shards} shards "
        f"to {a.out_dir}",
        flush=True,
    )
    try:
        s = writer.write(
            a.out_dir,
            n_recordings=a.n_recordings,
            n_shards=a.n_shards,
            seed=a.seed,
            min_s=a.min_s,
            max_s=a.max_s,
            workers=a.workers,
            overwrite=a.overwrite,
            verbose=True,
            noise=a.noise,
        )
    except (FileExistsError, ValueError) as e:
        return cli_args.fail(e)
    codecs = ", ".join(f"{k} {v}" for k, v in s["codec_counts"].items())
    print(
        f"wrote {s['n_recordings']} recordings ({codecs}), {s['total_bytes'] / 1e6:.1f} MB "
        f"in {len(s['shards'])} shards, in {s['seconds']:.1f} s\n"
        f"species: {', '.join(s['species'])}"
    )
    return 0


def _birdset(a) -> int:
    n_soundscapes = a.soundscapes or 6
    print(f"writing {a.n_recordings} recordings and {n_soundscapes} soundscapes x "
          f"{a.n_segments} segments in BirdSet's layout to {a.out_dir}", flush=True)
    try:
        s = birdset.write(a.out_dir, n_recordings=a.n_recordings, n_soundscapes=n_soundscapes,
                          n_segments=a.n_segments, seed=a.seed, min_s=a.min_s, max_s=a.max_s,
                          overwrite=a.overwrite)
    except (FileExistsError, ValueError) as e:
        return cli_args.fail(e)
    print(f"wrote {s['n_train']} train rows and {s['n_test']} test_5s segments in "
          f"{s['seconds']:.1f} s\ndataset directory: {s['dataset_dir']}\n"
          f"splits: {s['train']}  {s['test_5s']}")
    return 0


def _soundscapes(a) -> int:
    print(f"writing {a.soundscapes} soundscapes x {a.n_segments} segments to {a.out_dir}",
          flush=True)
    try:
        s = soundscape.write(a.out_dir, n_soundscapes=a.soundscapes, n_segments=a.n_segments,
                             n_shards=min(a.n_shards, a.soundscapes), seed=a.seed,
                             overwrite=a.overwrite)
    except (FileExistsError, ValueError) as e:
        return cli_args.fail(e)
    print(f"wrote {s['n_segments']} segments ({s['n_empty']} without birds, "
          f"{s['mean_labels']:.2f} labels per segment) in {s['seconds']:.1f} s\n"
          f"segments per species: {dict(zip(s['species'], s['label_counts'], strict=True))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
