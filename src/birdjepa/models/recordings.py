"""What `python -m birdjepa.embed` and `python -m birdjepa.predict` share: SOURCE arguments
(audio files, directories of audio, Arrow shards, a saved dataset), the windows of every
recording through the training transform with a progress bar, and one row per window that
carries where it came from (file, or dataset row and the dataset's other columns) and when
(start_s, end_s). The output file itself is birdjepa.models.outfile's."""

import argparse
import dataclasses
import math
import os
import pathlib
import sys
import time
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet
import tqdm

import birdjepa._rs
import birdjepa.common.cli_args as cli_args
import birdjepa.common.errors as errors
import birdjepa.common.outputs as outputs
import birdjepa.data.paths
import birdjepa.data.sources
import birdjepa.data.table as table
import birdjepa.models.artifact as artifact
import birdjepa.models.columns as columns
import birdjepa.models.failures
import birdjepa.models.features as features
import birdjepa.models.inference as inference
import birdjepa.models.outfile as outfile

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff")


@dataclasses.dataclass
class Source:
    files: list[str] | None = None
    """Audio files (row i = files[i]), or None for a table source."""
    shards: str | list[str] | None = None
    """Arrow shards, a dataset directory or DIR:SPLIT."""
    columns: list[str] = dataclasses.field(default_factory=list)
    """The table's columns carried into every row (all but the audio column)."""
    durations: dict[int, float] | None = None
    """{row: its recording's seconds}, once read from the headers (`windows`, a table whose rows
    are windows)."""
    skipped: list[str] = dataclasses.field(default_factory=list)
    """Entries of SOURCE directories that are not readable audio files (a dangling symlink, a
    directory named *.wav): counted skips, named in one warning."""

    @property
    def data(self):
        return self.files if self.files is not None else self.shards

    def __len__(self) -> int:
        if self.files is not None:
            return len(self.files)
        return len(table.read(self.shards, self.columns[:1])) if self.columns else 0


def _is_table_dir(p: pathlib.Path) -> bool:
    return any(p.glob("*.arrow")) or (p / "state.json").is_file() or (
        p / "dataset_dict.json").is_file()


TEXT_SUFFIXES = (".txt", ".csv", ".tsv", ".json")
"""Files a SOURCE may name by mistake (an annotation table): refused by name."""


def resolve(args: list[str], audio_column: str = "audio") -> Source:
    """SOURCE arguments as one Source; a clear error for a missing path or a mix of kinds."""
    files, shards, skipped = [], [], []
    for a in args:
        p = pathlib.Path(a)
        base, split = birdjepa.data.sources.split_spec(a)
        if p.is_dir() and not _is_table_dir(p):
            found = sorted(f for f in p.rglob("*") if f.suffix.lower() in AUDIO_SUFFIXES)
            bad = [str(f) for f in found if not f.is_file()]  # dangling link, directory, ...
            skipped += bad
            if len(found) == len(bad):
                raise FileNotFoundError(f"SOURCE {a!r}: a directory without audio files "
                                        f"({', '.join(AUDIO_SUFFIXES)}) or Arrow shards" + (
                                            f" ({len(bad)} not regular files, first {bad[0]!r})"
                                            if bad else ""))
            files += [str(f) for f in found if f.is_file()]
        elif p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES:
            files.append(a)
        elif p.exists() and not p.is_file() and not p.is_dir():  # before open() blocks on it
            raise ValueError(f"SOURCE: expected an audio file, a directory or Arrow shards, got "
                             f"{a!r}, {birdjepa.data.paths.kind_of(p.stat())}")
        elif p.is_file() and p.suffix.lower() in TEXT_SUFFIXES:
            raise ValueError(f"SOURCE {a!r}: expected an audio file, a directory of audio, "
                             "Arrow shards or a dataset directory, got a text file (a Raven or "
                             "CSV table: `python -m birdjepa.sources from_annotations TABLE "
                             "--out_dir DIR` makes a dataset of its recordings and events)")
        elif p.exists() or (split is not None and pathlib.Path(base).is_dir()):
            shards.append(a)
        else:
            raise FileNotFoundError(f"SOURCE: expected an audio file, a directory of audio, "
                                    f"Arrow shards or a dataset directory, got {a!r}, which "
                                    "does not exist")
    if files and shards:
        raise ValueError(f"SOURCE: expected audio files or Arrow shards, got both ({files[0]!r}"
                         f" and {shards[0]!r})")
    if skipped:
        warnings.warn(f"SOURCE: skipped {len(skipped)} entr{'y' if len(skipped) == 1 else 'ies'}"
                      f" that are not regular files (first: {skipped[0]!r})", RuntimeWarning,
                      stacklevel=2)
    files, not_utf8 = birdjepa.data.paths.utf8_named(files)
    if not_utf8:
        warnings.warn(f"SOURCE: {birdjepa.data.paths.not_utf8_words(not_utf8)}", RuntimeWarning,
                      stacklevel=2)
        if not files and not shards:
            raise FileNotFoundError(f"SOURCE: no audio file with a UTF-8 name in {args}")
    if files:
        return Source(files=_once(files), skipped=skipped)
    src = shards[0] if len(shards) == 1 else shards
    cols = [c for c in table.column_names(src) if c != audio_column]
    if audio_column not in table.column_names(src):
        raise KeyError(f"SOURCE {shards[0]!r}: expected audio column {audio_column!r}, got "
                       f"{table.column_names(src)}")
    return Source(shards=src, columns=cols)


def _once(files: list[str]) -> list[str]:
    """Each recording once, under the first name SOURCE gave it: a directory and a file in it,
    `./x` and `x`, a link and its target are one recording (by its real path), read and
    written once (named again: one warning with the count)."""
    seen: dict[str, str] = {}
    for f in files:
        seen.setdefault(os.path.realpath(f), f)
    if len(seen) < len(files):
        again = len(files) - len(seen)
        first = next(f for i, f in enumerate(files) if os.path.realpath(f) in
                     {os.path.realpath(g) for g in files[:i]})
        warnings.warn(f"SOURCE named {again} recording{'s' if again > 1 else ''} again (another "
                      f"name of the same file, first: {first!r}): each is read once, under its "
                      "first name", RuntimeWarning, stacklevel=3)
    return list(seen.values())


def add_common(p: cli_args.Parser, *, window_s: float | None = None, out_required: bool = True) -> None:
    """MODEL, SOURCE and the options both command lines take (birdjepa.common.cli_args)."""
    p.add_argument("model", metavar="MODEL", help="a run directory (its latest checkpoint), an "
                   "export directory (python -m birdjepa.export) or NAME:WEIGHTS for an "
                   "imported model, e.g. bird-mae-base:model.safetensors")
    p.add_argument("source", metavar="SOURCE", nargs="+", help="audio files, directories "
                   "searched recursively for audio (" + " ".join(AUDIO_SUFFIXES) + "), Arrow "
                   "shards (a file or directory), a datasets save_to_disk directory, or DIR:SPLIT")
    p.add_argument("--out", required=out_required, default=None,
                   help="output file; its suffix picks the format")
    p.add_flag("overwrite", "replace an existing output file that this command did not write "
               "(without it such a file is refused; one of its own outputs is replaced)")
    p.add_argument("--window_s", type=cli_args.converter(float), default=window_s,
                   help="window length in seconds (default: the model's clip, e.g. 5 s)")
    p.add_argument("--hop_s", type=cli_args.converter(float), default=None,
                   help="window start spacing in seconds (default: --window_s, i.e. tiling); "
                   "a window past the recording's end is zero-padded (padded_s says how much)")
    p.add_flag("centre", "one window per recording, at its centre (the loader's eval crop)")
    p.add_argument("--windows", choices=WINDOW_MODES, default="auto",
                   help="rows: a table SOURCE's rows are the windows (its start_time and "
                   "end_time columns: a from_annotations split, BirdSet's event-level test), "
                   "one per row, cut exactly there and padded to the model's clip (padded_s "
                   "says how much); recordings: windows over each row's whole recording; auto "
                   "(default): rows when the table has both columns")
    p.add_argument("--batch_size", type=cli_args.converter(int), default=64,
                   help="windows per encoder call (the last batch is not padded to it)")
    p.add_argument("--n_workers", type=cli_args.converter(int), default=2,
                   help="threads decoding and transforming audio")
    p.add_argument("--audio_column", default="audio", help="audio column of a table SOURCE")
    p.add_argument("--audio_root", default="", help="path-only audio of a table SOURCE: the "
                   "directory its relative paths start from (default: the shard's directory)")
    p.add_path_map(help="path-only audio of a table SOURCE moved since it was written: read "
                   "the stored path prefix OLD as NEW (whole path components; repeat for more)")
    p.add_argument("--max_audio_mb", type=cli_args.converter(float),
                   default=birdjepa.data.paths.MAX_AUDIO_MB, help="a path-only audio file "
                   "larger than this many MB is skipped (only regular files are read at all)")
    p.add_flag("quiet", "no progress bar on stderr")


WINDOW_MODES = ("auto", "rows", "recordings")
ROW_WINDOW_COLUMNS = ("start_time", "end_time")
"""A table whose rows are windows has both (from_annotations, BirdSet's event-level test)."""


def windows(m: artifact.Model, args, src: Source | None = None) -> features.Windows:
    """The model's input settings (features.Windows.for_model) with the command line's windows.
    A table `src` whose rows are windows (`--windows`; auto: start_time and end_time set, and
    some row's recording longer than its window) gives each row's [start_time, end_time] (the
    loader's segment = "columns"), checked row by row before any compute. A table of pre-cut
    clips (every recording no longer than its row's window: BirdSet's test_5s, whose columns
    are times in the soundscape it was cut from) is read whole, as the loader's eval crop."""
    mode = getattr(args, "windows", "auto")
    has = src is not None and src.files is None and all(
        c in src.columns for c in ROW_WINDOW_COLUMNS)
    if mode == "rows" and not has:
        got = "audio files" if src is None or src.files is not None else \
            f"a table with columns {src.columns}"
        raise ValueError(f"--windows rows: expected a table SOURCE with columns start_time and "
                         f"end_time, got {got}")
    whole = features.Windows.for_model(m.audio, window_s=args.window_s, hop_s=args.hop_s,
                                        centre=args.centre)
    if mode == "recordings" or not has:
        return whole
    got = row_windows(src.shards, getattr(args, "audio_column", "audio"), files(args), m.audio)
    if mode == "auto" and (got is None or got.precut):
        return whole  # BirdSet's train splits (null columns), pre-cut clips (test_5s)
    w = features.Windows.for_model(m.audio, centre=True, segment="columns",
                                    segment_columns=ROW_WINDOW_COLUMNS)
    if got is None:  # --windows rows on null columns: check_row_windows names the row
        start, end = _row_times(src)
    else:
        start, end = got.start, got.end
        src.durations = got.durations
    for name, given in (("--window_s", args.window_s is not None),
                        ("--hop_s", args.hop_s is not None), ("--centre", args.centre)):
        if given:
            raise ValueError(f"{name}: SOURCE's rows are windows (its start_time and end_time "
                             f"columns: one window per row, the row's), so {name} cannot apply; "
                             "--windows recordings slides windows over whole recordings instead")
    check_row_windows(src, start, end, w.window_s)
    return w


PRECUT_SLACK_S = 0.1
"""A recording at most this much longer than its row's window is a pre-cut clip of it."""


@dataclasses.dataclass(frozen=True)
class RowWindows:
    """A table's start_time / end_time and its recordings' lengths (`row_windows`)."""

    start: np.ndarray
    end: np.ndarray
    """(rows,) seconds, NaN where null."""
    durations: dict[int, float]
    """{row: its recording's seconds} (rows whose header reads)."""
    precut: bool
    """Every recording is no longer than its row's window (+ PRECUT_SLACK_S): pre-cut clips
    whose columns are times in the recording they were cut from (BirdSet's test_5s)."""

    def first_inside(self) -> tuple[int, float, float, float] | None:
        """(row, start, end, recording seconds) of the first row whose window lies inside a
        longer recording, or None."""
        for r in sorted(self.durations):
            if self.durations[r] > self.end[r] - self.start[r] + PRECUT_SLACK_S:
                return r, float(self.start[r]), float(self.end[r]), self.durations[r]
        return None


def row_windows(shards, audio_column: str, settings: dict, audio: dict | None = None
                ) -> RowWindows | None:
    """The rows' windows of table `shards` (ROW_WINDOW_COLUMNS), None when it lacks the
    columns or they are null in every row; the recordings' lengths from their headers (each
    file read once; `audio`: the model's input settings, for the headers' reader)."""
    if not all(c in table.column_names(shards) for c in ROW_WINDOW_COLUMNS):
        return None
    start, end = _row_times(Source(shards=shards))
    if np.isnan(start).all() and np.isnan(end).all():
        return None
    w = features.Windows.for_model(audio) if audio else features.Windows()
    dur = features.header_durations(shards, w, audio_column, settings)
    rows = np.asarray(sorted(dur), np.int64)
    d = np.asarray([dur[r] for r in rows], np.float64)
    precut = bool(len(rows)) and bool((d <= end[rows] - start[rows] + PRECUT_SLACK_S).all())
    return RowWindows(start, end, dur, precut)


def _row_times(src: Source) -> tuple[np.ndarray, np.ndarray]:
    """(start_time, end_time) of every row, float64 seconds, NaN where null."""
    t = table.read(src.shards, list(ROW_WINDOW_COLUMNS))
    return tuple(np.asarray(t.column(c).cast("float64").fill_null(float("nan")).to_numpy(),
                            np.float64) for c in ROW_WINDOW_COLUMNS)


def check_row_windows(src: Source, start: np.ndarray, end: np.ndarray, clip_s: float) -> None:
    """Every row's [start_time, end_time]: finite seconds, 0 <= start < end, at most the model's
    clip long (a longer row would be cut to its first clip: not the row's window), starting
    inside its recording (`src.durations`). One ValueError naming the first bad row (0-based,
    as the `row` column) and how many there are."""
    dur = np.full(len(start), np.inf)
    for r, d in (src.durations or {}).items():
        dur[r] = d
    checks = (
        (~(np.isfinite(start) & np.isfinite(end)), "expected finite seconds (a null or NaN "
         "cell: --windows recordings slides over whole recordings)"),
        ((start < 0) | (end <= start), "expected 0 <= start_time < end_time"),
        (end - start > clip_s + 1e-6, f"expected a window at most the model's clip, {clip_s:g} s "
         "long (`sources from_annotations --window_s` cuts events into windows; "
         "--windows recordings slides over whole recordings)"),
        (start >= dur, "expected a window starting inside its recording (a pre-cut clip whose "
         "columns are times in a longer recording: --windows recordings)"))
    for bad, why in checks:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"SOURCE {str(src.shards)!r}, row {i}: {why}, got start_time "
                             f"{start[i]:g} s, end_time {end[i]:g} s ({end[i] - start[i]:g} s"
                             + (f", the recording {dur[i]:g} s" if np.isfinite(dur[i]) else "")
                             + f"); {int(bad.sum())} row(s) like it")


class Progress:
    """tqdm over recordings (rate and ETA), described by the windows encoded so far, their true
    rate (time spent compiling a new batch shape left out) and that compile time, on stderr."""

    def __init__(self, total: int, enabled: bool):
        self.bar = tqdm.tqdm(total=total, unit="rec", file=sys.stderr, disable=not enabled,
                             dynamic_ncols=True, desc="windows 0")
        self.seen, self.n_windows, self.compile_s = -1, 0, 0.0
        self.t0 = time.perf_counter()

    def __call__(self, rows: np.ndarray, compile_s: float) -> None:
        self.n_windows += len(rows)
        self.compile_s += compile_s
        run_s = max(time.perf_counter() - self.t0 - self.compile_s, 1e-9)
        self.bar.set_description(f"windows {self.n_windows} ({self.n_windows / run_s:.1f}/s, "
                                 f"compile {self.compile_s:.1f} s)", refresh=False)
        top = int(rows.max()) if len(rows) else self.seen  # rows come in order
        if top - 1 > self.seen:  # recordings before the last one seen are done
            self.bar.update(top - 1 - self.seen)
            self.seen = top - 1

    def close(self) -> None:
        self.bar.update(self.bar.total - self.bar.n if self.bar.total else 0)
        self.bar.close()


def files(args) -> dict:
    """The path-only audio settings of the command line `args` (None: the defaults)."""
    return {"audio_root": getattr(args, "audio_root", "") or "",
            "path_map": getattr(args, "path_map", None) or None,
            "max_audio_mb": getattr(args, "max_audio_mb", birdjepa.data.paths.MAX_AUDIO_MB)}


def check_files(src: Source, audio_column: str, settings: dict) -> None:
    """Before any compute: a table SOURCE's path-only audio files resolve (`--audio_root`,
    `--path_map`) to regular files; none readable is one ValueError naming the first and the
    setting that fixes it (some unreadable: counted skips while embedding)."""
    if src.shards is None:
        return
    got = table.check_audio_files(src.shards, audio_column, **settings)
    bad = len(got["missing"]) + len(got["unusable"])
    if not got["checked"] or bad < got["checked"]:
        return
    why = (table.moved_hint(got["missing"]) if got["missing"] else
           "{}: {}".format(*got["unusable"][0]))
    raise ValueError(f"SOURCE: none of the {got['checked']} path-only audio files of "
                     f"{src.shards!r} can be read ({len(got['missing'])} missing): {why}")


def encode(m: artifact.Model, src: Source, w: features.Windows, pools: tuple[str, ...], *,
           batch_size: int = 64, n_workers: int = 2, audio_column: str = "audio",
           progress: bool = True, durations: dict | None = None,
           settings: dict | None = None, rates: dict | None = None) -> dict[str, np.ndarray]:
    """`birdjepa.models.inference.encode` over the windows of `src`, with a progress bar;
    `durations` (row -> seconds) and `rates` (row -> the recording's own Hz) are filled; `settings`: `files(args)`. Recordings that fail
    are counted skips, summed up by kind in one warning at the end (all failing: an error)."""
    failures = birdjepa.models.failures.Failures(what="SOURCE")
    settings = settings or files(None)
    if w.segment == "columns":  # each row's window, cut by the loader; the lengths from headers
        batches = features.features(src.data, w, batch_size=batch_size,
                                     audio_column=audio_column, n_workers=n_workers,
                                     engine="loader", **settings)
        if durations is not None:
            durations.update(src.durations if src.durations is not None else
                             features.header_durations(src.data, w, audio_column, settings))
    else:
        batches = features.features(src.data, w, batch_size=batch_size,
                                     audio_column=audio_column, n_workers=n_workers,
                                     engine="clip", durations=durations, failures=failures,
                                     rates=rates, **settings)
    bar = Progress(len(src), progress)
    try:
        out = inference.encode(m.encoder, batches, pools, batch_size=batch_size, progress=bar)
    finally:
        bar.close()
    failures.report()
    return out


def where(src: Source, out: dict[str, np.ndarray], w: features.Windows,
          durations: dict[int, float]) -> dict[str, pa.Array]:
    """Columns saying where each window comes from: file or row (+ the table's columns),
    start_s, end_s (never past the recording's end), duration_s (the recording's) and padded_s
    (seconds of zero padding after the recording's end in this window's input)."""
    rows = out["row"].astype(np.int64)
    cols: dict[str, pa.Array] = {}
    if src.files is not None:
        cols["file"] = pa.array([src.files[r] for r in rows], pa.string())
    else:
        cols["row"] = pa.array(rows)
        meta = table.read(src.shards, src.columns)
        taken = meta.take(pa.array(rows))
        for name in src.columns:
            cols[columns.carried(name)] = taken.column(name).combine_chunks()
    if w.segment == "columns":  # the rows' windows: padded_s is the input past the row's end
        seg = table.read(src.shards, list(w.segment_columns))
        start, end = (seg.column(c).to_numpy()[rows] for c in w.segment_columns)
        times = columns.timing(rows, start, end - start, durations)
        times["padded_s"] = np.maximum(w.window_s - (times["end_s"] - times["start_s"]), 0.0)
    else:
        times = columns.timing(rows, out["start_s"], w.window_s, durations)
    return cols | {k: pa.array(v) for k, v in times.items()}


def check_args(args: argparse.Namespace, suffixes: tuple[str, ...]) -> None:
    """Every common option and the output path (--out, when given), before any compute (one
    ValueError each)."""
    for name, value in (("--window_s", args.window_s), ("--hop_s", args.hop_s)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: expected seconds > 0, got {value}")
    for name, value in (("--batch_size", args.batch_size), ("--n_workers", args.n_workers)):
        if value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {value}")
    mb = files(args)["max_audio_mb"]
    if not (math.isfinite(mb) and mb > 0):
        raise ValueError(f"--max_audio_mb: expected MB > 0, got {mb}")
    if args.out is not None:
        outfile.check_out(args.out, suffixes, overwrite=getattr(args, "overwrite", False))


def _one_line(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"warning: {' '.join(str(message).split())}", file=sys.stderr)


def cli_main(parser: cli_args.Parser, run, argv: list[str] | None, what: str) -> int:
    """Parse, `run(args)` -> columns, report "<n> <what> -> OUT" on stderr; a missing input or
    a bad value is one line and exit status 2, Ctrl-C one line and 130; warnings are one line
    each (no source lines)."""
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _one_line
        try:
            cols = run(args)
        except (FileNotFoundError, KeyError, ValueError, errors.AudioError) as e:
            return cli_args.fail(e)
        except OSError as e:  # a full disk, a quota: the earlier file stays (outputs' rule)
            if e.errno is None or e.filename is None:
                raise
            target = outputs.original(pathlib.Path(e.filename).name)
            path = pathlib.Path(e.filename).with_name(target) if target else e.filename
            print(f"error: could not write {path}: {e.strerror} (the file there before is "
                  "kept)", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # Ctrl-C: one line; the output is written whole or not at all
            print(f"interrupted: no {what} written", file=sys.stderr)
            return 130
    n = len(next(iter(cols.values()))) if cols else 0
    print(f"{n} {what} -> {getattr(args, 'out', None) or args.out_dir}", file=sys.stderr)
    return 0
