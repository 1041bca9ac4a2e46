"""Moved data everywhere (issue 29 requirement 1): BirdSet-layout path-only data (absolute paths
into the HF cache, birdjepa.demo_data.birdset) written, then moved as a whole. `evaluate` (TOML
per test set, and the CLI for every test set), `embed` and `predict` read it with `path_map` /
`audio_root`, through the one resolver; without them each fails before any compute, in one line
naming the setting that fixes it."""

import dataclasses
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import tiny
from test_models_cli import run_dir  # noqa: F401 (the shared tiny run fixture)

import birdjepa
import birdjepa.config
import birdjepa.data.from_files
import birdjepa.data.table as table
import birdjepa.demo_data.birdset as birdset
import birdjepa.embed
import birdjepa.evaluate
import birdjepa.evaluate.__main__
import birdjepa.evaluate.checks as checks
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.probes as probes
import birdjepa.launch.sweep
import birdjepa.models.detect
import birdjepa.models.inference as inference
import birdjepa.predict
import birdjepa.sources

pytestmark = pytest.mark.timeout(240)
WINDOW = "1.0"


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """The BirdSet demo cache written under OLD, then renamed to NEW: every stored path is
    stale. Also a relative path-only shard (from_files relative=True) that alone moved away
    from the audio (`rel`, read with audio_root = `rel_root`)."""
    root = tmp_path_factory.mktemp("moved")
    old, new = root / "before", root / "after"
    s = birdset.write(old, n_recordings=12, n_soundscapes=1, n_segments=4, max_s=6.0)
    audio = sorted((old / "downloads").rglob("*.ogg"))
    shard = birdjepa.data.from_files.write(audio[:3], old / "downloads", label_from="parent",
                                           relative=True)  # "extracted/<hash>/<name>.ogg"
    os.rename(old, new)
    (root / "shard-alone").mkdir()  # the shard moved away from its audio: its paths dangle
    shutil.move(new / "downloads" / shard.name, root / "shard-alone" / shard.name)
    at = {k: s[k].replace(str(old), str(new)) for k in ("train", "test_5s")}
    return {"old": str(old), "new": str(new), **at, "rel": str(root / "shard-alone"),
            "rel_root": str(new / "downloads")}


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_embed_reads_moved_data_with_path_map_and_names_it_without(run_dir, moved, tmp_path,  # noqa: F811
                                                                  capsys):
    out = tmp_path / "e.parquet"
    args = [str(run_dir), moved["train"], "--out", str(out), "--window_s", WINDOW, "--quiet",
            "--pool", "mean"]
    assert birdjepa.embed.main(args) == 2
    line = _one_line(capsys.readouterr().err)
    assert "none of the 12 path-only audio files" in line and moved["old"] in line
    assert "--path_map OLD=NEW" in line and not out.exists()
    assert birdjepa.embed.main(args + ["--path_map", f"{moved['old']}={moved['new']}"]
                                          ) == 0
    got = pq.read_table(out)
    # The same vectors as embedding the files where they are now, named one by one.
    want = inference.embeddings(run_dir, _train_files(moved), window_s=float(WINDOW),
                           pool="mean")
    np.testing.assert_array_equal(got.column("row").to_numpy(), want["row"])
    np.testing.assert_array_equal(np.stack(got.column("emb_mean").to_numpy(zero_copy_only=False)),
                                  want["emb_mean"])


def _train_files(moved) -> list[str]:
    """The train split's files where they are now (its stored paths, moved)."""
    return [p.replace(moved["old"], moved["new"]) for p in
            table.read(moved["train"], ["audio"]).column("audio").combine_chunks()
            .field("path").to_pylist()]


def test_predict_reads_relative_paths_with_audio_root(run_dir, moved, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "d.csv"
    args = [str(run_dir), moved["rel"], "--out", str(out), "--window_s", WINDOW, "--quiet",
            "--min_conf", "0"]
    assert birdjepa.predict.main(args) == 2
    line = _one_line(capsys.readouterr().err)
    assert "none of the 3 path-only audio files" in line and "--audio_root DIR" in line
    assert birdjepa.predict.main(args + ["--audio_root", moved["rel_root"]]) == 0
    rows = birdjepa.detections(run_dir, moved["rel"], window_s=float(WINDOW), min_conf=0.0,
                            audio_root=moved["rel_root"])
    assert sorted(set(rows["row"].to_pylist())) == [0, 1, 2]
    assert out.read_text().count("\n") == len(rows["row"]) + 1
    # birdjepa.predict on the moved BirdSet split takes path_map the same way. test_5s has
    # start_time / end_time, times in the soundscape its 5 s clips were cut from: each clip is
    # read whole (issue 48 item 2's rule for pre-cut clips), one window per row.
    got = birdjepa.detections(run_dir, moved["test_5s"], top_k=1, min_conf=0.0,
                              path_map={moved["old"]: moved["new"]})
    assert got["row"].to_pylist() == [0, 1, 2, 3]


def _eval_cfg(moved, tmp_path, **kw) -> eval_config.EvalConfig:
    (tmp_path / "tiny.toml").write_text(tiny.tiny_toml("x", n_steps=1))
    kw = {"train_shards": moved["train"], "train_label_column": "ebird_code", **kw}
    return eval_config.EvalConfig(
        random=(str(tmp_path / "tiny.toml"),), probes=("knn",), shots=(0,), seeds=(0,),
        n_boot=100, probe=probes.ProbeConfig(min_steps=1, epochs=1),
        out_dir=str(tmp_path / "out"), **kw)


def test_evaluate_takes_path_map_per_test_set_and_on_the_cli(moved, tmp_path, embed_calls,
                                                             capsys):
    # A [[test_sets]] entry's own path_map: the whole evaluation runs on the moved data.
    toml = tmp_path / "eval.toml"
    toml.write_text(f"""\
train_shards = "{moved['train']}"
train_label_column = "ebird_code"
path_map = {{"{moved['old']}/downloads/extracted/none" = "/nowhere"}}

[[test_sets]]
name = "DEMO"
test_shards = "{moved['test_5s']}"
path_map = {{"{moved['old']}" = "{moved['new']}"}}
""")
    cfg = eval_config.load(str(toml))
    (ts,) = eval_config.test_sets(cfg)
    assert ts.path_map == {f"{moved['old']}/downloads/extracted/none": "/nowhere",
                           moved["old"]: moved["new"]}  # the top level's, then its own
    cfg = _eval_cfg(moved, tmp_path, test_sets=cfg.test_sets, path_map=cfg.path_map)
    summary = birdjepa.evaluate.run(cfg, verbose=False)
    assert summary["test_sets"]["DEMO"]["n_test"] == 4
    assert summary["test_sets"]["DEMO"]["n_train"] == 12
    assert embed_calls["encode"] == 2 and summary["rows"]
    # Without it: one line before anything is embedded, naming path_map and the stale path.
    base = ["--random", str(tmp_path / "tiny.toml"), "--train_shards", moved["train"],
            "--train_label_column", "ebird_code", "--test_shards", moved["test_5s"],
            "--probes", "knn", "--shots", "0", "--seeds", "0", "--out_dir",
            str(tmp_path / "out2")]
    assert birdjepa.evaluate.__main__.main(base) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("error: test set 'DEMO': config key 'path_map': expected the audio "
                           "files the path-only rows of test_shards name, got 4 of 4 missing")
    assert moved["old"] in line and "--path_map OLD=NEW" in line
    assert embed_calls["encode"] == 2  # nothing more was embedded
    # The command line's --path_map applies to every test set: the checks pass.
    cfg = eval_config.cli(base + ["--path_map", f"{moved['old']}={moved['new']}"])
    (plan,) = checks.build(cfg)
    assert plan.spec.path_map == {moved["old"]: moved["new"]} and len(plan.y_test) == 4


def test_evaluate_audio_root_for_relative_paths(moved, tmp_path, capsys):
    cfg = _eval_cfg(moved, tmp_path, test_sets=(eval_config.TestSet("REL", moved["rel"]),),
                    train_shards=moved["rel"], train_label_column="label",
                    test_label_column="label")
    with pytest.raises(birdjepa.config.ConfigError, match=r"config key 'audio_root': .*3 of 3 "
                       r"missing.*stores 'extracted/\w+/DMO_\w+\.ogg'.*audio_root = DIR"):
        checks.build(cfg)
    # The test set's own audio_root fixes both of its splits (here the same shard).
    own = eval_config.TestSet("REL", moved["rel"], audio_root=moved["rel_root"])
    (plan,) = checks.build(dataclasses.replace(cfg, test_sets=(own,)))
    assert plan.spec.audio_root == moved["rel_root"] and len(plan.y_test) == 3
    # The top-level one (--audio_root) is every test set's that leaves it out.
    (plan,) = checks.build(dataclasses.replace(cfg, audio_root=moved["rel_root"]))
    assert plan.spec.audio_root == moved["rel_root"]


def test_pack_and_launch_dry_run_resolve_moved_data_the_same_way(moved, tmp_path, capsys):
    args = ["pack", moved["train"], "--out_dir", str(tmp_path / "packed")]
    assert birdjepa.sources.main(args) == 2  # checked before anything is written
    line = _one_line(capsys.readouterr().err)
    assert "row 0, column 'audio'" in line and "--path_map OLD=NEW" in line
    assert birdjepa.sources.main(args + ["--path_map", f"{moved['old']}={moved['new']}"]) == 0
    base = birdjepa.config.Config()
    data = dataclasses.replace(base.data, train_shards=moved["train"],
                               eval_shards=moved["test_5s"], label_column="ebird_code_multilabel")
    lines = birdjepa.launch.check_shards(dataclasses.replace(base, data=data))
    assert [ok for _, ok in lines] == [False, False] and "path_map" in lines[0][0], lines
    data = dataclasses.replace(data, path_map={moved["old"]: moved["new"]})
    lines = birdjepa.launch.check_shards(dataclasses.replace(base, data=data))
    assert [ok for _, ok in lines] == [True, True], lines
    assert "12/12 audio files found" in lines[0][0] and "4/4 audio files found" in lines[1][0]


def test_help_names_the_moved_data_options(capsys):
    for main in (birdjepa.embed.main, birdjepa.predict.main):
        with pytest.raises(SystemExit):
            main(["--help"])
        text = capsys.readouterr().out
        assert "--audio_root" in text and "--path_map OLD=NEW" in text and "--max_audio_mb" in text
    with pytest.raises(SystemExit):
        eval_config.cli(["--help"])
    text = capsys.readouterr().out
    assert "--audio_root" in text and "--path_map OLD=NEW" in text

