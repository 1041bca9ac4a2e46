"""Issue 36 item 3: `python -m birdjepa.sources from_annotations` turns Raven selection tables and
CSV annotations into a test split (events, or fixed windows with the "nothing here" negatives)
that `datasets`, the loader and `evaluate` read as it is; a Raven table written by `predict
--format raven` reads back as the events it holds; bad input is one line per problem."""

import os

import numpy as np
import pyarrow as pa
import pytest
import soundfile
import tiny
from test_raven_sequence import read_table

import birdjepa.data
import birdjepa.data.from_files
import birdjepa.data.table as table
import birdjepa.demo_data.catalogue as catalogue
import birdjepa.demo_data.soundscape as soundscape
import birdjepa.evaluate
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.probes as probes
import birdjepa.models.raven as raven
import birdjepa.sources

SR = 16000
HEADER = "Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\tLow Freq (Hz)\tHigh Freq (Hz)"


def _wav(path, seconds: float, freq: float = 1000.0):
    t = np.arange(int(round(seconds * SR))) / SR
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, (0.2 * np.sin(2 * np.pi * freq * t)).astype(np.float32), SR)
    return str(path)


def _raven(path, rows, extra=("Species",), view_repeats=False):
    """A Raven table: rows of (begin, end, *extra cells); with view_repeats every selection is
    listed twice (Waveform 1, then Spectrogram 1), as Raven saves a two-view window."""
    lines = [HEADER + "\t" + "\t".join(extra)]
    for i, (a, b, *cells) in enumerate(rows, 1):
        for view in (("Waveform 1", "Spectrogram 1") if view_repeats else ("Spectrogram 1",)):
            lines.append("\t".join(map(str, [i, view, 1, a, b, 0, 8000, *cells])))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def annotated(tmp_path):
    """rec1 (12.5 s, a per-recording table with view repeats), rec2 and rec3 (7 s and 3 s, one
    combined table on their file sequence), rec4 (6 s, a CSV, one unannotated row)."""
    a = tmp_path / "audio"
    rec = {n: _wav(a / f"{n}.wav", s) for n, s in
           [("rec1", 12.5), ("rec2", 7.0), ("rec3", 3.0), ("rec4", 6.0)]}
    _raven(a / "rec1.Table.1.selections.txt", [(1.0, 2.0, "amerob"), (4.8, 6.0, "norcar"),
                                                (11.0, 12.5, "norcar")], view_repeats=True)
    # Combined: Begin Time on the sequence rec2 (0-7 s) + rec3 (7-10 s); File Offset within.
    _raven(tmp_path / "combined.txt", [(2.0, 3.0, "blujay", "audio/rec2.wav", 2.0),
                                       (7.5, 9.0, "amerob", "audio/rec3.wav", 0.5)],
           extra=("Species", "Begin Path", "File Offset (s)"))
    (tmp_path / "more.csv").write_text(
        f"file,start,end,label\n{rec['rec4']},0.2,0.4,blujay\naudio/rec4.wav,,,\n")
    events = {(rec["rec1"], 1.0, 2.0, "amerob"), (rec["rec1"], 4.8, 6.0, "norcar"),
              (rec["rec1"], 11.0, 12.5, "norcar"), (rec["rec2"], 2.0, 3.0, "blujay"),
              (rec["rec3"], 0.5, 2.0, "amerob"), (rec["rec4"], 0.2, 0.4, "blujay")}
    tables = [str(a), str(tmp_path / "combined.txt"), str(tmp_path / "more.csv")]
    return tables, rec, events


def _rows(out, column="ebird_code_multilabel"):
    t = table.read(out, ["filepath", "start_time", "end_time", column])
    names = table.class_names(out, column)
    return [(f, a, b, [names[i] for i in y]) for f, a, b, y in zip(
        *(t.column(c).to_pylist() for c in t.column_names), strict=True)]


def test_events_and_windows_from_raven_and_csv(annotated, tmp_path, capsys):
    tables, rec, events = annotated
    assert birdjepa.sources.main(["from_annotations", *tables, "--out_dir",
                                  str(tmp_path / "ev")]) == 0
    got = _rows(tmp_path / "ev")
    assert {(f, a, b, y[0]) for f, a, b, y in got} == events and len(got) == 6
    assert "skipped 3 Raven row(s) repeating a selection" in capsys.readouterr().out
    # Windows of 5 s every 5 s: the last partial window of each recording is dropped (BirdSet),
    # rec3 (3 s) has none, and rec4's 0.2 s event labels its window though shorter than 0.5 s.
    assert birdjepa.sources.main(["from_annotations", *tables, "--out_dir",
                                  str(tmp_path / "win"), "--window_s", "5", "--relative"]) == 0
    out = capsys.readouterr().out
    rel = {k: os.path.relpath(v, tmp_path / "win") for k, v in rec.items()}
    want = [(rel["rec1"], 0.0, 5.0, ["amerob"]), (rel["rec1"], 5.0, 10.0, ["norcar"]),
            (rel["rec2"], 0.0, 5.0, ["blujay"]), (rel["rec4"], 0.0, 5.0, ["blujay"])]
    assert _rows(tmp_path / "win") == want  # issue 36 item 6.3: filepath relative, as stored
    assert "4 with labels, 0 without" in out and "4 partial last window(s) dropped" in out
    assert "1 recording(s) shorter than a window; 2 event(s) in no window" in out
    assert "rows per class (3 classes): amerob 1, blujay 2, norcar 1" in out
    # Every 2.5 s, the tail kept: padding is visible, and windows without events are negatives.
    assert birdjepa.sources.main(["from_annotations", *tables, "--out_dir", str(tmp_path / "pad"),
                                  "--window_s", "5", "--hop_s", "2.5", "--last_window", "pad",
                                  "--min_overlap_s", "1.0"]) == 0
    t = table.read(tmp_path / "pad", ["filepath", "start_time", "end_time", "padded_s",
                                      "ebird_code_multilabel"]).to_pylist()
    rec1 = [(r["start_time"], r["end_time"], r["padded_s"], r["ebird_code_multilabel"])
            for r in t if r["filepath"] == rec["rec1"]]
    assert rec1 == [(0.0, 5.0, 0.0, [0]), (2.5, 7.5, 0.0, [2]), (5.0, 10.0, 0.0, [2]),
                    (7.5, 12.5, 0.0, [2]), (10.0, 12.5, 2.5, [2])]
    assert [(r["start_time"], r["end_time"], r["padded_s"]) for r in t
            if r["filepath"] == rec["rec3"]] == [(0.0, 3.0, 2.0)]
    assert sum(not r["ebird_code_multilabel"] for r in t) == 2  # rec2's and rec4's second window


def test_the_split_is_what_datasets_and_the_loader_read(annotated, tmp_path):
    datasets = pytest.importorskip("datasets")
    tables, rec, _ = annotated
    assert birdjepa.sources.main(["from_annotations", *tables, "--out_dir",
                                  str(tmp_path / "win"), "--window_s", "5", "--relative"]) == 0
    ds = datasets.load_from_disk(str(tmp_path / "win"))
    assert ds.features["ebird_code_multilabel"].feature.names == ["amerob", "blujay", "norcar"]
    assert ds.features["audio"].decode is False and ds.features["start_time"].dtype == "float64"
    assert ds[0]["audio"] == {"bytes": None, "path": os.path.relpath(rec["rec1"],
                                                                     tmp_path / "win")}
    with birdjepa.data.Loader(tmp_path / "win", batch_size=4, mode="eval", segment="columns",
                              label_column="ebird_code_multilabel", n_workers=1) as ev:
        b = next(iter(ev))
    assert b["valid"].all() and ev.class_names == ["amerob", "blujay", "norcar"]
    assert b["start_s"].tolist() == [0.0, 5.0, 0.0, 0.0]
    assert b["target"].tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 0]]


def test_predicts_raven_tables_read_back_as_their_detections(tmp_path):
    """The acceptance of items 3-4: a combined table (sequence times, File Offset) and per-file
    tables written by `predict --format raven` give back exactly the detections."""
    files = [_wav(tmp_path / "a" / f"r{i}.wav", s) for i, s in enumerate((4.0, 2.5, 3.25))]
    det = {"file": pa.array([files[0], files[0], files[2], files[2]]),
           "start_s": pa.array([0.0, 2.5, 1.0, 2.0]), "end_s": pa.array([2.0, 4.0, 3.0, 3.25]),
           "class": pa.array(["amerob", "norcar", "norcar", "blujay"]),
           "confidence": pa.array([0.9, 0.8, 0.7, 0.6]), "class_index": pa.array([0, 2, 2, 1]),
           "padded_s": pa.array([0.0, 0.0, 0.0, 0.75])}
    want = {(f, a, b, c) for f, a, b, c in zip(*(det[k].to_pylist() for k in (
        "file", "start_s", "end_s", "class")), strict=True)}
    high = dict.fromkeys(files, 16000.0)
    raven.write_combined(det, tmp_path / "all.txt", high, {f: soundfile.info(f).duration
                                                           for f in files})
    assert float(read_table(tmp_path / "all.txt")[-1]["Begin Time (s)"]) == 4.0 + 2.5 + 2.0
    raven.write_per_recording(det, tmp_path / "per", files, high, raven.names(files))
    for name, src in [("c", [str(tmp_path / "all.txt")]),
                      ("p", [str(tmp_path / "per"), "--audio_dir", str(tmp_path / "a")])]:
        assert birdjepa.sources.main(["from_annotations", *src, "--out_dir",
                                      str(tmp_path / name)]) == 0
        assert {(f, a, b, y[0]) for f, a, b, y in _rows(tmp_path / name)} == want
    # A per-recording table whose name does not say its recording: --audio_for names it.
    (tmp_path / "per" / "r0.selections.txt").rename(tmp_path / "first.txt")
    assert birdjepa.sources.main(["from_annotations", str(tmp_path / "first.txt"), "--out_dir",
                                  str(tmp_path / "f"), "--audio_for", f"first.txt={files[0]}"]) == 0
    assert {r[:3] for r in _rows(tmp_path / "f")} == {(files[0], 0.0, 2.0), (files[0], 2.5, 4.0)}


def test_class_names_from_a_training_split(annotated, tmp_path, capsys):
    tables, _, _ = annotated
    train = birdjepa.data.from_files.write(
        [_wav(tmp_path / "t" / sp / "x.wav", 1.0) for sp in ("blujay", "amerob", "zzz")],
        tmp_path / "train", label_from="parent")
    assert table.class_names(train, "label") == ["amerob", "blujay", "zzz"]
    args = ["from_annotations", *tables, "--classes_from", str(tmp_path / "train")]
    assert birdjepa.sources.main([*args, "--out_dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --classes_from: expected labels among its 3 class names, got 1 "
                   "unknown: 'norcar' (2 event(s)) (--drop_unknown drops those events)"]
    assert not (tmp_path / "x").exists()
    assert birdjepa.sources.main([*args, "--out_dir", str(tmp_path / "x"), "--drop_unknown"]) == 0
    assert "dropped 2 event(s) with labels not in --classes_from: norcar 2" in \
        capsys.readouterr().out
    assert table.class_names(tmp_path / "x", "ebird_code_multilabel") == ["amerob", "blujay",
                                                                          "zzz"]
    assert birdjepa.sources.main([*args, "--classes_column", "file", "--out_dir",
                                  str(tmp_path / "y")]) == 2
    assert "got 'file' (columns with names: label, labels)" in capsys.readouterr().err


def test_bad_input_is_one_line_per_problem_and_exit_2(tmp_path, capsys):
    a = tmp_path / "audio"
    _wav(a / "rec1.wav", 4.0)
    t = _raven(a / "rec1.selections.txt", [(1.0, 2.0, "amerob"), ("x", 2.0, "amerob"),
                                           (3.0, 2.5, "norcar"), (5.0, 9.0, "norcar"),
                                           (0.5, 1.0, "")])
    (tmp_path / "ann.csv").write_text("file,start,end,label\ngone.wav,0,1,amerob\n")
    _raven(a / "orphan.selections.txt", [])
    _raven(tmp_path / "nolabel.txt", [(1.0, 2.0, "amerob")], extra=("Notes",))
    assert birdjepa.sources.main(["from_annotations", str(a), str(tmp_path / "ann.csv"),
                                  str(tmp_path / "nolabel.txt"), "--out_dir",
                                  str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {a / 'orphan.selections.txt'}: expected one recording named "
        f"orphan.<wav|flac|ogg|oga|opus|mp3|aif|aiff> in '{a}' for this table (no Begin Path "
        "column), found none; name it with --audio_for orphan.selections.txt=AUDIO or "
        "--audio_dir DIR",
        f"error: {t}: row 2, column 'Begin Time (s)': expected seconds (a number), got 'x'",
        f"error: {t}: row 3, column 'End Time (s)': expected an end after the start (3 s), "
        "got 2.5 s",
        f"error: {t}: row 5, column 'Species': expected a label, got an empty cell",
        f"error: {tmp_path / 'ann.csv'}: row 1, column 'file': audio file "
        f"'{tmp_path / 'gone.wav'}' does not exist (stored as 'gone.wav'; --audio_dir DIR says "
        "where it is)",
        f"error: {tmp_path / 'nolabel.txt'}: expected column(s) 'Species' (a label column: "
        "Species, Annotation, label, or name it with --label_column), got 'Selection', 'View', "
        "'Channel', 'Begin Time (s)', 'End Time (s)', 'Low Freq (Hz)', 'High Freq (Hz)', "
        "'Notes'",
        f"error: {t}: row 4: event [5, 9] s lies wholly after the end of its recording "
        f"'{a / 'rec1.wav'}' (4 s long)",
    ]
    assert not (tmp_path / "out").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    for extra, message in [(["--hop_s", "5"], "--hop_s: expected seconds > 0 with --window_s, "
                             "got 5.0 with --window_s None"),
                           (["--window_s", "0"], "--window_s: expected seconds > 0, got 0.0"),
                           (["--out_dir", str(tmp_path / "full")], "--out_dir: expected a new "
                            f"or empty directory, got '{tmp_path / 'full'}', which holds files")]:
        assert birdjepa.sources.main(["from_annotations", str(t), "--out_dir",
                                      str(tmp_path / "o2"), *extra]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"error: {message}"]


@pytest.mark.slow  # ~15 CPU-s: embeds 24 training clips and 6 test windows, one probe
def test_evaluate_runs_on_annotated_demo_soundscapes(tmp_path, demo_corpus):
    """Two demo soundscapes (15 s, whole files) annotated per 5 s segment in Raven tables ->
    windows whose labels are the soundscape's own -> `evaluate` with segment = "columns"."""
    audio, plans = tmp_path / "audio", soundscape.plan_soundscapes(2, 3, n_segments=3)
    audio.mkdir()
    want = []
    for p in plans:
        x, labels = soundscape.synthesize(p)
        soundfile.write(audio / f"site{p.index}.wav", x, p.sample_rate)
        _raven(audio / f"site{p.index}.Table.1.selections.txt",
               [(5 * j + 0.5, 5 * j + 4.5, catalogue.SPECIES[c].code)
                for j, lab in enumerate(labels) for c in lab])
        want += labels
    train = demo_corpus(n_recordings=24, n_shards=1, min_s=5.0, max_s=5.0)["out_dir"]
    test = tmp_path / "test"
    assert birdjepa.sources.main(["from_annotations", str(audio), "--out_dir", str(test),
                                  "--window_s", "5", "--classes_from", train]) == 0
    t = table.read(test, ["start_time", "ebird_code_multilabel"])
    assert t.column("ebird_code_multilabel").to_pylist() == want  # [[], [7], [7], [2, 4, 5, 8]...]
    assert t.column("start_time").to_pylist() == [0.0, 5.0, 10.0] * 2
    assert table.class_names(test, "ebird_code_multilabel") == table.class_names(train, "label")
    (tmp_path / "tiny.toml").write_text(tiny.tiny_toml("x", n_steps=1))  # a random encoder
    cfg = eval_config.EvalConfig(
        random=(str(tmp_path / "tiny.toml"),), train_shards=train, test_shards=str(test),
        test_name="annotated", segment="columns", probes=("prototypical",), shots=(0,),
        seeds=(0,), probe=probes.ProbeConfig(min_steps=5, epochs=1, n_prototypes=2), n_boot=100,
        out_dir=str(tmp_path / "eval"))
    rows = birdjepa.evaluate.run(cfg, verbose=False)["rows"]
    cmap = [r for r in rows if r["metric"] == "cmap"]
    assert len(cmap) == 1 and cmap[0]["test_set"] == "annotated"
    assert (cmap[0]["n_segments"], cmap[0]["n_labelled"]) == (6, 5)
    assert 0.0 < cmap[0]["value"] <= 1.0


def test_only_the_same_selection_in_another_view_is_a_repeat(tmp_path, capsys):
    """Issue 47 item 10: Raven "view repeats" were skipped by the Selection number alone: a
    combined table whose numbers restart per recording lost every event of the second
    recording, and two different events under one number lost one. A repeat is the same
    selection (times, label, file) in another View; anything else is kept."""
    a = tmp_path / "audio"
    _wav(a / "x.wav", 6.0)
    _wav(a / "y.wav", 6.0)
    lines = [HEADER + "\tSpecies\tBegin Path\tFile Offset (s)"]
    for sel, view, begin, end, sp, f, off in [
            (1, "Waveform 1", 1.0, 2.0, "amerob", "audio/x.wav", 1.0),
            (1, "Spectrogram 1", 1.0, 2.0, "amerob", "audio/x.wav", 1.0),  # a view repeat
            (1, "Spectrogram 1", 7.0, 8.0, "norcar", "audio/y.wav", 1.0),  # restarted numbers
            (2, "Spectrogram 1", 9.0, 9.5, "blujay", "audio/y.wav", 3.0),
            (2, "Spectrogram 1", 10.0, 11.0, "amerob", "audio/y.wav", 4.0)]:  # 2 events, one number
        lines.append("\t".join(map(str, [sel, view, 1, begin, end, 0, 8000, sp, f, off])))
    (tmp_path / "combined.txt").write_text("\n".join(lines) + "\n")
    assert birdjepa.sources.main(["from_annotations", str(tmp_path / "combined.txt"),
                                  "--out_dir", str(tmp_path / "ev")]) == 0
    got = sorted((os.path.basename(f), a, b, y[0]) for f, a, b, y in _rows(tmp_path / "ev"))
    assert got == [("x.wav", 1.0, 2.0, "amerob"), ("y.wav", 1.0, 2.0, "norcar"),
                   ("y.wav", 3.0, 3.5, "blujay"), ("y.wav", 4.0, 5.0, "amerob")], got
    assert "skipped 1 Raven row(s) repeating a selection" in capsys.readouterr().out


def test_durations_are_the_datas_events_past_the_end_are_cut_and_nothing_counts_twice(
        tmp_path, capsys):
    """Issue 47 items 10a and 21: a recording's duration came from its header: an event at 7-8 s
    of a WAV whose data ends at 5 s labelled a padding-only window (the same damage in an OGG
    was refused); an event that only ran past the end was refused as "outside" its recording; a
    table reached twice (a directory and the file in it) doubled every event, a link and its
    target were two recordings, and a duet became two rows of the same audio with conflicting
    single labels. Durations are the data's; an event that runs past the end is cut there
    (counted), one wholly after it refused; a table, a recording, an event counts once; a duet
    is one row with both labels."""
    a = tmp_path / "audio"
    whole = _wav(a / "long.wav", 10.0)
    data = open(whole, "rb").read()
    (a / "cut.wav").write_bytes(data[:44 + 2 * 5 * SR])  # header 10 s, data 5 s
    (a / "alias.wav").symlink_to(a / "long.wav")
    lines = [HEADER + "\tSpecies\tBegin Path\tFile Offset (s)"]
    for i, (b, e, sp, f) in enumerate([(7.0, 8.0, "amerob", "audio/cut.wav")], 1):
        lines.append("\t".join(map(str, [i, "Spectrogram 1", 1, b, e, 0, 8000, sp, f, b])))
    (tmp_path / "cut.txt").write_text("\n".join(lines) + "\n")
    assert birdjepa.sources.main(["from_annotations", str(tmp_path / "cut.txt"), "--out_dir",
                                  str(tmp_path / "o1")]) == 2
    err = capsys.readouterr().err
    assert "event [7, 8] s lies wholly after the end of its recording" in err and \
        "(5 s long)" in err, err
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "t.csv").write_text(
        f"file,start,end,label\n{a / 'long.wav'},1,2,amerob\n{a / 'long.wav'},1,2,norcar\n"
        f"{a / 'alias.wav'},3,4,blujay\n{a / 'long.wav'},9.5,11,carwre\n")
    assert birdjepa.sources.main(["from_annotations", str(tmp_path / "ann"),
                                  str(tmp_path / "ann" / "t.csv"), "--out_dir",
                                  str(tmp_path / "o2")]) == 0
    out = capsys.readouterr().out
    got = [(os.path.basename(f), a_, b, y) for f, a_, b, y in _rows(tmp_path / "o2")]
    assert got == [("long.wav", 1.0, 2.0, ["amerob", "norcar"]),
                   ("long.wav", 3.0, 4.0, ["blujay"]), ("long.wav", 9.5, 10.0, ["carwre"])], got
    assert "1 event(s) cut at their recording's end" in out, out
