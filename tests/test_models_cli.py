"""Models out of a run: export round trip (bitwise, no run directory), `python -m birdjepa.embed`
on a directory of audio files and on shards (rows, metadata, windows and vectors equal to the
Python API), `python -m birdjepa.predict` output, the `--help` of every CLI, and a quiet embed
(`birdjepa.embeddings` the function after `import birdjepa`: tests/test_public_api.py)."""

import dataclasses
import json
import logging
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.compute
import pyarrow.csv
import pyarrow.parquet as pq
import pytest
import tiny

import birdjepa
import birdjepa.data.table as table
import birdjepa.demo_data
import birdjepa.embed
import birdjepa.evaluate.eval_config
import birdjepa.evaluate.runner
import birdjepa.export
import birdjepa.models
import birdjepa.models.arrays as arrays
import birdjepa.models.artifact
import birdjepa.models.detect
import birdjepa.models.recordings
import birdjepa.optim
import birdjepa.params
import birdjepa.predict
import birdjepa.runtime.checkpoint
import birdjepa.runtime.integrity
import birdjepa.runtime.rundir
import birdjepa.train.loop

WINDOW, HOP = 1.0, 0.75  # the tiny encoder takes 32 frames (0.3 s): windows are cut to it
EXT = {"ogg": "ogg", "mp3": "mp3", "flac": "flac", "wav": "wav"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory of the tiny supervised encoder (32 frames x 64 mels, 4 classes) as
    training leaves it (config.toml, a checkpoint at step 2, COMPLETE), without the training."""
    run = tmp_path_factory.mktemp("models-run") / "run"
    cfg = tiny.finalize(tiny.tiny_config("supervised", n_steps=2, run_dir=str(run)))
    return tiny.untrained_run(cfg, summary={"steps": 2, "eval_head_acc": 0.25})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, demo_corpus):
    """4 demo recordings as shards, and the same recordings as audio files in a directory."""
    root = tmp_path_factory.mktemp("models-corpus")
    shards = demo_corpus(n_recordings=4, n_shards=1, min_s=2.0, max_s=3.0, seed=5)["out_dir"]
    (root / "shards").symlink_to(shards, target_is_directory=True)
    tbl = table.read(root / "shards", ["audio", "codec"])
    (root / "files" / "sub").mkdir(parents=True)
    for i, (b, codec) in enumerate(zip(table.audio_bytes(tbl), tbl.column("codec").to_pylist(), strict=True)):
        ext = next(v for k, v in EXT.items() if codec.startswith(k))
        (root / "files" / ("sub" if i % 2 else "") / f"rec{i}.{ext}").write_bytes(b)
    return root


def test_export_round_trip_is_bitwise_and_needs_no_run_directory(run_dir, tmp_path):
    copy = tmp_path / "run-copy"
    shutil.copytree(run_dir, copy)
    assert birdjepa.export.main([str(copy), "--out_dir", str(tmp_path / "out")]) == 0
    want, want_cfg = birdjepa.models.load_encoder(copy)
    src = birdjepa.models.artifact.from_run(copy)
    digest = birdjepa.runtime.integrity.checkpoint_digest(copy, src.info["step"])
    assert src.info["checkpoint_digest"] == digest and len(digest) == 64
    shutil.rmtree(copy)  # what follows reads the export alone
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "config.json", "encoder.safetensors", "head.safetensors"]
    got, got_cfg = birdjepa.load_encoder(out)
    assert got_cfg == want_cfg and got.cfg == want.cfg
    a, b = arrays.leaf_paths(got), arrays.leaf_paths(want)
    assert sorted(a) == sorted(b) and len(a) > 10
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k
    m = birdjepa.models.load_export(out)
    assert m.head_kind == "supervised" and m.classes == ["0", "1", "2", "3"]
    assert m.info["checkpoint_digest"] == digest  # the step's identity travels with the export
    assert np.array_equal(np.asarray(m.head.w), np.asarray(src.head.w))
    card = (out / "README.md").read_text()
    assert "`supervised` objective for 2 steps" in card and "birdjepa.load_encoder" in card
    assert "eval_head_acc" in card  # the run's evaluation
    # Every input setting travels with the export, and the card states it in words.
    saved = json.loads((out / "config.json").read_text())["audio"]
    assert sorted(saved) == sorted(birdjepa.models.artifact.INPUT_KEYS)
    assert (saved["pad"], saved["window"], saved["fbank"]["preemph"]) == ("zero", "centre", 0.97)
    assert m.audio == saved
    assert "the padding being 0.0 after normalising" in card and "preemph=0.97" in card


def _embed_cli(model, sources, out, *extra):
    argv = [str(model), *map(str, sources), "--out", str(out), "--window_s", str(WINDOW),
            "--hop_s", str(HOP), "--quiet", *extra]
    return birdjepa.embed.run(birdjepa.embed.parser().parse_args(argv))


def test_embed_cli_on_audio_files_equals_the_python_api(run_dir, corpus, tmp_path):
    _embed_cli(run_dir, [corpus / "files"], tmp_path / "e.parquet", "--pool", "mean",
               "--pool", "cls")
    t = pq.read_table(tmp_path / "e.parquet")
    assert t.column_names[:3] == ["file", "start_s", "end_s"]
    files = sorted(str(p) for p in (corpus / "files").rglob("rec*"))
    assert sorted(set(t.column("file").to_pylist())) == files  # subdirectories searched
    for f in files:
        ref = birdjepa.embeddings(run_dir, f, window_s=WINDOW, hop_s=HOP, pool=("mean", "cls"))
        rows = t.filter(pyarrow.compute.equal(t.column("file"), f))
        np.testing.assert_array_equal(rows.column("start_s").to_numpy(), ref["start_s"])
        np.testing.assert_allclose(rows.column("end_s").to_numpy(), np.minimum(
            ref["start_s"] + WINDOW, rows.column("duration_s").to_numpy()))
        for p in ("mean", "cls"):
            got = np.stack(rows.column(f"emb_{p}").to_numpy(zero_copy_only=False))
            np.testing.assert_allclose(got, ref[f"emb_{p}"], rtol=1e-5, atol=1e-6)
        assert len(ref["start_s"]) >= 2  # 2-3 s recordings: several windows each


def test_embed_cli_on_shards_carries_rows_and_dataset_columns(run_dir, corpus, tmp_path):
    out = tmp_path / "out"
    birdjepa.models.artifact.export(run_dir, out)
    _embed_cli(out, [corpus / "shards"], tmp_path / "s.npz", "--patches")
    ref = birdjepa.embeddings(run_dir, corpus / "shards", window_s=WINDOW, hop_s=HOP,
                         pool=("cls", "patches"))
    with np.load(tmp_path / "s.npz", allow_pickle=True) as z:
        np.testing.assert_array_equal(z["row"], ref["row"])
        np.testing.assert_array_equal(z["start_s"], ref["start_s"])
        np.testing.assert_allclose(z["emb_cls"], ref["emb_cls"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(z["patches"], ref["patches"], rtol=1e-5, atol=1e-6)
        meta = table.read(corpus / "shards", ["label", "species", "recording_id"])
        for col in ("label", "species", "recording_id"):
            np.testing.assert_array_equal(z[col], np.asarray(meta.column(col).to_pylist())[
                ref["row"]])
        assert "audio" not in z.files and set(ref["row"]) == {0, 1, 2, 3}


def test_predict_cli_writes_birdnet_style_rows(run_dir, corpus, tmp_path):
    argv = [str(run_dir), str(corpus / "files"), "--out", str(tmp_path / "d.csv"),
            "--window_s", str(WINDOW), "--top-k", "2", "--min-conf", "0.0", "--quiet"]
    assert birdjepa.predict.main(argv) == 0
    t = pyarrow.csv.read_csv(tmp_path / "d.csv")
    assert t.column_names == ["file", "start_s", "end_s", "duration_s", "padded_s", "class",
                              "confidence", "class_index"]
    n_windows = len(birdjepa.embeddings(run_dir, sorted(
        str(p) for p in (corpus / "files").rglob("rec*")), window_s=WINDOW)["row"])
    assert t.num_rows == 2 * n_windows  # top 2 of every window
    conf = t.column("confidence").to_numpy()
    assert ((conf > 0) & (conf <= 1)).all()
    args = birdjepa.predict.parser().parse_args(argv)
    where, probs = birdjepa.models.detect.probabilities(
        birdjepa.models.open_model(run_dir), birdjepa.models.recordings.resolve(args.source), args)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
    hi = birdjepa.models.detect.rows(where, probs, ["a", "b", "c", "d"], min_conf=0.3,
                                            top_k=4)
    assert (hi["confidence"].to_numpy() >= 0.3).all()
    assert hi["confidence"].to_numpy().size == (probs >= 0.3).sum()


@pytest.mark.parametrize("module", ["embed", "predict", "export"])
def test_help_lists_every_option_and_names_the_module(module, capsys):
    parser = {"embed": birdjepa.embed.parser, "predict":
              birdjepa.predict.parser}.get(module)
    main = {"embed": birdjepa.embed.main, "predict": birdjepa.predict.main,
            "export": birdjepa.export.main}[module]
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python -m birdjepa.{module} ")
    if parser is not None:
        for action in parser()._actions:
            assert all(s in text for s in action.option_strings), action.option_strings
            assert action.help, action.dest
        args = parser().parse_args(["M", "S", "--out", "x", "--batch-size", "3"])
        assert args.batch_size == 3  # dashes are aliases of the underscored flags


def test_embed_of_a_run_directory_logs_no_warning(run_dir, corpus, caplog):
    with caplog.at_level(logging.INFO):
        out = birdjepa.embeddings(run_dir, corpus / "shards", window_s=1.0)
    assert len(out["row"]) > 4
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.slow  # 10 s on 2 idle cores, ~50 s on busy ones: two fresh processes import JAX
def test_embed_is_quiet_and_stays_callable(run_dir, corpus, tmp_path):
    """In a fresh process (as users run it): no library warnings on stderr from
    `birdjepa.embeddings(...)` or from `python -m birdjepa.embed`."""
    code = ("import birdjepa, sys\n"
            f"r = birdjepa.embeddings({str(run_dir)!r}, {str(corpus / 'shards')!r}, window_s=1.0)\n"
            "print(sorted(r), len(r['row']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and out.stdout.startswith(
        "['duration_s', 'emb_cls', 'end_s', 'padded_s', 'row', 'start_s']")
    cli = subprocess.run([sys.executable, "-m", "birdjepa.embed", str(run_dir),
                          str(corpus / "shards"), "--out", str(tmp_path / "q.parquet")],
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    lines = [ln for ln in cli.stderr.replace("\r", "\n").splitlines() if ln.strip()]
    assert lines[-1].endswith(f"windows -> {tmp_path / 'q.parquet'}")
    assert not [ln for ln in lines if "WARNING" in ln or "Warning" in ln]
    assert any("rec/s" in ln for ln in lines)  # the progress bar: rate (and ETA)


@pytest.mark.slow  # 20 s on 2 idle cores, ~50 s on busy ones: a one-step run compiles
def test_init_encoder_from_an_export_directory(run_dir, tmp_path):
    """An exported (or imported) encoder initialises a run like a run directory does: probe_only
    keeps it frozen (no weight decay), so the new run's checkpoint holds it bit for bit."""
    out = tmp_path / "exp"
    birdjepa.models.artifact.export(run_dir, out)
    optim = dataclasses.replace(birdjepa.config.Config().optim, weight_decay=0.0, warmup=2)
    cfg = tiny.finalize(tiny.tiny_config("probe_only", n_steps=1, run_dir=str(tmp_path / "new"),
                                         init_encoder=str(out), optim=optim))
    birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders(cfg))
    got, _ = birdjepa.models.load_encoder(tmp_path / "new")
    want, _ = birdjepa.load_encoder(out)
    a, b = arrays.leaf_paths(got), arrays.leaf_paths(want)
    assert all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in b)
    bad = tiny.finalize(tiny.tiny_config("probe_only", n_steps=1, run_dir=str(tmp_path / "bad"),
                                         init_encoder=str(out), optim=optim))
    bad = dataclasses.replace(bad, model=dataclasses.replace(bad.model, gelu="erf"))
    with pytest.raises(birdjepa.config.ConfigError, match="model.gelu: checkpoint has 'tanh'"):
        birdjepa.train.loop.main(bad, loaders=tiny.tiny_loaders(bad))


def test_evaluate_takes_an_export_directory(run_dir, tmp_path):
    out = tmp_path / "my-export"
    birdjepa.models.artifact.export(run_dir, out)
    cfg = birdjepa.evaluate.eval_config.EvalConfig(encoders=(str(run_dir), str(out)))
    one, two = birdjepa.evaluate.runner.load_encoders(cfg)
    assert (one.name, two.name) == ("run", "my-export") and one.digest != two.digest
    assert two.run_dir == str(out.resolve()) and two.step == -1
    a, b = arrays.leaf_paths(one.model), arrays.leaf_paths(two.model)
    assert all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


def test_predict_refuses_a_model_without_a_class_head(run_dir, corpus, tmp_path, capsys):
    m = birdjepa.models.open_model(run_dir)
    headless = birdjepa.models.Model(m.encoder, m.audio, source="bird-mae-base:w.safetensors")
    args = birdjepa.predict.parser().parse_args(
        ["M", str(corpus / "files"), "--out", str(tmp_path / "d.csv")])
    with pytest.raises(ValueError, match="'bird-mae-base:w.safetensors' has no class head"):
        birdjepa.models.detect.probabilities(
            headless, birdjepa.models.recordings.resolve(args.source), args)
    assert birdjepa.predict.main([str(tmp_path / "nothing"), str(corpus / "files"), "--out",
                                  str(tmp_path / "d.csv")]) == 2
    assert "MODEL: expected a run directory" in capsys.readouterr().err


def _export_cli(capsys, run, out, *extra) -> tuple[int, list[str]]:
    """(exit status, stderr lines) of `python -m birdjepa.export RUN --out_dir OUT EXTRA...`."""
    capsys.readouterr()
    rc = birdjepa.export.main([str(run), "--out_dir", str(out), *map(str, extra)])
    return rc, capsys.readouterr().err.strip().splitlines()


def _nan_run(run_dir, dst):
    """A copy of the tiny run whose checkpoint holds a NaN encoder (a diverged run), marked
    COMPLETE (so that only the finiteness check can refuse it)."""
    cfg = tiny.finalize(tiny.tiny_config("supervised", n_steps=2, run_dir=str(dst)))
    dst.mkdir()
    shutil.copy(run_dir / "config.toml", dst / "config.toml")
    params, _ = birdjepa.params.init_params(cfg, key=jax.random.key(0))
    params["encoder"] = jax.tree.map(lambda x: x * jnp.nan if jnp.issubdtype(
        x.dtype, jnp.floating) else x, params["encoder"])
    tx = birdjepa.optim.make(cfg.optim, params)
    state = {"params": params, "opt": tx.init(params), "key": jax.random.key(1),
             "step": jnp.int32(2)}
    with birdjepa.runtime.checkpoint.Checkpointer(dst / "checkpoints", every=1, keep=1) as ck:
        ck.save(2, state, loader={}, meta={"config": dataclasses.asdict(cfg)}, force=True)
    birdjepa.runtime.rundir.mark_complete(dst, {"steps": 2})
    return dst


def test_export_refuses_an_unfinished_run_unless_forced_and_the_card_says_so(run_dir, tmp_path,
                                                                             capsys):
    """Issue 30 item 3: a not-COMPLETE run exported with exit 0 and a silent model card."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "COMPLETE").unlink()
    rc, err = _export_cli(capsys, copy, tmp_path / "out")
    assert rc == 2 and len(err) == 1, err
    assert "expected a finished run with finite parameters, but it is not marked COMPLETE" in \
        err[0] and "use --force" in err[0]
    assert not (tmp_path / "out").exists()
    rc, err = _export_cli(capsys, copy, tmp_path / "out", "--force")
    assert rc == 0, err
    card = (tmp_path / "out" / "README.md").read_text()
    assert card.startswith("**Forced export (--force): it is not marked COMPLETE")
    assert birdjepa.models.load_export(tmp_path / "out").info["forced"]


def test_export_refuses_non_finite_weights_in_one_line(run_dir, tmp_path, capsys, monkeypatch):
    """Issue 30 item 3: a diverged run exported NaN weights with exit 0. The checkpointer's own
    finiteness checks are switched off here, so the NaN reaches export's check."""
    monkeypatch.setattr(birdjepa.runtime.integrity, "nonfinite_leaf", lambda tree: None)
    nan = _nan_run(run_dir, tmp_path / "nan")
    rc, err = _export_cli(capsys, nan, tmp_path / "out")
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert "non-finite" in err[0], err
    assert not (tmp_path / "out" / "encoder.safetensors").exists()


def test_export_with_every_checkpoint_corrupt_is_one_line(run_dir, tmp_path, capsys):
    """Issue 30 item 9: export ended in a traceback."""
    import test_checkpoint_integrity as integrity

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    integrity.bitflip(copy / "checkpoints" / "2")
    rc, err = _export_cli(capsys, copy, tmp_path / "out")
    assert rc == 2 and len(err) == 1 and "no intact checkpoint in" in err[0], err


def test_export_refuses_a_run_directory_and_a_file_and_load_encoder_ignores_stale_exports(
        run_dir, tmp_path, capsys):
    """Issue 30 item 3: an export inside the run directory was what load_encoder(RUN) returned
    after training went on; an OUT_DIR that is a file gave a traceback."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    for out in (copy, copy / "export", copy / "checkpoints" / "x"):
        rc, err = _export_cli(capsys, copy, out)
        assert rc == 2 and len(err) == 1 and "outside every run directory" in err[0], err
    (tmp_path / "file").write_text("x")
    for out in (tmp_path / "file", tmp_path / "file" / "sub"):
        rc, err = _export_cli(capsys, copy, out)
        assert rc == 2 and len(err) == 1 and str(tmp_path / "file") in err[0], err
    # an export planted in the run directory (as an older version allowed) is never read
    assert _export_cli(capsys, copy, tmp_path / "stale")[0] == 0
    for name in ("config.json", "encoder.safetensors"):
        shutil.copy(tmp_path / "stale" / name, copy / name)
    (copy / "config.json").write_text((copy / "config.json").read_text().replace(
        '"width": 32', '"width": 48'))  # a stale export would load as another architecture
    got, _ = birdjepa.load_encoder(copy)
    want, _ = birdjepa.models.load_encoder(copy)
    assert got.cfg == want.cfg and got.cfg.width == 32
    assert birdjepa.models.open_model(copy).source == str(copy)
    assert not birdjepa.models.artifact.is_export(copy)


def test_the_card_never_shows_one_steps_results_under_another_step(run_dir, tmp_path, capsys):
    """Issue 30 item 3: after a checkpoint fallback (the run finished at step 4, its step-4
    checkpoint was lost) the card showed step 4's results under step 2."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    birdjepa.runtime.rundir.mark_complete(copy, {"steps": 4, "eval_head_acc": 0.75})
    assert _export_cli(capsys, copy, tmp_path / "out")[0] == 0
    card = (tmp_path / "out" / "README.md").read_text()
    assert "for 2 steps" in card and "0.75" not in card and "eval_head_acc" not in card
    assert "No results for step 2: the evaluation recorded with this run belongs to step 4" in card


def test_export_never_replaces_files_it_did_not_write_unasked(run_dir, tmp_path, capsys):
    """Issue 38 items 2-3: export into an existing directory replaced the user's README.md and
    config.json; an ONNX export into its own source export rewrote that export's config.json
    (exit 0), which could no longer be loaded."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my notes\n")
    (mine / "config.json").write_text("{}\n")
    rc, err = _export_cli(capsys, run_dir, mine)
    assert rc == 2 and len(err) == 1 and "holding config.json, README.md; --overwrite" in err[0]
    assert (mine / "README.md").read_text() == "my notes\n"
    assert (mine / "config.json").read_text() == "{}\n"
    assert sorted(p.name for p in mine.iterdir()) == ["README.md", "config.json"]
    rc, err = _export_cli(capsys, run_dir, mine, "--overwrite")
    assert rc == 0, err
    exp = tmp_path / "exp"
    assert _export_cli(capsys, run_dir, exp)[0] == 0
    before = (exp / "config.json").read_bytes()
    for extra in ([], ["--overwrite"]):
        rc, err = _export_cli(capsys, exp, exp, "--format", "onnx", *extra)
        assert rc == 2 and "expected a directory other than MODEL's" in err[-1], err
    assert (exp / "config.json").read_bytes() == before
    assert birdjepa.models.load_export(exp).classes == ["0", "1", "2", "3"]


def test_an_export_that_fails_midway_leaves_the_previous_export_whole(run_dir, tmp_path,
                                                                     monkeypatch):
    """Issue 38 item 4: export wrote each file in place, so a failure (a full disk) after the
    weights left new weights beside the old config.json and README.md."""
    exp = tmp_path / "exp"
    birdjepa.models.artifact.export(run_dir, exp)
    before = {p.name: p.read_bytes() for p in exp.iterdir()}

    def full_disk(meta, run):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(birdjepa.models.card, "render", full_disk)
    monkeypatch.setattr(birdjepa.models.safetensors, "save", _marked_save(  # other bytes
        birdjepa.models.safetensors.save))
    with pytest.raises(OSError, match="No space left"):
        birdjepa.models.artifact.export(run_dir, exp, overwrite=True)
    assert {p.name: p.read_bytes() for p in exp.iterdir()} == before  # no temporary file


def _marked_save(real):
    def save(arrays, path, meta=None):
        return real(arrays, path, {**(meta or {}), "attempt": "second"})
    return save


def test_load_encoder_restores_once_and_an_export_has_one_step(run_dir, tmp_path,  # noqa: F811
                                                               monkeypatch):
    """Issue 38 items 14 and 24: `load_encoder(RUN, with_head=True)` restored the checkpoint
    twice (head and encoder from different checkpoints of a run still training);
    `load_encoder(EXPORT, step=2)` silently returned the export's step."""
    calls = []
    real = birdjepa.models.artifact.restore_state
    monkeypatch.setattr(birdjepa.models.artifact, "restore_state",
                        lambda *a, **k: calls.append(a) or real(*a, **k))
    enc, cfg, head, classes = birdjepa.models.load_encoder(run_dir, with_head=True)
    assert len(calls) == 1 and head is not None and cfg.objective.name == "supervised"
    out = tmp_path / "exp"
    birdjepa.models.artifact.export(run_dir, out)
    held = birdjepa.models.load_export(out).info["step"]
    assert birdjepa.models.load_encoder(out, step=held)[0].cfg == enc.cfg
    with pytest.raises(ValueError, match=f"step: expected the step .* holds \\({held}; an export "
                       f"or imported model holds one\\), got {held - 1}"):
        birdjepa.models.load_encoder(out, step=held - 1)


def test_with_head_errors_are_the_same_as_without(tmp_path):
    """Issue 38 item 24: with `with_head=True` a bad MODEL's error talked about `--cfg` (another
    code path); now every form of load_encoder opens MODEL through one path."""
    for spec in [tmp_path / "nope", tmp_path, "bird-mae-base:" + str(tmp_path / "w.safetensors")]:
        errors = []
        for kw in ({}, {"with_head": True}, {"with_head": True, "with_input": True}):
            with pytest.raises(Exception) as e:
                birdjepa.models.load_encoder(spec, **kw)
            errors.append((type(e.value), str(e.value)))
        assert len(set(errors)) == 1 and "--cfg" not in errors[0][1], errors


@pytest.mark.parametrize(("edit", "message"), [
    (("head", "activation", "relu"), "head.activation: expected one of softmax, sigmoid, got 'relu'"),
    (("audio", "window_s", 0.001), "audio.window_s: expected seconds >= 0.025 (one 25 ms frame), "
     "got 0.001"),
    (("audio", "std", 0), "audio.std: expected a finite value > 0, got 0"),
    (("audio", "sample_rate", 0), "audio.sample_rate: expected >= 1, got 0"),
    (("audio", "window", "middle"), "audio.window: expected one of start, centre, got 'middle'"),
    (("head", "classes", ["a"]), "head.classes: expected 4 class names (the head's outputs), "
     "got 1"),
])
def test_an_exports_config_json_is_checked_naming_the_key(run_dir, tmp_path, edit, message):
    """Issue 47 item 20: an export's config.json was read without checks: `head.activation:
    "relu"` predicted as sigmoid, `audio.window_s: 0.001` made 10,023 one-millisecond windows,
    `audio.std: 0` was a ZeroDivisionError traceback. Checked as a run's config is."""
    out = tmp_path / "out"
    assert birdjepa.export.main([str(run_dir), "--out_dir", str(out)]) == 0
    meta = json.loads((out / "config.json").read_text())
    section, key, value = edit
    meta[section][key] = value
    (out / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=re.escape(f"{out / 'config.json'}: {message}")):
        birdjepa.models.artifact.open_model(str(out))
