"""`python -m birdjepa.embed MODEL SOURCE... --out FILE.parquet`: embeddings of every window of
every recording, one row per window (see `main --help`). The Python function is
`birdjepa.embeddings(...)` (birdjepa.models.inference)."""

import argparse
import sys

import birdjepa.common.cli_args as cli_args
import birdjepa.models.artifact as artifact
import birdjepa.models.outfile as outfile
import birdjepa.models.recordings as recordings

SUFFIXES = (".parquet", ".npz")
DESCRIPTION = """\
Embeddings of audio by a trained or imported encoder, through exactly the training transform
(decode, resample to the model's rate, Kaldi log-mel fbank, normalise). Every recording is cut
into windows of --window_s seconds starting every --hop_s seconds (or one --centre window); a
table whose rows are windows (start_time, end_time: a from_annotations split) gives one per row. One
output row per window: where it came from (file, or dataset row and every other column of the
dataset, labels included), start_s, end_s (never past the recording's end), duration_s (the
recording's), padded_s (zero padding past its end in the window), and emb_<pool> vectors (and patch tokens with
--patches). Parquet by default (.parquet), npz with --out FILE.npz. A progress bar with the
rate and time left goes to stderr."""


def parser() -> cli_args.Parser:
    """Every option of `python -m birdjepa.embed`, in one place."""
    p = cli_args.Parser("python -m birdjepa.embed", DESCRIPTION)
    recordings.add_common(p)
    p.add_list("pool", choices=("cls", "mean"), default=None,
               help="pooled embedding(s) to write as emb_<pool> (repeat for both; default: the "
               "model's own pooling)")
    p.add_flag("patches", "also write the final-normed patch tokens (column 'patches', "
               "n_patches x width per row): large")
    return p


def run(args: argparse.Namespace) -> dict:
    """Embed as the command line does; returns the output columns (what was written)."""
    recordings.check_args(args, SUFFIXES)
    m = artifact.open_model(args.model)
    src = recordings.resolve(args.source, args.audio_column)
    recordings.check_files(src, args.audio_column, recordings.files(args))
    w = recordings.windows(m, args, src)
    pools = tuple(dict.fromkeys(args.pool or [m.encoder.cfg.pool]))
    durations: dict[int, float] = {}
    out = recordings.encode(m, src, w, pools + (("patches",) if args.patches else ()),
                        batch_size=args.batch_size, n_workers=args.n_workers,
                        audio_column=args.audio_column, progress=not args.quiet,
                        durations=durations, settings=recordings.files(args))
    cols = recordings.where(src, out, w, durations)
    for p in pools:
        cols[f"emb_{p}"] = outfile.vectors(out[p].reshape(len(out["row"]), -1))
    if args.patches:
        cols["patches"] = outfile.vectors(out["patches"])
    outfile.write(cols, args.out)
    return cols


def main(argv: list[str] | None = None) -> int:
    return recordings.cli_main(parser(), run, argv, "windows")


if __name__ == "__main__":
    sys.exit(main())
