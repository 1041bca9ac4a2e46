"""A test split from annotation tables: `python -m birdjepa.sources from_annotations TABLE...
--out_dir DST [--window_s 5 --hop_s 5]`.

TABLE: Raven Pro selection tables (one per recording, or combined with a `Begin Path` column)
and CSV files (`file,start,end,label`), or directories holding them (*.selections.txt, *.csv);
how each row finds its recording: docs/guides/evaluation.md ("Your own annotated recordings").

DST is a `save_to_disk` directory (state.json, dataset_info.json, one data-*.arrow) that
`datasets.load_from_disk`, `birdjepa.data.Loader` and `python -m birdjepa.evaluate` read:
`audio` (path-only: `{bytes: null, path}`, absolute or with --relative relative to DST),
`filepath` (the path as stored: relative with --relative), `start_time` / `end_time` (seconds within the recording, BirdSet's names: evaluate
with `segment = "columns"` cuts exactly there) and `ebird_code_multilabel` (HF
`Sequence(ClassLabel(names))`, the evaluation's default test label column; --multilabel_column
renames it).

Rows: without --window_s one per annotated event (its own label). With --window_s W, fixed
windows over every recording the tables list (start 0, W, ... every --hop_s, like BirdSet's
test_5s), each labelled with the classes of the events it overlaps by at least --min_overlap_s
(an event shorter than that: when it lies inside the window); windows without an event are kept
with an empty label list: the "nothing here" negatives. The last partial window of a recording
is dropped, as BirdSet drops it (--last_window pad keeps it: its `end_time` stops at the
recording's end and `padded_s`, a column of every window row, says how many seconds of it lie
past the end and will be zero padding).

Classes: the sorted annotation labels, or with --classes_from SHARDS the ClassLabel names (and
order) of that dataset's --classes_column (a training split's), so the two match by name; a label
outside that list is an error naming the unknown labels (--drop_unknown drops their events and
counts them). Bad input (a missing column or file, a cell that is not a number, an event outside
its recording) is one line per problem and exit status 2; nothing is written.
"""

import collections
import dataclasses
import hashlib
import json
import os
import pathlib
import typing

import pyarrow as pa

import birdjepa._rs
import birdjepa.common.cli_args as cli_args
import birdjepa.common.errors as errors
import birdjepa.common.outputs as outputs
import birdjepa.data.annotation_tables as annotation_tables
import birdjepa.data.audio
import birdjepa.data.ipc
import birdjepa.data.paths

AUDIO = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
END_TOLERANCE_S = 0.01
"""An event may end this far past its recording's end (rounding in a table); it is cut there."""
SHARD = "data-00000-of-00001.arrow"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every setting of `from_annotations` (each is an option of the command)."""

    out_dir: str
    """Directory to write (a save_to_disk layout); it must not exist or be empty."""
    window_s: float | None = None
    """Fixed windows of this many seconds over every recording; none: one row per event."""
    hop_s: float | None = None
    """Seconds between window starts; none: window_s."""
    min_overlap_s: float = 0.5
    """A window is labelled with an event's class when they overlap by at least this many
    seconds (or the window holds all of a shorter event)."""
    last_window: typing.Literal["drop", "pad"] = "drop"
    """A recording's last partial window: dropped (BirdSet) or kept, up to the recording's end,
    with padded_s > 0."""
    label_column: str = ""
    """Label column of the tables; empty: Raven's Species, else Annotation, else label; CSV's
    label."""
    start_column: str = ""
    """Start column; empty: Raven's "Begin Time (s)", CSV's start."""
    end_column: str = ""
    """End column; empty: Raven's "End Time (s)", CSV's end."""
    file_column: str = ""
    """Recording column of CSV tables; empty: file."""
    audio_dir: str = ""
    """Where relative audio paths and per-recording Raven tables' recordings are; empty: each
    table's own directory."""
    audio_for: dict[str, str] | None = None
    """TABLE=AUDIO: the recording of a per-recording Raven table (TABLE: its path or file
    name) whose name does not say it; repeat for more tables."""
    path_map: dict[str, str] | None = None
    """OLD=NEW: rewrite a stored audio path prefix (a Begin Path from another machine); repeat
    for more prefixes."""
    classes_from: str = ""
    """Shards (a training split) whose --classes_column ClassLabel names, in their order, are the
    class list; empty: the sorted labels of the tables."""
    classes_column: str = "label"
    """The label column of --classes_from."""
    drop_unknown: bool = False
    """Drop (and count) events whose label is not in --classes_from's list, instead of failing."""
    multilabel_column: str = "ebird_code_multilabel"
    """Name of the written multilabel column."""
    relative: bool = False
    """Store audio paths relative to --out_dir (move it and the audio together)."""


def check(s: Settings) -> None:
    """Bounds of the settings, one BadArgumentError naming the option."""
    def bad(msg):
        raise errors.BadArgumentError(msg)
    if s.window_s is not None and not 0 < s.window_s < float("inf"):
        bad(f"--window_s: expected seconds > 0, got {s.window_s}")
    if s.hop_s is not None and (s.window_s is None or not 0 < s.hop_s < float("inf")):
        bad(f"--hop_s: expected seconds > 0 with --window_s, got {s.hop_s} with --window_s "
            f"{s.window_s}")
    if not 0 <= s.min_overlap_s < float("inf"):
        bad(f"--min_overlap_s: expected seconds >= 0, got {s.min_overlap_s}")
    if not s.multilabel_column or s.multilabel_column in ("audio", "filepath", "start_time",
                                                          "end_time", "padded_s"):
        bad(f"--multilabel_column: expected a new column name, got {s.multilabel_column!r}")


def durations(found: annotation_tables.Found) -> dict[str, float]:
    """Each recording's duration: what its data holds. The header's length, checked by reading
    its last 0.1 s (a recording whose data stops early, a truncated WAV, is as long as that
    data, as an OGG's decode finds it); decoded whole when the header has no length."""
    out = {}
    for f, where in sorted(found.recordings.items()):
        try:
            data = birdjepa.data.paths.read_file(f)
            info = birdjepa.data.audio.info(data)
            n, sr = info["n_frames"], info["sample_rate"]
            out[f] = _data_seconds(data) if n is None else _checked_end(data, n / sr)
        except (errors.Error, OSError) as e:
            found.problem(f"{where}: audio file {f!r} cannot be read: "
                          f"{' '.join(str(e).split())}")
    return out


def _data_seconds(data: bytes) -> float:
    wave, sr, _seeked, _damage = birdjepa._rs.decode(data)
    return len(wave) / sr


def _checked_end(data: bytes, header_s: float) -> float:
    """`header_s`, or where the data ends when it stops before (its damage, or a whole decode
    when even the last 0.1 s lies after it)."""
    try:
        _, _, _, damage = birdjepa._rs.decode(data, start_s=max(0.0, header_s - 0.1),
                                               duration_s=0.1)
    except errors.EmptyAudioError:
        return _data_seconds(data)
    return header_s if damage is None else min(header_s, float(damage["end_s"]))


def place(found: annotation_tables.Found, dur: dict[str, float]) -> tuple[list, int]:
    """(the events cut to their recording's length, how many ran more than END_TOLERANCE_S
    past its end): an event that starts at or after the end is a problem; one that starts
    inside and runs past it is cut at the end, counted (a selection drawn to the edge of the
    spectrogram)."""
    out, cut = [], 0
    for e in found.events:
        d = dur.get(e.file)
        if d is None:
            continue
        if e.start >= d:
            found.problem(f"{e.where}: event [{e.start:g}, {e.end:g}] s lies wholly after the "
                          f"end of its recording {e.file!r} ({d:g} s long)")
            continue
        cut += e.end > d + END_TOLERANCE_S
        out.append(dataclasses.replace(e, end=min(e.end, d)))
    return out, cut


def classes(events: list, names: list[str] | None, drop_unknown: bool, found
            ) -> tuple[list[str], list, collections.Counter]:
    """(class names, the events kept, Counter of dropped unknown labels)."""
    if names is None:
        return sorted({e.label for e in events}), events, collections.Counter()
    known = set(names)
    unknown = collections.Counter(e.label for e in events if e.label not in known)
    if unknown and not drop_unknown:
        listed = ", ".join(f"{k!r} ({n} event(s))" for k, n in sorted(unknown.items()))
        found.problem(f"--classes_from: expected labels among its {len(names)} class names, got "
                      f"{len(unknown)} unknown: {listed} (--drop_unknown drops those events)")
    return list(names), [e for e in events if e.label in known], unknown


def windows(dur: float, s: Settings) -> tuple[list[tuple[float, float, float]], bool]:
    """((start, end, padded_s) of the windows of a recording `dur` seconds long, whether a
    partial last window was dropped)."""
    w, hop = s.window_s, s.hop_s or s.window_s
    out, k = [], 0
    while (a := k * hop) < dur - 1e-9:
        if a + w > dur + 1e-9:  # the partial last window
            if s.last_window == "drop":
                return out, True
            out.append((a, dur, a + w - dur))
            break
        out.append((a, a + w, 0.0))
        k += 1
    return out, False


def rows(events: list, dur: dict[str, float], names: list[str], s: Settings):
    """(row dicts, counts, rows per class) of the events or of the windows."""
    index = {n: i for i, n in enumerate(names)}
    stats, per_class, out = collections.Counter(), collections.Counter(), []
    if s.window_s is None:  # one row per stretch of audio: a duet is one row, two labels
        same = collections.defaultdict(set)
        for e in events:
            same[(e.file, e.start, e.end)].add(e.label)
        for (f, a, b), labels in sorted(same.items()):
            out.append({"file": f, "start": a, "end": b,
                        "labels": sorted(index[x] for x in labels)})
            per_class.update(labels)
        return out, stats, per_class
    by_file = collections.defaultdict(list)
    for e in events:
        by_file[e.file].append(e)
    used = set()
    for f in sorted(dur):
        wins, dropped = windows(dur[f], s)
        stats["partial_dropped"] += dropped
        stats["no_window"] += not wins
        for a, b, pad in wins:
            hit = {e for e in by_file[f] if (ov := min(b, e.end) - max(a, e.start)) > 0 and
                   ov >= min(s.min_overlap_s, e.end - e.start) - 1e-9}
            used |= hit
            labels = sorted({index[e.label] for e in hit})
            per_class.update(names[i] for i in labels)
            stats["labelled" if labels else "empty"] += 1
            stats["padded"] += pad > 0
            out.append({"file": f, "start": a, "end": b, "labels": labels, "padded_s": pad})
    stats["events_in_no_window"] = len(events) - len(used)
    return out, stats, per_class


def _features(names: list[str], s: Settings) -> dict:
    number = {"dtype": "float64", "_type": "Value"}
    feats = {"audio": {"decode": False, "_type": "Audio"},
             "filepath": {"dtype": "string", "_type": "Value"},
             "start_time": number, "end_time": number}
    if s.window_s is not None:
        feats["padded_s"] = number
    # What datasets (< 4) writes for Sequence(ClassLabel); datasets >= 4 reads it as List.
    feats[s.multilabel_column] = {"feature": {"names": names, "_type": "ClassLabel"},
                                  "_type": "Sequence"}
    return feats


def _table(out: list[dict], names: list[str], s: Settings, out_dir: pathlib.Path) -> pa.Table:
    def stored(f):
        return os.path.relpath(f, out_dir.absolute()) if s.relative else f
    cols = {"audio": pa.array([{"bytes": None, "path": stored(r["file"])} for r in out], AUDIO),
            "filepath": pa.array([stored(r["file"]) for r in out], pa.string()),  # as stored
            "start_time": pa.array([float(r["start"]) for r in out], pa.float64()),
            "end_time": pa.array([float(r["end"]) for r in out], pa.float64())}
    if s.window_s is not None:
        cols["padded_s"] = pa.array([float(r["padded_s"]) for r in out], pa.float64())
    cols[s.multilabel_column] = pa.array([r["labels"] for r in out], pa.list_(pa.int64()))
    feats = _features(names, s)
    return pa.table(cols).replace_schema_metadata(
        {"huggingface": json.dumps({"info": {"features": feats}})})


def write_state(directory: pathlib.Path, tbl: pa.Table, description: str) -> None:
    """state.json (`_data_files`: the one shard SHARD) and dataset_info.json (the features of
    `tbl`'s huggingface metadata) beside `directory / SHARD`, as `save_to_disk` writes them:
    `datasets.load_from_disk` opens the directory."""
    feats = json.loads(tbl.schema.metadata[b"huggingface"])["info"]["features"]
    digest = hashlib.sha256((directory / SHARD).read_bytes()).hexdigest()[:16]
    state = {"_data_files": [{"filename": SHARD}], "_format_columns": None,
             "_fingerprint": digest,
             "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
             "_split": None}
    info = {"citation": "", "description": description, "features": feats, "homepage": "",
            "license": ""}
    (directory / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    (directory / "dataset_info.json").write_text(json.dumps(info, indent=2))


def _save(tbl: pa.Table, out_dir: pathlib.Path, description: str) -> None:
    """`tbl` as a save_to_disk directory. A new `out_dir`: written beside it and renamed into
    place. An existing empty one (checked before; a symlink to one, or `.`): written into a
    temporary directory inside it and its files moved up, state.json last (what
    `load_from_disk` opens by), so the directory itself (the link, the shell's current
    directory) stays what it is."""
    with outputs.replacing_dir(out_dir, last="state.json") as tmp:
        with pa.OSFile(str(tmp / SHARD), "wb") as f, pa.ipc.new_stream(f, tbl.schema) as w:
            w.write_table(tbl)
        write_state(tmp, tbl, description)


def write(tables: list[str], s: Settings, *, class_names: list[str] | None = None) -> dict:
    """Read the annotation `tables` (files or directories), write the split into `s.out_dir`
    and return what was written: out_dir, rows, recordings, tables, events, repeats (Raven view
    repeats skipped), classes, per_class (rows per class), dropped (unknown labels dropped,
    Counter) and stats (windows: labelled, empty, padded, partial_dropped, no_window,
    events_in_no_window). `class_names`: the class list (--classes_from's names). Raises
    BadArgumentError (every problem, one a line) or FileNotFoundError."""
    check(s)
    out_dir = pathlib.Path(s.out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise errors.BadArgumentError(
            f"--out_dir: expected a new or empty directory, got {str(out_dir)!r}, which "
            f"{'holds files' if out_dir.is_dir() else 'is a file'}")
    cols = annotation_tables.Columns(label=s.label_column, start=s.start_column,
                                     end=s.end_column, file=s.file_column)
    found = annotation_tables.read(tables, cols, audio_dir=s.audio_dir,
                                   audio_for=s.audio_for, path_map=s.path_map)
    dur = durations(found)
    events, cut = place(found, dur)
    names, events, dropped = classes(events, class_names, s.drop_unknown, found)
    annotation_tables.raise_problems(found.problems)
    out, stats, per_class = rows(events, dur, names, s)
    if not out:
        raise errors.BadArgumentError(
            f"TABLE: expected events (or, with --window_s, recordings at least one window "
            f"long), got {len(found.events)} event(s) in {len(dur)} recording(s): no rows")
    what = "events" if s.window_s is None else \
        f"windows of {s.window_s:g} s every {s.hop_s or s.window_s:g} s"
    _save(_table(out, names, s, out_dir), out_dir,
          f"birdjepa from_annotations: {len(out)} {what} from {found.tables} table(s)")
    return {"out_dir": str(out_dir), "rows": len(out), "recordings": len(dur),
            "tables": found.tables, "events": len(found.events), "repeats": found.repeats,
            "classes": names, "per_class": per_class, "dropped": dropped, "stats": stats,
            "cut": cut}


def report(r: dict, s: Settings) -> list[str]:
    """The counts `write` returned, as the lines the command prints."""
    kind = "one per event" if s.window_s is None else \
        f"windows of {s.window_s:g} s every {s.hop_s or s.window_s:g} s"
    lines = [f"wrote {r['out_dir']}: {r['rows']} rows ({kind}) over {r['recordings']} "
             f"recording(s), from {r['events']} event(s) in {r['tables']} table(s)"]
    st = r["stats"]
    if s.window_s is not None:
        lines.append(f"windows: {st['labelled']} with labels, {st['empty']} without (negatives)"
                     f", {st['padded']} padded at the end, {st['partial_dropped']} partial last "
                     f"window(s) dropped, {st['no_window']} recording(s) shorter than a window; "
                     f"{st['events_in_no_window']} event(s) in no window")
    per = ", ".join(f"{c} {r['per_class'][c]}" for c in r["classes"])
    lines.append(f"rows per class ({len(r['classes'])} classes): {per}")
    if r["repeats"]:
        lines.append(f"skipped {r['repeats']} Raven row(s) repeating a selection for another "
                     "view")
    if r.get("cut"):
        lines.append(f"{r['cut']} event(s) cut at their recording's end (they ran past it)")
    if r["dropped"]:
        lines.append(f"dropped {sum(r['dropped'].values())} event(s) with labels not in "
                     "--classes_from: " + ", ".join(f"{k} {n}" for k, n in
                                                    sorted(r["dropped"].items())))
    return lines


def add_options(p: cli_args.Parser) -> cli_args.Parser:
    """Every option of `python -m birdjepa.sources from_annotations`, in one place."""
    p.add_argument("tables", nargs="+", metavar="TABLE", help="Raven selection tables, CSV "
                   "files, or directories of them (*.selections.txt, *.csv; recursively)")
    p.config(Settings)
    p._option_string_actions["--audio_for"].metavar = "TABLE=AUDIO"
    return p


def run(a, resolve, names_of) -> int:
    """Write the split as the command line `a` says; `resolve(spec)` gives the Arrow files of
    --classes_from and `names_of(paths, column)` a column's ClassLabel names (or None)."""
    try:
        s = Settings(**{k: v for k, v in vars(a).items() if k in Settings.__dataclass_fields__})
        names = None
        if s.classes_from:
            paths = resolve(s.classes_from)
            names = names_of(paths, s.classes_column)
            if names is None:
                have = [c for c in birdjepa.data.ipc.schema(paths[0]).names
                        if names_of(paths, c) is not None]
                raise errors.BadArgumentError(
                    f"--classes_column: expected a column of {s.classes_from!r} with ClassLabel "
                    f"names, got {s.classes_column!r} (columns with names: "
                    f"{', '.join(have) or 'none'})")
        r = write(a.tables, s, class_names=names)
    except errors.BadArgumentError as e:
        for line in str(e).splitlines():
            cli_args.fail(line)
        return cli_args.EXIT_USAGE
    except (errors.Error, OSError, ValueError) as e:
        return cli_args.fail(e)
    print("\n".join(report(r, s)))
    return 0
