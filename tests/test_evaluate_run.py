"""End to end on a tiny focal corpus and tiny soundscape splits: two test sets in one run,
every probe x k x seed x metric in results.parquet/.csv, each split embedded once per encoder
and cached; the cache follows the checkpoint's content (a retrain into the same run directory
is evaluated anew); an encoder whose checkpoint does not fit its config is one line."""

import dataclasses
import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet
import pytest
import tiny

import birdjepa.demo_data
import birdjepa.evaluate
import birdjepa.evaluate.__main__
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.metrics as metrics
import birdjepa.evaluate.probes as probes
import birdjepa.train.loop

FAST = probes.ProbeConfig(min_steps=5, epochs=1, n_prototypes=2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, demo_corpus):
    root = tmp_path_factory.mktemp("eval-corpus")
    train = demo_corpus(n_recordings=24, n_shards=1, min_s=5.0, max_s=5.0)["out_dir"]
    (root / "train").symlink_to(train, target_is_directory=True)
    birdjepa.demo_data.write_soundscapes(root / "test", n_soundscapes=2, n_segments=3)
    birdjepa.demo_data.write_soundscapes(root / "test2", n_soundscapes=2, n_segments=3, seed=5)
    (root / "tiny.toml").write_text(tiny.tiny_toml("x", n_steps=1))  # a random encoder
    return root


@pytest.mark.slow  # ~40 CPU-s, mostly compiling 4 probes
def test_two_test_sets_every_row_on_disk_and_cached(corpus, tmp_path, embed_calls):
    cfg = eval_config.EvalConfig(
        random=(str(corpus / "tiny.toml"),), train_shards=str(corpus / "train"),
        test_sets=(eval_config.TestSet("A", str(corpus / "test")),
                   eval_config.TestSet("B", str(corpus / "test2"))),
        shots=(1, 0), seeds=(0, 1, 2), probe=FAST, n_boot=200, out_dir=str(tmp_path / "out"))
    summary = birdjepa.evaluate.run(cfg, verbose=False)
    # The shared training split is embedded once, each test split once.
    assert embed_calls == {"features": 3, "encode": 3}
    rows = summary["rows"]
    assert len(rows) == 2 * 4 * 2 * 3 * len(metrics.METRICS)
    out = tmp_path / "out"
    t = pyarrow.parquet.read_table(out / "results.parquet")
    assert t.num_rows == len(rows) and (out / "results.csv").stat().st_size > 0
    assert {r["test_set"] for r in rows} == {"A", "B"}
    assert {r["n_train_recordings"] for r in rows if r["k"] == "1"} == {12}
    assert all(r["encoder_step"] == -1 and len(r["encoder_digest"]) == 64 for r in rows)
    for r in rows:
        if np.isfinite(r["lo"]):
            assert 0 <= r["lo"] <= r["hi"] <= 1, r
        want = "bootstrap-segments" if r["k"] == "all" else "bootstrap-seeds+segments"
        assert r["interval"] == want
    chance = {(r["test_set"], r["metric"]): r["chance"] for r in rows}  # one per metric
    assert len(chance) == 2 * len(metrics.METRICS) and chance[("A", "auroc_present")] == 0.5
    assert 0 < chance[("A", "cmap")] < 1 and 0 < chance[("B", "top1")] < 1
    md = (out / "results.md").read_text()
    assert "| encoder | probe | A | B | mean |" in md
    assert (out / "results.png").stat().st_size > 0
    s = json.loads((out / "summary.json").read_text())
    assert s["test_sets"]["A"]["n_test"] == 6 and s["test_sets"]["A"]["n_train"] == 24
    # A second run reads every embedding from the cache and gives the same numbers.
    again = birdjepa.evaluate.run(cfg, verbose=False)
    assert embed_calls == {"features": 3, "encode": 3}
    np.testing.assert_array_equal([r["value"] for r in again["rows"]], [r["value"] for r in rows])


def train_tiny(run_dir, seed: int, **kw):
    cfg = tiny.tiny_config(n_steps=3, ckpt_every=3, run_dir=str(run_dir), resume="never",
                           seed=seed, **kw)
    birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)


@pytest.mark.slow  # ~60 CPU-s: two tiny trainings, four evaluations
def test_retrain_into_the_same_run_dir_is_evaluated_anew(corpus, tmp_path, embed_calls):
    run = tmp_path / "run"
    train_tiny(run, seed=0)

    def evaluate(out_dir):
        cfg = eval_config.EvalConfig(
            encoders=(str(run),), train_shards=str(corpus / "train"),
            test_shards=str(corpus / "test"), probes=("linear", "knn"), shots=(0,), seeds=(0,),
            probe=FAST, n_boot=100, out_dir=str(out_dir))
        return {(r["probe"], r["metric"]): float(np.nan_to_num(r["value"], nan=-1.0))
                for r in birdjepa.evaluate.run(cfg, verbose=False)["rows"]}

    first = evaluate(tmp_path / "eval")
    assert embed_calls["encode"] == 2
    assert evaluate(tmp_path / "eval") == first and embed_calls["encode"] == 2  # cached
    train_tiny(run, seed=1)  # same run dir, same step names ("3"), other weights
    second = evaluate(tmp_path / "eval")
    assert embed_calls["encode"] == 4  # the cache missed: the manifest changed
    assert second != first
    assert second == evaluate(tmp_path / "fresh")  # what a fresh out_dir reports
    assert embed_calls["encode"] == 6

    # An encoder whose checkpoint does not fit its config.toml: one line, nothing embedded.
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    toml = (bad / "config.toml").read_text()
    assert "width = 32" in toml
    (bad / "config.toml").write_text(toml.replace("width = 32", "width = 48"))
    r = subprocess.run(
        [sys.executable, "-m", "birdjepa.evaluate", "--encoders", str(bad), "--shots", "0",
         "--train_shards", str(corpus / "train"), "--test_shards", str(corpus / "test"),
         "--out_dir", str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    err = r.stderr
    assert r.returncode == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line, no traceback
    line = err.strip()
    assert "config key 'encoders'" in line
    assert "expected arrays of the shapes asked for, got other shapes" in line
    assert not (tmp_path / "o").exists()  # nothing embedded


def test_config_defaults_are_the_protocol():
    cfg = eval_config.EvalConfig()
    assert cfg.seeds == (0, 1, 2, 3, 4) and cfg.shots == (1, 5, 0)
    assert dataclasses.asdict(cfg)["n_boot"] == 1000
    (ts,) = eval_config.test_sets(cfg)
    assert ts.name == "soundscape" and ts.train_shards == "data/demo/train"


def test_cli_rejects_unknown_and_bad_keys(tmp_path, capsys):
    (tmp_path / "e.toml").write_text('encoders = ["x"]\nbogus = 1\n')
    assert birdjepa.evaluate.__main__.main(["--cfg", str(tmp_path / "e.toml")]) == 2
    assert "unknown config key 'bogus'" in capsys.readouterr().err
    (tmp_path / "p.toml").write_text('encoders = ["x"]\n[probe]\nlr = "fast"\n')
    with pytest.raises(eval_config.birdjepa.config.ConfigError, match="probe.lr"):
        eval_config.load(str(tmp_path / "p.toml"))
    (tmp_path / "k.toml").write_text('encoders = ["."]\nprobes = ["svm"]\n')
    assert birdjepa.evaluate.__main__.main(["--cfg", str(tmp_path / "k.toml")]) == 2
    assert "'probes': expected values in" in capsys.readouterr().err


def test_the_cache_key_follows_each_path_only_recording(tmp_path):
    """Issue 30 item 4: after every test recording was replaced, the same out_dir printed the
    old numbers from the cache (kNN 1.000 against 0.500 fresh). The split's fingerprint (part
    of the cache key) now covers each path-only file's identity (path, size, mtime, inode)."""
    import os

    import birdjepa.data.table as table
    import birdjepa.demo_data.birdset as birdset

    s = birdset.write(tmp_path / "bs", n_recordings=4, n_soundscapes=1, n_segments=1,
                      max_s=10.0)
    split = s["train"]
    files = [a for a in table.read_audio(split, "audio") if isinstance(a, str)]
    assert len(files) == 4 and all(os.path.isfile(f) for f in files)
    fp = table.fingerprint(split, "audio")
    assert fp == table.fingerprint(split, "audio") != table.fingerprint(split)
    st = os.stat(files[0])
    tmp = files[0] + ".new"  # replaced the way rsync does: a new file renamed over the old one
    shutil.copy(files[1], tmp)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime kept
    os.replace(tmp, files[0])
    assert table.fingerprint(split, "audio") != fp
    fp2 = table.fingerprint(split, "audio")
    with open(files[2], "r+b") as f:  # rewritten in place, same size
        b = f.read()
        f.seek(0)
        f.write(b[::-1])
    assert table.fingerprint(split, "audio") != fp2


@pytest.mark.heavy
def test_multilayer_probe_reads_every_block_from_one_cached_embedding(corpus, tmp_path,
                                                                        embed_calls):
    """probes = ["multilayer"]: the training and test splits are embedded once with every
    block's patch tokens (a 2-block encoder: both of layers -4..-1), cached under a key of
    their own, and the probe's rows are written."""
    two = tmp_path / "two.toml"
    two.write_text((corpus / "tiny.toml").read_text().replace("depth = 1", "depth = 2", 1))
    base = dict(random=(str(two),), train_shards=str(corpus / "train"),
                test_shards=str(corpus / "test"), shots=(0,), seeds=(0,), probe=FAST,
                n_boot=100, out_dir=str(tmp_path / "out"))
    rows = birdjepa.evaluate.run(eval_config.EvalConfig(probes=("multilayer",), **base),
                                 verbose=False)["rows"]
    assert {r["probe"] for r in rows} == {"multilayer"} and all(
        np.isfinite(r["value"]) or r["metric"] != "cmap" for r in rows)
    cached = sorted((tmp_path / "out" / "embeddings").rglob("*.npz"))
    assert len(cached) == 2 and embed_calls == {"features": 2, "encode": 2}
    with np.load(cached[0]) as z:
        layers, patches = z["layers"], z["patches"]
    assert layers.dtype == np.float16 and layers.shape[:1] + layers.shape[2:] == patches.shape
    assert layers.shape[1] == 2
    birdjepa.evaluate.run(eval_config.EvalConfig(probes=("linear",), **base), verbose=False)
    assert len(sorted((tmp_path / "out" / "embeddings").rglob("*.npz"))) == 4  # another key
