"""Issue 29 item 7: a report a paper can take: test sets named by their BirdSet config (or
`test_name`), results.md saying what each encoder and test set is, a readable results.png, and a
model card that never shows training-split figures under "Evaluation"."""

import numpy as np
import pytest

import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.metrics as metrics
import birdjepa.evaluate.report as report
import birdjepa.models.card as card


@pytest.mark.parametrize("shards, name", [
    ("/c/huggingface/datasets/DBD-research-group___birdset/HSN/0.0.4/abc123:test_5s", "HSN"),
    ("/data/birdset/PER/0.0.4/f00d", "PER"),
    ("data/demo/soundscape", "soundscape"),
    ("/d/mysite/abc123:test_5s", "abc123:test_5s"),
])
def test_a_test_set_is_named_by_its_birdset_config_or_directory(shards, name):
    assert eval_config.test_sets(eval_config.EvalConfig(test_shards=shards))[0].name == name


def test_test_name_and_test_sets_names_win():
    hsn = "/x/birdset/HSN/0.0.4/abc:test_5s"
    assert eval_config.test_sets(eval_config.EvalConfig(test_shards=hsn, test_name="site A"))[0].name == \
        "site A"
    cfg = eval_config.EvalConfig(test_sets=(eval_config.TestSet("B", hsn),))
    assert [t.name for t in eval_config.test_sets(cfg)] == ["B"]


def _rows(encs=("lejepa-1", "supervised", "random"), probes=("linear", "knn"),
          ks=("1", "5", "all"), seeds=(0, 1, 2, 3, 4)):
    rng = np.random.default_rng(0)
    rows = []
    for e_i, e in enumerate(encs):
        for p in probes:
            for k in ks:
                for m in metrics.METRICS:
                    mean = 0.3 + 0.15 * e_i + 0.05 * ks.index(k) + 0.02 * rng.random()
                    for s in seeds:
                        rows.append({"test_set": "HSN", "encoder": e, "probe": p, "k": k,
                                     "seed": s, "metric": m, "value": mean, "mean": mean,
                                     "sd": 0.01, "lo": mean - 0.03, "hi": mean + 0.03,
                                     "encoder_step": 1000 * e_i - 1,
                                     "encoder_run_dir": f"/runs/{e}", "n_segments": 1200,
                                     "n_labelled": 800, "n_classes": 21,
                                     "n_classes_scored": 19, "n_classes_cmap5": 12})
    return rows


def test_results_md_says_objective_steps_seeds_segments_and_classes():
    md = report.provenance(_rows(), {"lejepa-1": "lejepa", "supervised": "supervised"})
    assert "| encoder | objective | steps | source |" in md
    assert "| lejepa-1 | lejepa | - | /runs/lejepa-1 |" in md  # step -1: no checkpoint step
    assert "| supervised | supervised | 999 | /runs/supervised |" in md
    assert "| random | - | 1999 |" in md
    assert "| HSN | 5 (0, 1, 2, 3, 4) | 1, 5, all | 1200 | 800 | 21 | 19 | 12 |" in md


def test_results_png_one_panel_per_metric_and_a_legend_below(tmp_path):
    """Looked at (docs/issues/018-daily-workflow/results.png): 5 panels 3 across, encoders by
    colour, probes by marker and line, the legend under the panels."""
    import matplotlib.image

    path = tmp_path / "results.png"
    report.plot(_rows(), path, all_probes=True)
    img = matplotlib.image.imread(path)
    h, w = img.shape[:2]
    assert (w, h) == (1260, 740)  # 3 x 4.2 in wide, 2 x 3.3 in + 0.8 in of legend, 100 dpi
    assert 1.0 < w / h < 2.5  # not a 2100 x 360 strip
    bottom = img[-40:, :, :3]  # the legend's rows: drawn in colour, below every panel
    assert (np.abs(bottom - 1.0) > 0.1).any()


def test_card_evaluation_is_held_out_only():
    meta = {"model": {"width": 8, "depth": 1, "n_heads": 2, "patch": [16, 16], "pos": "sincos",
                      "pool": "mean"},
            "audio": {"n_frames": 512, "n_mels": 128, "sample_rate": 32000, "window_s": 5.0,
                      "mean": -4.0, "std": 4.0},
            "head": {"kind": "supervised", "classes": ["a"]}, "step": 10,
            "config": {"data": {"train_shards": "tr", "eval_shards": "ev"}},
            "summary": {"train_acc": 0.99, "eval_head_acc": 0.41}}
    text = card.render(meta)
    evaluation = text.split("## Evaluation")[1].split("## ")[0]
    training = text.split("## Training-split figures (not held-out)")[1].split("## ")[0]
    assert "eval_head_acc | 0.41" in evaluation and "train_acc" not in evaluation
    assert "train_acc | 0.99" in training
    meta["config"]["data"]["eval_shards"] = "tr"  # "eval" on the training shards
    text = card.render(meta)
    evaluation = text.split("## Evaluation")[1].split("## ")[0]
    assert "No held-out evaluation was recorded" in evaluation
    assert "eval_head_acc | 0.41" in text.split("## Training-split figures")[1]


def test_chance_levels_from_the_labels():
    """Issue 36 item 6.6: each metric's chance level (a random ranking's expected score),
    hand-computed: 4 segments x 3 classes, class c without a positive."""
    y = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0]], bool)
    c = metrics.chance(y)
    assert c["cmap"] == pytest.approx((0.75 + 0.25) / 2)  # the mean prevalence of a and b
    assert np.isnan(c["cmap5"])  # no class with 5 positives
    assert c["auroc"] == pytest.approx(0.5 * 2 / 3)  # c scores 0 in BirdSet's mean
    assert c["auroc_present"] == 0.5
    assert c["top1"] == pytest.approx((1 / 3 + 2 / 3 + 1 / 3) / 3)
    rng = np.random.default_rng(0)  # what random scores get on average
    draws = [metrics.all_metrics(rng.random(y.shape), y) for _ in range(2000)]
    assert np.mean([d["top1"] for d in draws]) == pytest.approx(c["top1"], abs=0.02)
    assert np.mean([d["auroc"] for d in draws]) == pytest.approx(c["auroc"], abs=0.02)


def _probe_rows():
    """Two encoders x three probes; knn is lejepa's best probe at k = all, linear random's;
    cmap5 has no value (no class with 5 positives)."""
    rows = []
    best = {"lejepa": "knn", "random": "linear"}
    chance = {"cmap": 0.12, "cmap5": float("nan"), "auroc": 0.5, "auroc_present": 0.5,
              "top1": 0.09}
    for e_i, enc in enumerate(best):
        for probe in ("linear", "knn", "attentive"):
            for k in ("1", "all"):
                for m in metrics.METRICS:
                    mean = 0.3 + 0.1 * e_i + (0.2 if probe == best[enc] else 0.0) + (
                        0.3 if probe == "attentive" and k == "1" else 0.0)
                    mean = float("nan") if m == "cmap5" else mean
                    rows.append({"test_set": "HSN", "encoder": enc, "probe": probe, "k": k,
                                 "seed": 0, "metric": m, "value": mean, "mean": mean,
                                 "sd": 0.0, "lo": mean, "hi": mean, "chance": chance[m],
                                 "n_classes_cmap5": 0})
    return rows


def test_results_png_best_probe_per_encoder_chance_line_and_no_empty_panel(tmp_path):
    """Issue 36 item 6.6: results.png drew every probe of every encoder (12 series a panel on
    the demo), no chance line, and an empty cmap5 panel. Now: each encoder's best probe (by
    its mean at k = all; attentive leads at k = 1 only), the chance line where it is defined,
    and a panel without a value says why (`--all_probes` draws every probe)."""
    drawn = {p["metric"]: p for p in report.plot(_probe_rows(), tmp_path / "r.png")}
    assert (tmp_path / "r.png").stat().st_size > 0
    assert drawn["cmap"]["series"] == [("lejepa", "knn"), ("random", "linear")]
    assert drawn["cmap"]["title"] == "cmap (best probe per encoder)"
    assert drawn["cmap"]["chance"] == 0.12 and drawn["top1"]["chance"] == 0.09
    assert drawn["cmap"]["note"] is None
    assert drawn["cmap5"]["series"] == [] and drawn["cmap5"]["chance"] is None
    assert "no class has >= 5 positive" in drawn["cmap5"]["note"]
    every = report.plot(_probe_rows(), tmp_path / "all.png", all_probes=True)
    assert len(every[0]["series"]) == 6 and every[0]["title"] == "cmap"
