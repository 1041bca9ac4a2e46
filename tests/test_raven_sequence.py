"""Issue 36 item 4: a combined Raven table over several recordings places its selections on the
file sequence Raven opens (cumulative times in path order, `File Offset (s)` within each file,
`Begin Path` per selection, the `.list.txt` file list beside it, as BirdNET-Analyzer writes),
its selections are the per-recording tables' once each file's offset is taken off, and
`sources from_annotations` reads either layout back as the detections in their files."""

import collections
import os

import numpy as np
import pyarrow as pa
import soundfile
from test_models_cli import run_dir  # noqa: F401 (shared module fixture)

import birdjepa.data.table as table
import birdjepa.models.detect
import birdjepa.models.raven as raven
import birdjepa.predict
import birdjepa.sources

SR = 32000
SECONDS = (1.3, 2.6, 1.85)  # none a whole number of 1 s windows: every last window is padded


def read_table(path) -> list[dict]:
    """A Raven selection table as Raven reads it: tab-separated, one header line."""
    lines = path.read_text().splitlines()
    header = lines[0].split("\t")
    assert all(len(ln.split("\t")) == len(header) for ln in lines[1:])
    return [dict(zip(header, ln.split("\t"), strict=True)) for ln in lines[1:]]


def _recordings(root):
    """Three short noisy chirps, in a deliberately unsorted order of writing."""
    rng = np.random.default_rng(0)
    out = []
    for name, s in zip(("b.wav", "a.flac", "c.wav"), SECONDS, strict=True):
        n = int(round(s * SR))
        t = np.arange(n) / SR
        x = 0.2 * np.sin(2 * np.pi * (800 + 2000 * t) * t) + 0.02 * rng.standard_normal(n)
        soundfile.write(root / name, x.astype(np.float32), SR)
        out.append(str(root / name))
    return out


def test_combined_table_is_on_the_file_sequence(run_dir, tmp_path):  # noqa: F811
    audio = tmp_path / "audio"
    audio.mkdir()
    files = _recordings(audio)
    common = [str(run_dir), str(audio), "--window_s", "1.0", "--top_k", "2", "--min_conf", "0.0",
              "--quiet", "--format", "raven"]
    assert birdjepa.predict.main([*common, "--out", str(tmp_path / "all.txt")]) == 0
    assert birdjepa.predict.main([*common, "--out_dir", str(tmp_path / "tables")]) == 0
    order = sorted(os.path.abspath(f) for f in files)  # a.flac, b.wav, c.wav
    assert (tmp_path / "all.list.txt").read_text().splitlines() == order
    # Each file's offset on the sequence: the durations (from the headers) of those before it.
    dur = {f: soundfile.info(f).frames / soundfile.info(f).samplerate for f in order}
    offset = dict(zip(order, np.cumsum([0.0] + [dur[f] for f in order[:-1]]), strict=True))
    rows = read_table(tmp_path / "all.txt")
    assert [int(r["Selection"]) for r in rows] == list(range(1, len(rows) + 1))
    begins = [float(r["Begin Time (s)"]) for r in rows]
    assert begins == sorted(begins) and {r["Begin Path"] for r in rows} == set(order)
    combined = []
    for r in rows:
        f, at = r["Begin Path"], offset[r["Begin Path"]]
        begin, end = float(r["Begin Time (s)"]), float(r["End Time (s)"])
        assert abs(begin - at - float(r["File Offset (s)"])) < 2e-6
        assert at - 1e-6 <= begin < end <= at + dur[f] + 1e-6  # lands inside its own file
        combined.append((os.path.basename(f).rsplit(".", 1)[0], round(begin - at, 4),
                         round(end - at, 4), r["Species"], r["Confidence"], r["Padded (s)"]))
    # The same selections as the per-recording tables (times within each file there).
    per = []
    for f in order:
        name = os.path.basename(f).rsplit(".", 1)[0]
        sel = read_table(tmp_path / "tables" / f"{name}.selections.txt")
        assert "Begin Path" not in sel[0]
        per += [(name, round(float(r["Begin Time (s)"]), 4), round(float(r["End Time (s)"]), 4),
                 r["Species"], r["Confidence"], r["Padded (s)"]) for r in sel]
        last = max(sel, key=lambda r: float(r["Begin Time (s)"]))
        assert float(last["Padded (s)"]) > 0.0  # the last window runs past the end, and says so
        assert abs(float(last["End Time (s)"]) - dur[f]) < 1e-5
    assert sorted(combined) == sorted(per) and len(per) == len(rows)
    # Read back by from_annotations, both layouts give the detections as events in their files:
    # one row per window, its classes together (issue 47 item 10a: the top-k classes of one
    # window are one stretch of audio with several labels, not rows that contradict each other).
    grouped = collections.defaultdict(set)
    for n, a, b, c, *_ in per:
        grouped[(os.path.join(str(audio), f"{n}.{'flac' if n == 'a' else 'wav'}"), a, b)].add(c)
    want = sorted((*k, tuple(sorted(v))) for k, v in grouped.items())
    for name, src in [("c", [str(tmp_path / "all.txt")]),
                      ("p", [str(tmp_path / "tables"), "--audio_dir", str(audio)])]:
        assert birdjepa.sources.main(["from_annotations", *src, "--out_dir",
                                      str(tmp_path / name)]) == 0
        t = table.read(tmp_path / name, ["filepath", "start_time", "end_time",
                                         "ebird_code_multilabel"])
        names = table.class_names(tmp_path / name, "ebird_code_multilabel")
        got = [(f, round(a, 4), round(b, 4), tuple(sorted(names[i] for i in y)))
               for f, a, b, y in zip(*(t.column(c).to_pylist() for c in t.column_names),
                                     strict=True)]
        assert sorted(got) == want


def test_a_recording_without_detections_keeps_its_place(tmp_path):
    """The sequence is every recording read: one without detections still takes its duration."""
    det = {"file": pa.array(["/x/a.wav", "/x/c.wav"]), "start_s": pa.array([0.5, 1.0]),
           "end_s": pa.array([1.5, 2.0]), "class": pa.array(["amerob", "norcar"]),
           "confidence": pa.array([0.9, 0.8]), "class_index": pa.array([0, 1]),
           "padded_s": pa.array([0.0, 0.25])}
    path, listed = raven.write_combined(det, tmp_path / "t.txt",
                                         dict.fromkeys(("/x/a.wav", "/x/c.wav"), 16000.0),
                                         {"/x/c.wav": 2.25, "/x/b.wav": 7.0, "/x/a.wav": 3.0})
    assert listed.read_text().splitlines() == ["/x/a.wav", "/x/b.wav", "/x/c.wav"]
    rows = read_table(path)
    assert [(r["Begin Time (s)"], r["End Time (s)"], r["File Offset (s)"], r["Padded (s)"])
            for r in rows] == [("0.5", "1.5", "0.5", "0"), ("11", "12", "1", "0.25")]


def test_per_recording_table_names_never_collide(run_dir, tmp_path):  # noqa: F811
    """Issue 38 item 1: `A/rec.wav` + `A/rec.flac`, `a/b_c/x.wav` + `a_b/c/x.wav`, and a stem
    equal to another recording's folder-based name each gave two recordings one table name:
    one table overwrote the other (exit 0)."""
    cases = [["/d/A/rec.wav", "/d/A/rec.flac"], ["/d/a/b_c/x.wav", "/d/a_b/c/x.wav"],
             ["/d/x/A/rec.wav", "/d/y/A/rec.wav", "/d/z/x_A_rec.wav"]]
    for files in cases:
        got = raven.names(files)
        assert len(set(got.values())) == len(files), got
    assert raven.names(["/d/one.wav", "/d/two.wav"]) == {"/d/one.wav": "one",
                                                         "/d/two.wav": "two"}
    audio = tmp_path / "audio"
    (audio / "A").mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name in ("A/rec.wav", "A/rec.flac"):
        soundfile.write(audio / name, 0.1 * rng.standard_normal(SR).astype(np.float32), SR)
    assert birdjepa.predict.main([str(run_dir), str(audio), "--window_s", "1.0",
                                        "--min_conf", "0.0", "--quiet", "--format", "raven",
                                        "--out_dir", str(tmp_path / "tables")]) == 0
    assert len(list((tmp_path / "tables").glob("*.selections.txt"))) == 2


def test_begin_path_is_the_path_as_it_is(tmp_path):
    """Issue 38 item 13: `dawn  chorus.wav` was written as `dawn chorus.wav` (another, existing
    recording); a tab or newline in a name became a path that does not exist."""
    det = {"file": pa.array(["/x/dawn  chorus.wav"]), "start_s": pa.array([0.0]),
           "end_s": pa.array([1.0]), "class": pa.array(["amerob"]),
           "confidence": pa.array([0.9]), "class_index": pa.array([0]),
           "padded_s": pa.array([0.0])}
    path, listed = raven.write_combined(det, tmp_path / "t.txt",
                                         {"/x/dawn  chorus.wav": 16000.0},
                                         {"/x/dawn  chorus.wav": 3.0, "/x/dawn chorus.wav": 2.0})
    assert [r["Begin Path"] for r in read_table(path)] == ["/x/dawn  chorus.wav"]
    assert "/x/dawn  chorus.wav" in listed.read_text().splitlines()
    for bad in ("/x/a\tb.wav", "/x/a\nb.wav"):
        try:
            raven.check_paths(["/x/ok.wav", bad])
        except ValueError as e:
            assert "expected recording paths without tabs or line breaks" in str(e)
        else:
            raise AssertionError(f"{bad!r} accepted")
