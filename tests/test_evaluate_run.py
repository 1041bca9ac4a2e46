"""A small end-to-end evaluation: tiny focal corpus, tiny soundscape split, a tiny random
encoder; results JSON per (encoder, probe, k, seed), summary, plot; the CLI rejects bad keys."""

import json

import pytest

import birdjepa.config
import birdjepa.demo_data
import birdjepa.evaluate
import birdjepa.evaluate.cli
import birdjepa.evaluate.config as config
import birdjepa.evaluate.probes as probes

TINY_TRAIN = """
n_classes = 12
seed = 0
[model]
width = 16
depth = 1
n_heads = 2
n_registers = 1
patch = [32, 32]
pool = "mean"
[data]
train_shards = "x"
eval_shards = "x"
n_frames = 512
"""


@pytest.mark.slow  # ~26 CPU-s, mostly compiling 4 probes x 2 subset sizes
def test_end_to_end_tiny(tmp_path):
    birdjepa.demo_data.write(tmp_path / "train", n_recordings=24, n_shards=1, min_s=5.0,
                             max_s=5.0, workers=1, seed=0)
    birdjepa.demo_data.write_soundscapes(tmp_path / "test", n_soundscapes=2, n_segments=3)
    (tmp_path / "tiny.toml").write_text(TINY_TRAIN)
    cfg = config.EvalConfig(
        random=(str(tmp_path / "tiny.toml"),), train_shards=str(tmp_path / "train"),
        test_shards=str(tmp_path / "test"), shots=(1, 0), seeds=(0, 1),
        probe=probes.ProbeConfig(min_steps=5, epochs=1, n_prototypes=2),
        out_dir=str(tmp_path / "out"))
    summary = birdjepa.evaluate.run(cfg, verbose=False)
    assert len(summary["runs"]) == 4 * 2 * 2 and len(summary["groups"]) == 8
    files = sorted((tmp_path / "out" / "results" / "random-tiny").glob("*.json"))
    assert len(files) == 16
    row = json.loads(files[0].read_text())
    assert {"cmap", "auroc", "top1", "encoder", "probe", "k", "seed"} <= set(row)
    assert (tmp_path / "out" / "results.png").stat().st_size > 0
    assert summary["n_test"] == 6 and summary["n_train"] == 24
    # k=1 trains on exactly one recording per class.
    assert {r["n_train"] for r in summary["runs"] if r["k"] == 1} == {12}
    # Embeddings are cached: a second run reads them (and gives the same numbers).
    again = birdjepa.evaluate.run(cfg, verbose=False)
    assert [r["cmap"] for r in again["runs"]] == [r["cmap"] for r in summary["runs"]]


def test_cli_rejects_unknown_and_bad_keys(tmp_path, capsys):
    (tmp_path / "e.toml").write_text('encoders = ["x"]\nbogus = 1\n')
    assert birdjepa.evaluate.cli.main(["--cfg", str(tmp_path / "e.toml")]) == 2
    assert "unknown config key 'bogus'" in capsys.readouterr().err
    (tmp_path / "p.toml").write_text('encoders = ["x"]\n[probe]\nlr = "fast"\n')
    with pytest.raises(birdjepa.config.ConfigError, match="probe.lr"):
        config.load(str(tmp_path / "p.toml"))
    (tmp_path / "k.toml").write_text('encoders = ["x"]\nprobes = ["svm"]\n')
    assert birdjepa.evaluate.cli.main(["--cfg", str(tmp_path / "k.toml")]) == 2
    assert "'probes': expected values in" in capsys.readouterr().err
