"""`python -m birdjepa.predict MODEL SOURCE... --out detections.csv`: class probabilities of every
window from a model's class head (the supervised head, else the online linear probe), as
BirdNET-style detections (see `main --help`). The Python function is `birdjepa.detections(...)`
(birdjepa.models.detect)."""

import argparse
import pathlib
import sys

import birdjepa.common.cli_args as cli_args
import birdjepa.models.artifact as artifact
import birdjepa.models.detect as detect
import birdjepa.models.outfile as outfile
import birdjepa.models.raven as raven
import birdjepa.models.recordings as recordings
import birdjepa.models.segments as segments

DESCRIPTION = """\
Species detections from a model with a class head: a run directory or an export of a run
trained with the supervised objective (its head) or any objective (its online linear probe).
Every recording is cut into windows of --window_s seconds every --hop_s seconds; each window's
class probabilities come from the head, by default as it was trained (--activation: softmax for
class ids, one class per window; sigmoid for a list<int> label column, independent classes that
can all stay below --min_conf: "nothing here"). Rows are the --top_k most
probable classes of each window with confidence >= --min_conf, in the columns BirdNET users
know: file (or, for a dataset, row and every other column of the dataset, as embed writes
them), start_s, end_s (never past the recording's end),
duration_s, padded_s (zero padding past the end in the window), class, confidence (and
class_index). CSV (.csv), parquet (.parquet) or npz (.npz)."""


def parser() -> cli_args.Parser:
    """Every option of `python -m birdjepa.predict`, in one place."""
    p = cli_args.Parser("python -m birdjepa.predict", DESCRIPTION)
    recordings.add_common(p, out_required=False)
    p.add_argument("--min_conf", type=cli_args.converter(float), default=None,
                   help="smallest confidence written, in [0, 1] (default: the head's: "
                   f"{detect.NO_CALL_THRESHOLD} for a sigmoid head, its no-call threshold; "
                   f"{detect.SOFTMAX_MIN_CONF} for a softmax head)")
    p.add_argument("--thresholds", default="auto", metavar="auto|FILE|NUMBER",
                   help="per-class decision thresholds: auto (default) uses the model's, "
                   "calibrated with evaluate --heads ... --calibrate, else "
                   "--min_conf's default; FILE a thresholds.json; NUMBER one for every class")
    p.add_argument("--top_k", type=cli_args.converter(int), default=3,
                   help="most probable classes per window (>= 1)")
    p.add_argument("--classes", default=None, metavar="FILE",
                   help="a species list: one class name a line (blank lines and # comments "
                   "skipped); only these classes are ranked and written (an unknown name is "
                   "an error naming it)")
    p.add_argument("--segments", default=None, metavar="DIR",
                   help="also cut every detection out of its recording for review: "
                   "DIR/<class>/<confidence>_<recording>_<start>s.wav at the recording's own "
                   "sample rate (audio-file SOURCEs; BirdNET-Analyzer's segments)")
    p.add_argument("--activation", choices=("auto", "softmax", "sigmoid"), default="auto",
                   help="how logits become probabilities; auto: as the head was trained")
    p.add_argument("--format", choices=("table", "raven"), default="table",
                   help="table: the rows above (format from --out's suffix); raven: Raven Pro "
                   "selection tables (audio-file SOURCEs), with --out FILE.txt one combined "
                   "table on the file sequence of every recording (times cumulative over the "
                   "recordings in path order; Begin Path, File Offset (s) within the recording) "
                   "and its file list FILE.list.txt, or with --out_dir DIR one "
                   "<recording>.selections.txt per recording (times within it)")
    p.add_argument("--out_dir", default=None,
                   help="with --format raven: the directory for one selection table per "
                   "recording (instead of --out)")
    return p


def run(args: argparse.Namespace) -> dict:
    detect.check_args(args)
    src = recordings.resolve(args.source, args.audio_column)
    recordings.check_files(src, args.audio_column, recordings.files(args))
    if args.format == "raven" and src.files is None:
        raise ValueError("--format raven: expected audio files as SOURCE (Raven Pro opens "
                         f"files), got the table {args.source[0]!r}")
    if args.format == "raven":
        raven.check_paths(src.files)
    table_names = raven.names(sorted(src.files)) if args.out_dir is not None else {}
    for name in table_names.values():  # each table, before any compute
        outfile.check_out(pathlib.Path(args.out_dir) / f"{name}.selections.txt", (".txt",),
                             "--out_dir", args.overwrite)
    if args.format == "raven" and args.out is not None:  # the file list beside the table
        outfile.check_out(raven.list_path(args.out), (".txt",), "--out", args.overwrite)
    if args.segments is not None:
        if src.files is None:
            raise ValueError("--segments: expected audio files as SOURCE (clips are cut from "
                             f"recordings), got the table {args.source[0]!r}")
        segments.check_dir(args.segments)
    m = artifact.open_model(args.model)
    keep = detect.keep_classes(m, args.classes)
    rates: dict[int, int] = {}
    where, probs = detect.probabilities(m, src, args, rates)
    cols = detect.rows(where, probs, m.classes, min_conf=detect.min_conf_of(m, args), top_k=args.top_k,
                keep=keep)
    if args.format == "raven":
        high = raven.band_top(m.audio["sample_rate"], {src.files[r]: sr for r, sr in rates.items()})
    if args.format == "raven" and args.out_dir is not None:
        raven.write_per_recording(cols, args.out_dir, sorted(set(where["file"].to_pylist())),
                                  high, table_names)
    elif args.format == "raven":
        durations = dict(zip(where["file"].to_pylist(), where["duration_s"].to_pylist(),
                             strict=True))
        raven.write_combined(cols, args.out, high, durations)
    else:
        outfile.write(cols, args.out)
    if args.segments is not None:
        segments.write(cols, args.segments, src.files)
    return cols


def main(argv: list[str] | None = None) -> int:
    return recordings.cli_main(parser(), run, argv, "detections")


if __name__ == "__main__":
    sys.exit(main())
