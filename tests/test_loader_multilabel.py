"""Multilabel data: a list<int> label column (HF `Sequence(ClassLabel)`, BirdSet's
`ebird_code_multilabel`) gives multi-hot float targets; int columns keep class ids."""

import dataclasses
import json

import datasets
import numpy as np
import pyarrow as pa
import pytest
import tiny

import birdjepa
import birdjepa.data
import birdjepa.data.table as table
import birdjepa.demo_data
import birdjepa.objectives.terms
import birdjepa.train.loop

NAMES = ["amerob", "blujay", "carwre", "norcar", "tuftit"]
# Row i's classes: several, none (an empty list), a null list, -1 ("no label") and repeats.
CLASSES = [[0, 2], [], None, [4], [1, 3, 4], [-1], [2, 2], [0]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, demo_corpus):
    tmp = tmp_path_factory.mktemp("ml")
    rec = demo_corpus(n_recordings=len(CLASSES), n_shards=1, min_s=5.0, max_s=6.0, seed=3)
    audio = table.audio_bytes(table.read(rec["out_dir"], ["audio"]))
    feats = datasets.Features({
        "audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
        "ebird_code_multilabel": datasets.Sequence(datasets.ClassLabel(names=NAMES)),
        "ebird_code": datasets.ClassLabel(names=NAMES),
    })
    ds = datasets.Dataset.from_dict(
        {"audio": [{"bytes": b, "path": f"{i}.ogg"} for i, b in enumerate(audio)],
         "ebird_code_multilabel": CLASSES,
         "ebird_code": [i % len(NAMES) for i in range(len(CLASSES))]}, features=feats)
    ds.save_to_disk(str(tmp / "ds"), num_shards=2)
    return tmp / "ds"


def _want(n_classes: int) -> np.ndarray:
    """Multi-hot rows; a null list, and a list of -1 only, is a row of -1 (unlabelled: -1
    means "no label" in a list as in an int column, issue 47 item 12: `[-1]` trained as "no
    bird"), an empty list a row of 0 (no species)."""
    y = np.zeros((len(CLASSES), n_classes), np.float32)
    for i, c in enumerate(CLASSES):
        if c is None or (c and all(k == -1 for k in c)):
            y[i] = -1.0
        for k in c or []:
            if k >= 0:
                y[i, k] = 1.0
    return y


def _eval_targets(source, **kw) -> tuple[np.ndarray, birdjepa.data.Loader]:
    loader = birdjepa.data.Loader(source, mode="eval", batch_size=3, n_workers=2,
                                  label_column="ebird_code_multilabel", **kw)
    rows = {}
    with loader:
        for b in loader:
            assert b["target"].dtype == np.float32 and b["target"].ndim == 2
            for i, t, v in zip(b["index"], b["target"], b["valid"], strict=True):
                if i >= 0:
                    assert v
                    rows[int(i)] = t
                else:
                    assert not t.any(), "padding rows carry no labels"
    return np.stack([rows[i] for i in range(len(CLASSES))]), loader


def test_sequence_classlabel_column_gives_multi_hot_targets(corpus):
    for source in (corpus, datasets.load_from_disk(str(corpus))):
        y, loader = _eval_targets(source)
        np.testing.assert_array_equal(y, _want(len(NAMES)))
        assert loader.multilabel and loader.class_names == NAMES
        assert loader.n_classes == len(NAMES), "n_classes from the ClassLabel names"
    # The names are the truth: an explicit n_classes that disagrees is a one-line error.
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument n_classes: expected 5 "
                       r"\(the ClassLabel names of column 'ebird_code_multilabel'\), got 7;"):
        _eval_targets(corpus, n_classes=7)


def test_train_mode_targets_follow_the_rows_and_resume(corpus):
    kw = dict(batch_size=4, n_workers=2, label_column="ebird_code_multilabel", seed=5)
    want = _want(len(NAMES))
    with birdjepa.data.Loader(corpus, **kw) as loader:
        it = iter(loader)
        first = [next(it) for _ in range(3)]
        state = loader.state_dict()
        after = next(it)
    for b in first:
        np.testing.assert_array_equal(b["target"], want[b["index"]])
    with birdjepa.data.Loader(corpus, state=state, **kw) as resumed:
        again = next(iter(resumed))
    np.testing.assert_array_equal(again["index"], after["index"])
    np.testing.assert_array_equal(again["target"], after["target"])


def test_int_classlabel_column_keeps_class_ids(corpus):
    with birdjepa.data.Loader(corpus, mode="eval", batch_size=8, n_workers=1,
                              label_column="ebird_code") as loader:
        b = next(iter(loader))
    assert not loader.multilabel and loader.class_names == NAMES
    assert b["target"].dtype == np.int64 and b["target"].shape == (8,)
    np.testing.assert_array_equal(b["target"], np.arange(8) % len(NAMES))


def test_labels_outside_n_classes_or_without_a_width_name_file_row_and_column(tmp_path, corpus):
    # Plain Arrow shards without HF metadata: no names, so n_classes must be given.
    tbl = table.read(corpus, ["audio", "ebird_code_multilabel"])
    plain = pa.table({"audio": tbl.column("audio"),
                      "labels": tbl.column("ebird_code_multilabel").cast(pa.list_(pa.int64()))})
    (tmp_path / "plain").mkdir()
    with pa.OSFile(str(tmp_path / "plain" / "a.arrow"), "wb") as f:
        with pa.ipc.new_stream(f, plain.schema) as w:
            w.write_table(plain)
    with pytest.raises(birdjepa.BadArgumentError,
                       match=r"n_classes: expected the number of classes .*'labels' is a list"):
        birdjepa.data.Loader(tmp_path / "plain", mode="eval", batch_size=4, label_column="labels")
    y, _ = _eval_targets_plain(tmp_path / "plain")
    np.testing.assert_array_equal(y, _want(5))
    with pytest.raises(birdjepa.DatasetError, match=r"row \d+, column "
                       r"'labels': expected class ids in \[0, n_classes=3\)"):
        birdjepa.data.Loader(tmp_path / "plain", mode="eval", batch_size=4,
                             label_column="labels", n_classes=3)


def _eval_targets_plain(path):
    with birdjepa.data.Loader(path, mode="eval", batch_size=8, n_workers=1,
                              label_column="labels", n_classes=5) as loader:
        b = next(iter(loader))
        return b["target"], loader


def test_per_row_matches_numpy_bce_and_birdset_top1():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4)).astype(np.float32)
    y = np.array([[1, 0, 1, 0], [0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 1],
                  [0, 0, 1, 0]], np.float32)
    loss, hit, labelled = (np.asarray(a) for a in
                           birdjepa.objectives.terms.per_row(logits, y))
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    want = -(y * np.log(p) + (1 - y) * np.log(1 - p)).mean(-1)
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_array_equal(hit, y[np.arange(6), logits.argmax(-1)])
    np.testing.assert_array_equal(labelled, [1, 0, 1, 1, 1, 1])
    # A null list (a row of -1) is unlabelled: no loss, no hit, not labelled; main trained it
    # as "no species present" (issue 23 item 9). The empty row 1 keeps its loss.
    y_null = y.copy()
    y_null[4] = -1.0
    loss_n, hit_n, labelled_n = (np.asarray(a) for a in
                                 birdjepa.objectives.terms.per_row(logits, y_null))
    np.testing.assert_allclose(loss_n, np.where(np.arange(6) == 4, 0.0, want), rtol=1e-5)
    assert hit_n[4] == 0 and labelled_n[4] == 0 and loss_n[1] > 0
    np.testing.assert_array_equal(birdjepa.objectives.terms.known_rows(y_null),
                                  [1, 1, 1, 1, 0, 1])
    w = np.ones(6, np.float32)
    mean, _ = birdjepa.objectives.terms.xent(logits, y_null, w)
    np.testing.assert_allclose(float(mean), np.delete(want, 4).mean(), rtol=1e-5)
    # Class ids keep softmax cross-entropy, unlabelled rows (-1) scoring 0.
    ids = np.array([0, -1, 1, 3, 3, 2])
    loss, hit, labelled = (np.asarray(a) for a in
                           birdjepa.objectives.terms.per_row(logits, ids))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(loss, np.where(ids >= 0, -logp[np.arange(6), ids], 0), rtol=1e-5)
    np.testing.assert_array_equal(labelled, ids >= 0)


@pytest.mark.heavy
def test_supervised_training_on_a_multilabel_column(tmp_path, corpus):
    cfg = tiny.tiny_config(n_steps=4, n_classes=5, eval_every=4, run_dir=str(tmp_path / "run"))
    data = dataclasses.replace(cfg.data, train_shards=str(corpus), eval_shards=str(corpus),
                               label_column="ebird_code_multilabel", n_workers=1)
    summary = birdjepa.train.loop.main(dataclasses.replace(cfg, data=data))
    assert summary["steps"] == 4 and summary["nonfinite_total"] == 0
    rows = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    ce = [r["ce"] for r in rows if "ce" in r]
    # Mean BCE over 5 classes starts near log 2 (a softmax CE would start near log 5 = 1.61).
    assert len(ce) >= 3 and all(np.isfinite(ce)) and 0.4 < ce[0] < 0.9, ce
    evals = [r for r in rows if "eval/probe_acc" in r]
    # 5 of the 8 recordings have a label: top-1 is over those, so a multiple of 1/5.
    assert evals[-1]["eval/n"] == 5
    acc = evals[-1]["eval/probe_acc"]
    assert 0.0 <= acc <= 1.0 and abs(acc * 5 - round(acc * 5)) < 1e-6, acc
