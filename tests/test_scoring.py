"""Issue 48: a trained model scored the way the field does. Item 2: `predict` (and `embed`) over
a table whose rows are windows (a `from_annotations` split, BirdSet's event-level `test`:
`start_time` / `end_time` columns) gives one window per row, the row's; a table whose windows
cannot be honoured is an error, never a silent whole-file pass."""

import numpy as np
import pyarrow.csv
import pytest
import soundfile
from test_models_cli import corpus, run_dir  # noqa: F401 (shared module fixtures)

import birdjepa.data.table as table
import birdjepa.models.detect as detect
import birdjepa.models.embed_cli as embed_cli
import birdjepa.sources

SR = 16000
HEADER = "Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\tSpecies"


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    """Two soundscapes (12 s and 7 s) with Raven tables of 4 events, as a `from_annotations`
    split of events and one of 5 s windows."""
    root = tmp_path_factory.mktemp("annotated")
    rng = np.random.default_rng(0)
    for name, seconds, events in (("siteA", 12.0, [(1.0, 2.0, "amerob"), (4.8, 6.0, "norcar"),
                                                   (10.5, 12.0, "norcar")]),
                                  ("siteB", 7.0, [(2.0, 3.5, "blujay")])):
        soundfile.write(root / f"{name}.wav", 0.1 * rng.standard_normal(int(seconds * SR)), SR)
        (root / f"{name}.selections.txt").write_text("\n".join(
            [HEADER] + [f"{i}\tSpectrogram 1\t1\t{a}\t{b}\t{c}"
                        for i, (a, b, c) in enumerate(events, 1)]) + "\n")
    for kind, extra in (("events", []), ("windows", ["--window_s", "5"])):
        assert birdjepa.sources.main(["from_annotations", str(root), "--out_dir",
                                      str(root / kind), *extra]) == 0
    return root


def _split(path) -> list[tuple[str, float, float]]:
    t = table.read(path, ["filepath", "start_time", "end_time"])
    return list(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


@pytest.mark.parametrize("kind", ["events", "windows"])
def test_predict_over_a_split_of_windows_gives_exactly_its_windows(run_dir, annotated,  # noqa: F811
                                                                  tmp_path, kind):
    want = _split(annotated / kind)
    out = tmp_path / "d.csv"
    assert detect.main([str(run_dir), str(annotated / kind), "--out", str(out), "--top_k", "1",
                        "--min_conf", "0", "--quiet"]) == 0
    got = pyarrow.csv.read_csv(out).to_pylist()
    assert [(r["filepath"], r["start_s"], r["end_s"]) for r in got] == want
    assert [r["row"] for r in got] == list(range(len(want)))
    for r in got:  # the model's 5 s clip: a shorter row's input is padded, and says so
        assert r["padded_s"] == pytest.approx(5.0 - (r["end_s"] - r["start_s"]), abs=1e-6)
    emb = tmp_path / "e.parquet"
    assert embed_cli.main([str(run_dir), str(annotated / kind), "--out", str(emb),
                           "--quiet"]) == 0
    t = pyarrow.parquet.read_table(emb)
    assert list(zip(t.column("start_s").to_pylist(), t.column("end_s").to_pylist(),
                    strict=True)) == [(a, b) for _f, a, b in want]


def test_a_table_of_windows_refuses_what_would_ignore_them(run_dir, annotated, tmp_path,  # noqa: F811
                                                           capsys):
    src = str(annotated / "windows")
    for extra, word in ((["--centre"], "--centre"), (["--hop_s", "1"], "--hop_s"),
                        (["--window_s", "2"], "--window_s")):
        assert detect.main([str(run_dir), src, "--out", str(tmp_path / "d.csv"), *extra]) == 2
        err = capsys.readouterr().err
        assert f"{word}: SOURCE's rows are windows" in err and "--windows recordings" in err, err
    # asked for, whole recordings are a choice: every window of each row's recording
    assert detect.main([str(run_dir), src, "--out", str(tmp_path / "all.csv"), "--windows",
                        "recordings", "--min_conf", "0", "--top_k", "1", "--quiet"]) == 0
    assert len(pyarrow.csv.read_csv(tmp_path / "all.csv")) > len(_split(src))
    # rows asked for where there are none
    assert detect.main([str(run_dir), str(annotated / "siteA.wav"), "--out",
                        str(tmp_path / "f.csv"), "--windows", "rows"]) == 2
    assert "--windows rows: expected a table SOURCE with columns start_time and end_time" in \
        capsys.readouterr().err


def test_a_row_longer_than_the_models_clip_is_refused_naming_it(run_dir, annotated, tmp_path,  # noqa: F811
                                                                capsys):
    import datasets
    ds = datasets.load_from_disk(str(annotated / "events"))
    longer = ds.map(lambda r, i: {"end_time": r["start_time"] + (6.0 if i == 2 else 1.0)},
                    with_indices=True)
    longer.save_to_disk(str(tmp_path / "long"))
    assert detect.main([str(run_dir), str(tmp_path / "long"), "--out",
                        str(tmp_path / "d.csv")]) == 2
    err = capsys.readouterr().err
    assert "row 2" in err and "6 s" in err and "the model's clip, 5 s" in err, err
