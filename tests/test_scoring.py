"""Issue 48: a trained model scored the way the field does. Item 2: `predict` (and `embed`) over
a table whose rows are windows (a `from_annotations` split, BirdSet's event-level `test`:
`start_time` / `end_time` columns) gives one window per row, the row's; a table whose windows
cannot be honoured is an error, never a silent whole-file pass."""

import numpy as np
import pyarrow.csv
import pytest
import soundfile
from test_models_cli import corpus, run_dir  # noqa: F401 (shared module fixtures)

import birdjepa.config.identity
import birdjepa.data
import birdjepa.data.table as table
import birdjepa.embed
import birdjepa.models.detect as detect
import birdjepa.predict
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
    assert birdjepa.predict.main([str(run_dir), str(annotated / kind), "--out", str(out), "--top_k", "1",
                        "--min_conf", "0", "--quiet"]) == 0
    got = pyarrow.csv.read_csv(out).to_pylist()
    assert [(r["filepath"], r["start_s"], r["end_s"]) for r in got] == want
    assert [r["row"] for r in got] == list(range(len(want)))
    for r in got:  # the model's 5 s clip: a shorter row's input is padded, and says so
        assert r["padded_s"] == pytest.approx(5.0 - (r["end_s"] - r["start_s"]), abs=1e-6)
    emb = tmp_path / "e.parquet"
    assert birdjepa.embed.main([str(run_dir), str(annotated / kind), "--out", str(emb),
                           "--quiet"]) == 0
    t = pyarrow.parquet.read_table(emb)
    assert list(zip(t.column("start_s").to_pylist(), t.column("end_s").to_pylist(),
                    strict=True)) == [(a, b) for _f, a, b in want]


def test_a_table_of_windows_refuses_what_would_ignore_them(run_dir, annotated, tmp_path,  # noqa: F811
                                                           capsys):
    src = str(annotated / "windows")
    for extra, word in ((["--centre"], "--centre"), (["--hop_s", "1"], "--hop_s"),
                        (["--window_s", "2"], "--window_s")):
        assert birdjepa.predict.main([str(run_dir), src, "--out", str(tmp_path / "d.csv"), *extra]) == 2
        err = capsys.readouterr().err
        assert f"{word}: SOURCE's rows are windows" in err and "--windows recordings" in err, err
    # asked for, whole recordings are a choice: every window of each row's recording
    assert birdjepa.predict.main([str(run_dir), src, "--out", str(tmp_path / "all.csv"), "--windows",
                        "recordings", "--min_conf", "0", "--top_k", "1", "--quiet"]) == 0
    assert len(pyarrow.csv.read_csv(tmp_path / "all.csv")) > len(_split(src))
    # rows asked for where there are none
    assert birdjepa.predict.main([str(run_dir), str(annotated / "siteA.wav"), "--out",
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
    assert birdjepa.predict.main([str(run_dir), str(tmp_path / "long"), "--out",
                        str(tmp_path / "d.csv")]) == 2
    err = capsys.readouterr().err
    assert "row 2" in err and "6 s" in err and "the model's clip, 5 s" in err, err


# -- item 1: a model's own head scored on a labelled split -------------------------------------


@pytest.fixture(scope="module")
def birdset_head(tmp_path_factory):
    """The BirdSet-shaped demo cache and a run directory of a tiny supervised model whose head
    has the training split's class names (random weights: the scores only need to vary)."""
    import dataclasses

    import tiny

    import birdjepa.demo_data.birdset as birdset

    root = tmp_path_factory.mktemp("birdset-head")
    s = birdset.write(root / "cache", n_recordings=12, n_soundscapes=2, n_segments=6, max_s=6.0)
    names = table.class_names(s["train"], "ebird_code")
    run = root / "run"
    base = tiny.tiny_config("supervised", n_steps=2, run_dir=str(run), n_classes=len(names))
    cfg = tiny.finalize(dataclasses.replace(base, data=dataclasses.replace(
        base.data, train_shards=s["train"], eval_shards=s["train"], label_column="ebird_code")))
    tiny.untrained_run(cfg, seed=3)
    return {**s, "run": run, "names": names}


def _scores_from_predict(csv, n_rows: int, classes) -> np.ndarray:
    """predict's table (every class of every row) pivoted to (rows, classes) by class name."""
    out = np.full((n_rows, len(classes)), np.nan)
    at = {c: j for j, c in enumerate(classes)}
    for r in pyarrow.csv.read_csv(csv).to_pylist():
        if str(r["class"]) in at:
            out[r["row"], at[str(r["class"])]] = r["confidence"]
    return out


def test_a_heads_cmap_equals_the_metric_of_predicts_own_table(birdset_head, tmp_path):
    import birdjepa.evaluate
    import birdjepa.evaluate.eval_config as eval_config
    import birdjepa.evaluate.metrics as metrics

    b = birdset_head
    got = birdjepa.evaluate.run(eval_config.EvalConfig(
        heads=(str(b["run"]),), test_shards=b["test_5s"], test_name="demo", n_boot=100,
        out_dir=str(tmp_path / "eval")), verbose=False)
    rows = {r["metric"]: r for r in got["rows"]}
    assert set(rows) == set(metrics.METRICS + metrics.THRESHOLD_METRICS)
    assert all(r["probe"] == "head" and r["k"] == "all" for r in rows.values())
    classes = table.class_names(b["test_5s"], "ebird_code_multilabel")
    y = table.multi_hot(table.read(b["test_5s"], ["ebird_code_multilabel"]),
                        "ebird_code_multilabel", len(classes))
    assert birdjepa.predict.main([str(b["run"]), b["test_5s"], "--out", str(tmp_path / "d.csv"),
                        "--top_k", str(len(b["names"])), "--min_conf", "0", "--quiet"]) == 0
    scores = _scores_from_predict(tmp_path / "d.csv", len(y), classes)
    assert np.isfinite(scores).all()
    assert rows["cmap"]["value"] == pytest.approx(metrics.cmap(scores, y), abs=1e-6)
    assert rows["top1"]["value"] == pytest.approx(metrics.top1(scores, y), abs=1e-6)
    # a softmax head decides by its top class: precision and recall of that decision
    top = scores.argmax(1)
    tp = np.array([(y[top == c, c]).sum() for c in range(len(classes))])
    det = np.bincount(top, minlength=len(classes))
    pos = y.sum(0)
    has = pos > 0
    assert rows["recall"]["value"] == pytest.approx((tp[has] / pos[has]).mean(), abs=1e-6)
    prec = np.where(det > 0, tp / np.maximum(det, 1), 0.0)
    assert rows["precision"]["value"] == pytest.approx(prec[has].mean(), abs=1e-6)
    assert rows["cmap"]["lo"] <= rows["cmap"]["value"] <= rows["cmap"]["hi"]
    per = pyarrow.csv.read_csv(tmp_path / "eval" / "per_class.csv").to_pylist()
    assert [r["class"] for r in per] == list(classes)
    assert (tmp_path / "eval" / "results.md").read_text().count("head") >= 1


def test_classes_missing_on_either_side_are_reported_and_the_rest_scored(birdset_head,
                                                                        tmp_path):
    """The split names a class the model lacks and lacks one the model has: both named; the
    metrics are over the shared classes."""
    import datasets

    import birdjepa.evaluate
    import birdjepa.evaluate.eval_config as eval_config

    b = birdset_head
    src = table.read(b["test_5s"], table.column_names(b["test_5s"]))
    classes = table.class_names(b["test_5s"], "ebird_code_multilabel")
    renamed = [*classes[:-1], "notinmodel"]  # the model's last class is not in the split
    feats = datasets.Features.from_arrow_schema(src.schema)
    feats["ebird_code_multilabel"] = datasets.Sequence(datasets.ClassLabel(names=renamed))
    datasets.Dataset(src.cast(feats.arrow_schema).replace_schema_metadata(None),
                     ).cast(feats).save_to_disk(str(tmp_path / "renamed"))
    with pytest.warns(RuntimeWarning) as caught:
        got = birdjepa.evaluate.run(eval_config.EvalConfig(
            heads=(str(b["run"]),), test_shards=str(tmp_path / "renamed"), test_name="r",
            n_boot=100, out_dir=str(tmp_path / "eval")), verbose=False)
    said = " ".join(str(w.message) for w in caught)
    assert "1 class(es) of the split the model lacks (not scored): notinmodel" in said, said
    assert f"1 class(es) of the model the split lacks (ignored): {classes[-1]}" in said, said
    rep = got["heads"]["r/run"]
    assert rep["classes_missing"] == ["notinmodel"] and rep["classes_extra"] == [classes[-1]]
    assert rep["classes_scored"] == len(classes) - 1
    cmap = next(r for r in got["rows"] if r["metric"] == "cmap")
    assert cmap["n_classes"] == len(classes) - 1


def test_predicts_default_min_conf_is_the_heads_own(birdset_head, tmp_path):
    """Item 3: the default --min_conf (0.1) was not the documented no-call threshold (0.5) of
    a sigmoid head: 16 of 18 bird-free windows got a detection. Sigmoid: 0.5; softmax: 0.1."""
    b = birdset_head
    common = [str(b["run"]), b["test_5s"], "--top_k", str(len(b["names"])), "--quiet"]
    for extra, floor in (([], detect.SOFTMAX_MIN_CONF),
                         (["--activation", "sigmoid"], detect.NO_CALL_THRESHOLD)):
        out = tmp_path / f"d{len(extra)}.csv"
        assert birdjepa.predict.main([*common, *extra, "--out", str(out)]) == 0
        conf = np.asarray(pyarrow.csv.read_csv(out).column("confidence"))
        every = tmp_path / f"all{len(extra)}.csv"
        assert birdjepa.predict.main([*common, *extra, "--min_conf", "0", "--out", str(every)]) == 0
        allc = np.asarray(pyarrow.csv.read_csv(every).column("confidence"))
        assert len(conf) == int((allc >= floor).sum()) and (conf >= floor).all()
        assert (allc < floor).any()  # the floor dropped something: it is really applied


# -- item 5: species lists; item 6: clips for review -------------------------------------------


def test_a_species_list_keeps_its_classes_and_names_an_unknown_one(birdset_head, tmp_path,
                                                                    capsys):
    b = birdset_head
    keep = b["names"][1:3]
    lst = tmp_path / "species.txt"
    lst.write_text("# my site\n" + "\n".join(keep) + "\n\n")
    common = [str(b["run"]), b["test_5s"], "--min_conf", "0", "--top_k", "2", "--quiet"]
    assert birdjepa.predict.main([*common, "--classes", str(lst), "--out", str(tmp_path / "d.csv")]) == 0
    got = pyarrow.csv.read_csv(tmp_path / "d.csv").to_pylist()
    n_rows = len(table.read(b["test_5s"], ["ebird_code_multilabel"]))
    assert {r["class"] for r in got} == set(keep) and len(got) == 2 * n_rows  # top 2 of the 2
    lst.write_text(f"{keep[0]}\nnotabird\n")
    assert birdjepa.predict.main([*common, "--classes", str(lst), "--out", str(tmp_path / "e.csv")]) == 2
    err = capsys.readouterr().err
    assert "--classes" in err and "'notabird'" in err and str(lst) in err, err
    assert not (tmp_path / "e.csv").exists()


def test_segments_cut_each_detection_for_review_at_the_recordings_own_rate(birdset_head,
                                                                            tmp_path):
    """BirdNET's `segments`: <class>/<confidence>_<file>_<start>.wav, the recording's own rate
    and samples over the detection's time."""
    b = birdset_head
    rng = np.random.default_rng(0)
    audio = tmp_path / "audio"
    audio.mkdir()
    x = (0.2 * rng.standard_normal(3 * 22050)).astype(np.float32)
    soundfile.write(audio / "dawn.wav", x, 22050, subtype="FLOAT")
    seg = tmp_path / "seg"
    assert birdjepa.predict.main([str(b["run"]), str(audio), "--out", str(tmp_path / "d.csv"),
                        "--window_s", "1", "--top_k", "1", "--min_conf", "0", "--quiet",
                        "--segments", str(seg)]) == 0
    rows = pyarrow.csv.read_csv(tmp_path / "d.csv").to_pylist()
    clips = sorted(seg.rglob("*.wav"))
    assert len(clips) == len(rows) == 3
    for r in rows:
        name = f"{r['confidence']:.3f}_dawn_{r['start_s']:.1f}s.wav"
        path = seg / str(r["class"]) / name
        assert path.is_file(), (path, clips)
        y, sr = soundfile.read(path, dtype="float32")
        assert sr == 22050
        a = int(round(r["start_s"] * sr))
        np.testing.assert_array_equal(y, x[a : a + len(y)])
        assert len(y) == int(round((r["end_s"] - r["start_s"]) * sr))


# -- item 3: per-class thresholds, calibrated, saved with the model, used by predict ---------


def test_thresholds_reach_their_target_are_saved_exported_and_used_by_predict(
        birdset_head, tmp_path_factory, tmp_path):
    import shutil

    import birdjepa.evaluate
    import birdjepa.evaluate.eval_config as eval_config
    import birdjepa.models
    import birdjepa.models.thresholds as thresholds

    b = birdset_head
    run = tmp_path_factory.mktemp("calibrated") / "run"
    shutil.copytree(b["run"], run)
    got = birdjepa.evaluate.run(eval_config.EvalConfig(
        heads=(str(run),), test_shards=b["test_5s"], test_name="val", n_boot=100,
        calibrate="precision=0.6", out_dir=str(tmp_path / "eval")), verbose=False)
    saved = thresholds.load(run / thresholds.FILE)
    assert saved["rule"] == "precision=0.6" and saved["classes"] == list(b["names"])
    assert (tmp_path / "eval" / thresholds.FILE).is_file()
    classes = table.class_names(b["test_5s"], "ebird_code_multilabel")
    y = table.multi_hot(table.read(b["test_5s"], ["ebird_code_multilabel"]),
                        "ebird_code_multilabel", len(classes))
    assert got["heads"]["val/run"]["decision"] == "per-class thresholds"
    assert birdjepa.predict.main([str(run), b["test_5s"], "--top_k", str(len(b["names"])), "--min_conf",
                        "0", "--quiet", "--out", str(tmp_path / "all.csv")]) == 0
    # predict writes float32 confidences: read back at float32 they are the values it compared
    probs = _scores_from_predict(tmp_path / "all.csv", len(y), saved["classes"]).astype(
        np.float32)
    calibrated = [c for c in saved["classes"] if c not in saved["fallback"]]
    assert calibrated, saved
    for c in calibrated:  # the target precision holds on the split they were fit on
        j, k = saved["classes"].index(c), classes.index(c)
        det = probs[:, j] >= np.float32(saved["thresholds"][j])
        assert det.any() and y[det, k].mean() >= 0.6 - 1e-9, (c, saved["thresholds"][j])
    for c in saved["fallback"]:
        assert saved["thresholds"][saved["classes"].index(c)] == thresholds.DEFAULT
    # read back from the run and from its export
    m = birdjepa.models.open_model(run)
    np.testing.assert_array_equal(m.thresholds, saved["thresholds"])
    (run / "COMPLETE").exists() or pytest.fail("the fixture's run is complete")
    exp = tmp_path / "export"
    birdjepa.models.artifact.export(run, exp)
    e = birdjepa.models.open_model(exp)
    np.testing.assert_array_equal(e.thresholds, saved["thresholds"])
    assert "precision=0.6" in (exp / "README.md").read_text()
    # predict: auto (the model's), a number, a file
    common = [str(exp), b["test_5s"], "--top_k", str(len(b["names"])), "--quiet"]
    assert birdjepa.predict.main([*common, "--out", str(tmp_path / "auto.csv")]) == 0
    rows = pyarrow.csv.read_csv(tmp_path / "auto.csv").to_pylist()
    thr = dict(zip(saved["classes"], np.float32(saved["thresholds"]), strict=True))
    want = {(i, c) for i in range(len(probs)) for j, c in enumerate(saved["classes"])
            if probs[i, j] >= thr[c]}
    assert {(r["row"], str(r["class"])) for r in rows} == want
    assert birdjepa.predict.main([*common, "--thresholds", "0.9", "--out", str(tmp_path / "n.csv")]) == 0
    conf = np.asarray(pyarrow.csv.read_csv(tmp_path / "n.csv").column("confidence")) \
        if (tmp_path / "n.csv").stat().st_size > 0 else np.zeros(0)
    assert (conf >= 0.9).all()
    assert birdjepa.predict.main([*common, "--thresholds", str(run / thresholds.FILE), "--out",
                        str(tmp_path / "f.csv")]) == 0
    assert (tmp_path / "f.csv").read_text() == (tmp_path / "auto.csv").read_text()


def test_calibration_rules_by_hand():
    import birdjepa.models.thresholds as thresholds

    s = np.array([[0.9, 0.2], [0.8, 0.1], [0.7, 0.3], [0.6, 0.4], [0.1, 0.05]])
    y = np.array([[1, 0], [0, 0], [1, 0], [1, 0], [0, 0]], bool)
    thr, fallback = thresholds.calibrate(s, y, "precision=0.75")
    # class 0 ranked: P N P P N; at 0.6 precision 3/4 = 0.75 (recall 1): the lowest that holds
    assert thr[0] == pytest.approx(0.6) and fallback == [1]  # class 1: no positive
    assert thr[1] == thresholds.DEFAULT
    thr, _ = thresholds.calibrate(s, y, "f1")  # best F1: 0.6 (6/7) over 0.1 (3/4), 0.7 (2/3)
    assert thr[0] == pytest.approx(0.6)
    with pytest.raises(ValueError, match="expected 'f1' or 'precision=P'"):
        thresholds.calibrate(s, y, "recall=2")


# -- item 4: negatives and multilabel from files ------------------------------------------------


def _folders(root, spec: dict[str, int]):
    rng = np.random.default_rng(0)
    for folder, n in spec.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            soundfile.write(root / folder / f"r{i}.wav",
                            (0.1 * rng.standard_normal(8000)).astype(np.float32), 16000)


def test_from_files_writes_labels_with_negatives_as_empty_lists(tmp_path, capsys):
    import datasets

    _folders(tmp_path / "birds", {"amerob": 2, "norcar": 1})
    _folders(tmp_path / "site_noise", {"night": 2})
    assert birdjepa.sources.main(["from_files", str(tmp_path / "birds"), "--label_from",
                                  "parent", "--negatives", str(tmp_path / "site_noise"),
                                  "--out_dir", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "2 negatives" in out, out
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert ds.features["labels"].feature.names == ["amerob", "norcar"]
    assert "label" not in ds.column_names  # not one class a row: only the list column
    got = {f.split("/")[-2] + "/" + f.split("/")[-1]: y for f, y in zip(ds["file"],
                                                                          ds["labels"],
                                                                          strict=True)}
    assert got == {"amerob/r0.wav": [0], "amerob/r1.wav": [0], "norcar/r0.wav": [1],
                   "night/r0.wav": [], "night/r1.wav": []}
    # without negatives both columns: one class a row
    assert birdjepa.sources.main(["from_files", str(tmp_path / "birds"), "--label_from",
                                  "parent", "--out_dir", str(tmp_path / "ds1")]) == 0
    ds1 = datasets.load_from_disk(str(tmp_path / "ds1"))
    assert ds1["labels"] == [[y] for y in ds1["label"]]


def test_from_files_reads_multilabel_rows_from_a_csv(tmp_path, capsys):
    import datasets

    _folders(tmp_path / "a", {"x": 3})
    (tmp_path / "labels.csv").write_text("file,labels\na/x/r0.wav,amerob;norcar\n"
                                         "a/x/r1.wav,norcar\na/x/r2.wav,\n")
    assert birdjepa.sources.main(["from_files", str(tmp_path / "a"), "--label_from",
                                  str(tmp_path / "labels.csv"), "--out_dir",
                                  str(tmp_path / "ds")]) == 0
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    names = ds.features["labels"].feature.names
    assert names == ["amerob", "norcar"]
    assert [[names[i] for i in y] for y in ds["labels"]] == [["amerob", "norcar"], ["norcar"],
                                                              []]
    (tmp_path / "labels.csv").write_text("file,labels\na/x/r0.wav,amerob\n")  # r1, r2 unlisted
    assert birdjepa.sources.main(["from_files", str(tmp_path / "a"), "--label_from",
                                  str(tmp_path / "labels.csv"), "--out_dir",
                                  str(tmp_path / "ds2")]) == 2
    err = capsys.readouterr().err
    assert "2 of 3 audio files" in err and "r1.wav" in err, err


def test_a_relative_dataset_survives_save_to_disk_from_another_directory(tmp_path,
                                                                          monkeypatch):
    """`datasets` resolves an Audio path against the current directory when save_to_disk
    embeds it: a relative dataset failed ("No such file or directory: '../amerob/a.wav'")."""
    import datasets

    _folders(tmp_path / "audio", {"amerob": 1, "norcar": 1})
    assert birdjepa.sources.main(["from_files", str(tmp_path / "audio"), "--label_from",
                                  "parent", "--relative", "--out_dir",
                                  str(tmp_path / "audio" / "ds")]) == 0
    monkeypatch.chdir("/")
    ds = datasets.load_from_disk(str(tmp_path / "audio" / "ds"))
    ds.save_to_disk(str(tmp_path / "copy"))
    copy = datasets.load_from_disk(str(tmp_path / "copy"))
    assert copy["file"] == ds["file"] == ["../amerob/r0.wav", "../norcar/r0.wav"]
    # and the loader still reads the original, its paths against the shard's directory
    with birdjepa.data.Loader(str(tmp_path / "audio" / "ds"), mode="eval", batch_size=2,
                              label_column="label", n_workers=1) as loader:
        b = next(iter(loader))
    assert b["valid"].all()


# -- item 7: the augmentations for the supervised objective -----------------------------------


@pytest.mark.heavy
def test_supervised_training_takes_the_same_augmentations():
    """Gain, tilt, low-pass, mixing and time/frequency masks were available only under
    objective.lejepa.augment; the supervised objective takes the same AugmentConfig, applied
    to its training views (never to evaluation), with the same code."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    import birdjepa.config.losses as losses
    import birdjepa.model
    import birdjepa.objectives.augment as augment
    import birdjepa.objectives.supervised as supervised

    aug = losses.AugmentConfig(gain=0.3, tilt=0.5, lowpass_p=1.0, mix=0.4, time_mask=0.25,
                               freq_mask=0.2)
    cfg = losses.SupervisedConfig(augment=aug)
    mcfg = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(
        width=32, depth=1, n_heads=2, patch=(8, 8)))
    enc = birdjepa.model.ViT(mcfg, n_frames=32, n_mels=32, key=jax.random.key(0))
    heads = supervised.init_heads(cfg, enc, 3, key=jax.random.key(1))
    x = jax.random.normal(jax.random.key(2), (4, 32, 32)) * 0.3
    batch = {"data": x, "target": jnp.array([0, 1, 2, 1]), "valid": jnp.ones(4, bool)}
    key = jax.random.key(7)
    got = supervised.loss(cfg, enc, heads, batch, key=key)[0]
    plain = dataclasses.replace(cfg, augment=losses.AugmentConfig())
    by_hand = augment.augment_views(aug, x[None], key=jax.random.fold_in(key, 1))[0]
    want = supervised.loss(plain, enc, heads, {**batch, "data": by_hand}, key=key)[0]
    assert float(got) == pytest.approx(float(want), abs=1e-6)
    assert float(got) != pytest.approx(float(supervised.loss(plain, enc, heads, batch,
                                                             key=key)[0]), abs=1e-4)


def test_time_and_frequency_masks_are_one_run_each_at_the_clip_mean():
    import jax
    import jax.numpy as jnp

    import birdjepa.config.losses as losses
    import birdjepa.objectives.augment as augment

    x = jax.random.normal(jax.random.key(0), (16, 40, 30)) + 8.0  # far above the floor
    for cfg, axis, n in ((losses.AugmentConfig(time_mask=0.25), 1, 40),
                         (losses.AugmentConfig(freq_mask=0.2), 2, 30)):
        y = np.asarray(augment.augment(cfg, x, key=jax.random.key(1)))
        mean = np.asarray(x).mean((1, 2))
        widths = []
        for i in range(len(x)):
            changed = np.any(y[i] != np.asarray(x[i]), axis=2 - axis)  # per frame or bin
            at = np.flatnonzero(changed)
            widths.append(len(at))
            if len(at):
                assert at[-1] - at[0] + 1 == len(at)  # one contiguous run
                run = y[i][at] if axis == 1 else y[i][:, at]
                np.testing.assert_allclose(run, mean[i], rtol=1e-6)
        assert max(widths) <= int(getattr(cfg, "time_mask" if axis == 1 else "freq_mask") * n)
        assert max(widths) > 0
    assert not losses.AugmentConfig(time_mask=0.0).enabled
    assert losses.AugmentConfig(freq_mask=0.1).enabled
    assert jnp.array_equal(augment.augment(losses.AugmentConfig(), x, key=jax.random.key(1)), x)


def test_a_config_without_augmentation_keeps_its_run_id():
    """The new keys (supervised.augment.*, the masks) are left out of the hash at their
    defaults: a run saved before them resumes under the same id."""
    import dataclasses

    import tiny

    import birdjepa.config

    cfg = tiny.tiny_config("supervised")
    new = dataclasses.asdict(cfg)
    old = dataclasses.asdict(cfg)
    del old["objective"]["supervised"]["augment"]
    for key in ("time_mask", "freq_mask"):
        del old["objective"]["lejepa"]["augment"][key]
    assert birdjepa.config.identity.config_hash(old) == birdjepa.config.identity.config_hash(new)
    changed = dataclasses.replace(cfg, objective=dataclasses.replace(
        cfg.objective, supervised=dataclasses.replace(
            cfg.objective.supervised, augment=dataclasses.replace(
                cfg.objective.supervised.augment, gain=0.1))))
    assert birdjepa.config.identity.config_hash(dataclasses.asdict(changed)) != \
        birdjepa.config.identity.config_hash(new)


def test_evaluate_refuses_centre_windows_on_a_split_of_windows(run_dir, annotated, tmp_path):  # noqa: F811
    """The same fault as item 2 in evaluate: a from_annotations split read with the default
    segment = "centre" scored the centre of each whole soundscape against each window's labels,
    silently. It is a ConfigError naming the key and the first row; "columns" is right."""
    import birdjepa.config
    import birdjepa.evaluate
    import birdjepa.evaluate.eval_config as eval_config

    common = dict(heads=(str(run_dir),), test_shards=str(annotated / "windows"),
                  test_label_column="ebird_code_multilabel", n_boot=100)
    with pytest.raises(birdjepa.config.ConfigError,
                       match=r"config key 'segment': expected \"columns\" .* got \"centre\" "
                             r"\(row 0: \[0, 5\] s of a 12 s recording\)"):
        birdjepa.evaluate.run(eval_config.EvalConfig(**common, out_dir=str(tmp_path / "a")),
                              verbose=False)
    assert not (tmp_path / "a").exists()


def test_calibration_never_replaces_a_users_thresholds_file(birdset_head, tmp_path):
    """A thresholds.json evaluate did not write (in out_dir) is refused before anything runs;
    the model's directory gets none either."""
    import birdjepa.config
    import birdjepa.evaluate
    import birdjepa.evaluate.eval_config as eval_config

    b = birdset_head
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "thresholds.json").write_text('{"mine": 1}')
    with pytest.raises(birdjepa.config.ConfigError, match="holding thresholds.json that "
                       "evaluate did not write"):
        birdjepa.evaluate.run(eval_config.EvalConfig(
            heads=(str(b["run"]),), test_shards=b["test_5s"], n_boot=100, calibrate="f1",
            out_dir=str(tmp_path / "eval")), verbose=False)
    assert (tmp_path / "eval" / "thresholds.json").read_text() == '{"mine": 1}'
    assert not (b["run"] / "thresholds.json").exists()
