"""The results table on disk: the parquet and CSV schema, reading back, merging two results
files, and re-rendering them with `python -m birdjepa.evaluate.report` (no recomputation)."""

import dataclasses
import subprocess
import sys

import numpy as np
import pyarrow.csv
import pyarrow.parquet
import pytest

import birdjepa.evaluate.intervals as intervals
import birdjepa.evaluate.metrics as metrics
import birdjepa.evaluate.probes as probes
import birdjepa.evaluate.report as report
import birdjepa.evaluate.results as results


def fake_rows(encoder: str, test_sets=("HSN", "NBP"), seeds=(0, 1, 2), base: float = 0.5,
              digest: str = "d1") -> list[dict]:
    """Rows as protocol.evaluate writes them, with made-up values."""
    rows = []
    settings = {f"probe_{k}": v for k, v in dataclasses.asdict(probes.ProbeConfig()).items()}
    for i, ts in enumerate(test_sets):
        for probe in ("linear", "knn"):
            for k in ("1", "all"):
                for m in metrics.METRICS:
                    vals = [base + 0.1 * i + 0.01 * s for s in seeds]
                    few = k != "all"
                    mm = few and len(seeds) < intervals.MIN_SEEDS
                    group = {"n_seeds": len(seeds), "mean": float(np.mean(vals)),
                             "sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
                             "min": min(vals), "max": max(vals),
                             "lo": min(vals) if mm else max(0.0, min(vals) - 0.05),
                             "hi": max(vals) if mm else min(1.0, max(vals) + 0.05),
                             "interval": intervals.MIN_MAX if mm else (
                                 intervals.BOOTSTRAP_SEEDS if few
                                 else intervals.BOOTSTRAP_SEGMENTS),
                             "chance": 0.5 if m.startswith("auroc") else 0.1}
                    for s, v in zip(seeds, vals, strict=True):
                        rows.append({
                            "test_set": ts, "encoder": encoder, "probe": probe, "k": k,
                            "seed": s, "metric": m, "value": v, **group,
                            "n_train_recordings": 12, "n_train_windows": 40, "n_steps": 300,
                            "loss_first": 0.7, "loss_last": 0.1, "fit_s": 0.5,
                            "n_segments": 288, "n_labelled": 188, "n_classes": 12,
                            "n_classes_scored": 12, "n_classes_cmap5": 11,
                            "encoder_run_dir": f"/runs/{encoder}", "encoder_step": 800,
                            "encoder_config_hash": "abc", "encoder_digest": digest,
                            "train_shards": "data/demo/train", "test_shards": f"data/{ts}",
                            "train_windows": "all", "window_s": 5.0, "hop_s": 2.5,
                            "pool": "encoder", "n_boot": 1000, "protocol": "",
                            "sampling": "exact", **settings})
    return rows


def test_parquet_and_csv_schema_and_round_trip(tmp_path):
    rows = fake_rows("lejepa")
    pq, csv = results.write(rows, tmp_path)
    assert (pq.name, csv.name) == ("results.parquet", "results.csv")
    t = pyarrow.parquet.read_table(pq)
    assert t.schema.equals(results.SCHEMA)
    assert t.num_rows == 2 * 2 * 2 * 3 * len(metrics.METRICS)
    assert t.column_names[:7] == list(results.KEY) + ["value"]
    assert {"encoder_run_dir", "encoder_step", "encoder_config_hash", "encoder_digest",
            "probe_lr", "probe_epochs", "probe_knn_k", "lo", "hi", "interval"} <= set(
        t.column_names)
    c = pyarrow.csv.read_csv(csv)
    assert c.column_names == t.column_names and c.num_rows == t.num_rows
    for back in (results.read(pq), results.read(csv), results.read(tmp_path)):
        assert back == rows
    # key columns identify a row
    assert len({tuple(r[k] for k in results.KEY) for r in rows}) == len(rows)


def test_results_written_before_the_chance_column_read_and_merge(tmp_path):
    """Issue 36 item 6.6 added `chance`; a results file from before reads back with NaN (no
    chance line) and re-renders and merges with new ones."""
    pq, _ = results.write(fake_rows("lejepa"), tmp_path / "new")
    old = pyarrow.parquet.read_table(pq).drop_columns(["chance"])
    (tmp_path / "old").mkdir()
    pyarrow.parquet.write_table(old, tmp_path / "old" / "results.parquet")
    back = results.read(tmp_path / "old")
    assert all(np.isnan(r["chance"]) for r in back)
    merged = results.merge(back, results.read(pq))
    results.write(merged, tmp_path / "merged")
    assert report.panels(back)[0]["chance"] is None


def test_schema_refuses_rows_without_a_column(tmp_path):
    rows = fake_rows("lejepa")
    del rows[3]["encoder_digest"]
    with pytest.raises(ValueError, match=r"missing \['encoder_digest'\]"):
        results.write(rows, tmp_path)
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="expected a birdjepa results table"):
        results.read(tmp_path / "x.csv")


def test_merge_two_results_files(tmp_path):
    """Two runs (different encoders, one shared group re-run: the same encoder digest and test
    shards) merge; the later file's groups replace the earlier one's whole, and the tables show
    both encoders."""
    a = fake_rows("lejepa", base=0.5)
    b = fake_rows("supervised", base=0.6, digest="d3") + fake_rows(
        "lejepa", test_sets=("HSN",), base=0.3)
    results.write(a, tmp_path / "a")
    results.write(b, tmp_path / "b")
    merged = results.merge(results.read(tmp_path / "a"), results.read(tmp_path / "b"))
    assert len(merged) == len(a) + len(b) - len(a) // 2
    lejepa_hsn = {round(r["mean"], 6) for r in merged
                  if r["encoder"] == "lejepa" and r["test_set"] == "HSN" and r["k"] == "all"}
    lejepa_nbp = {round(r["mean"], 6) for r in merged
                  if r["encoder"] == "lejepa" and r["test_set"] == "NBP" and r["k"] == "all"}
    assert (lejepa_hsn, lejepa_nbp) == ({0.31}, {0.61})  # HSN from b, NBP from a
    text = report.table(merged, "cmap", "all")
    lines = text.splitlines()
    assert lines[1].split()[2:] == ["HSN", "NBP", "mean"]
    row = next(x for x in lines if x.startswith("lejepa") and "linear" in x)
    assert "0.310 ±0.010 [0.250, 0.370]" in row  # HSN from b
    assert "0.610 ±0.010 [0.550, 0.670]" in row  # NBP from a
    assert row.split()[-2:] == ["0.460", "±0.010"]  # mean over test sets, sd over seeds


def test_merge_refuses_two_encoders_or_two_test_splits_under_one_name(tmp_path):
    """Issue 30 item 5: two different encoders both named `final` (different checkpoint
    digests), or two test splits both named `corpus`: one was silently dropped."""
    a = fake_rows("final", test_sets=("corpus",), digest="d1")
    b = fake_rows("final", test_sets=("corpus",), digest="d2")
    with pytest.raises(ValueError, match=r"encoder 'final': expected one encoder_digest per "
                       r"name, got 2 \('d1', 'd2'\)"):
        results.merge(a, b)
    c = [{**r, "test_shards": "/elsewhere/corpus"} for r in a]
    with pytest.raises(ValueError, match=r"test set 'corpus': expected one test_shards per "
                       r"name, got 2 \('data/corpus', '/elsewhere/corpus'\)"):
        results.merge(a, c)
    results.write(a, tmp_path / "a")
    results.write(b, tmp_path / "b")
    r = subprocess.run([sys.executable, "-m", "birdjepa.evaluate.report", str(tmp_path / "a"),
                        str(tmp_path / "b")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: encoder 'final': expected one encoder_digest per name")


def test_report_cli_rerenders_and_merges(tmp_path):
    results.write(fake_rows("lejepa", seeds=(0, 1)), tmp_path / "a")
    results.write(fake_rows("supervised", digest="d2"), tmp_path / "b")
    r = subprocess.run([sys.executable, "-m", "birdjepa.evaluate.report",
                        str(tmp_path / "a" / "results.parquet"), str(tmp_path / "b" / "results.csv"),
                        "--format", "markdown", "--metric", "cmap", "--metric", "auroc",
                        "--out", str(tmp_path / "t.md"), "--plot", str(tmp_path / "p.png"),
                        "--out_dir",
                        str(tmp_path / "m")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "t.md").read_text()
    assert md.count("**cmap, k=") == 2 and md.count("**auroc, k=") == 2
    assert "| encoder | probe | HSN | NBP | mean |" in md
    assert "min-max over seeds" in md  # lejepa has 2 seeds: its few-shot cells are min-max
    assert ") mm |" in md
    assert (tmp_path / "p.png").stat().st_size > 0
    assert len(results.read(tmp_path / "m")) == len(fake_rows("lejepa", seeds=(0, 1))) + len(
        fake_rows("supervised", digest="d2"))
    bad = subprocess.run([sys.executable, "-m", "birdjepa.evaluate.report",
                          str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: results: expected")
    assert "Traceback" not in bad.stderr


def test_a_failed_write_keeps_the_previous_results(tmp_path, monkeypatch):
    """Issue 38 item 4: evaluate's tables were written in place; a full disk while writing
    results.csv left a truncated file and the old results were gone."""
    pq_path, csv_path = results.write(fake_rows("lejepa"), tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full_disk(table, where):
        with open(where, "wb") as f:
            f.write(b"encoder,probe\n")
        raise OSError(28, "No space left on device", str(where))

    monkeypatch.setattr(pyarrow.csv, "write_csv", full_disk)
    with pytest.raises(OSError, match="No space left"):
        results.write(fake_rows("supervised"), tmp_path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)  # nothing left over
    assert csv_path.read_bytes() == before["results.csv"]
    assert len(results.read(tmp_path)) == len(fake_rows("lejepa"))


def test_evaluate_refuses_an_out_dir_holding_files_it_did_not_write(tmp_path):
    """Issue 38, acceptance: evaluate replaced a user's results.csv in out_dir; an earlier
    evaluation's files (with its summary.json) are replaced as before."""
    import json

    import birdjepa.config
    import birdjepa.evaluate.runner as runner

    runner.check_out_dir(tmp_path / "new")  # absent: fine
    (tmp_path / "results.csv").write_text("my,own\n1,2\n")
    with pytest.raises(birdjepa.config.ConfigError, match=r"holding results.csv that evaluate "
                       r"did not write; choose another out_dir"):
        runner.check_out_dir(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"results": ["results.parquet"]}))
    runner.check_out_dir(tmp_path)
