"""Issue 29 items 2-3 and issue 30 items 11-12: `python -m birdjepa.embed` / `predict` outputs a
user can trust (npz from audio files, duration_s and an end_s within the recording, failures named
by file with a summary, one-line warnings), every argument and output path checked before any
compute, bad directory entries as counted skips, and small jobs not padded to --batch_size."""

import dataclasses
import os

import jax
import numpy as np
import pyarrow.csv
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
import soundfile
from test_models_cli import WINDOW, corpus, run_dir  # noqa: F401 (shared module fixtures)

import birdjepa
import birdjepa.config.architecture
import birdjepa.embed
import birdjepa.model
import birdjepa.models
import birdjepa.models.columns
import birdjepa.models.detect
import birdjepa.models.features as features
import birdjepa.models.inference as inference
import birdjepa.models.recordings as recordings
import birdjepa.predict
import birdjepa.sources
from birdjepa.common.outputs import LEDGER

SR = 32000


def _files(corpus, tmp_path):  # noqa: F811
    """The corpus's audio files copied flat into a fresh directory (sorted names)."""
    d = tmp_path / "audio"
    d.mkdir()
    for p in sorted((corpus / "files").rglob("rec*")):
        (d / p.name).write_bytes(p.read_bytes())
    return d


def test_npz_from_audio_files_has_file_duration_and_true_end(run_dir, corpus, tmp_path):  # noqa: F811
    """Item 3: main raised `savez() got multiple values for argument 'file'` after the compute,
    and end_s was start_s + window even past the recording's end."""
    out = tmp_path / "e.npz"
    assert birdjepa.embed.main([str(run_dir), str(corpus / "files"), "--out", str(out),
                                "--window_s", str(WINDOW), "--quiet"]) == 0
    with np.load(out, allow_pickle=True) as z:
        files, start, end = z["file"], z["start_s"], z["end_s"]
        dur, pad = z["duration_s"], z["padded_s"]
    assert len(set(files)) == 4 and len(files) >= 8  # 2-3 s recordings, 1 s windows
    for f in set(files):
        info = soundfile.info(f) if not f.endswith((".mp3", ".ogg")) else None
        rows = files == f
        if info is not None:  # the duration is the recording's, from its own header
            np.testing.assert_allclose(dur[rows], info.frames / info.samplerate, rtol=1e-9)
        assert (end[rows] <= dur[rows] + 1e-12).all()
        np.testing.assert_allclose(end[rows] + pad[rows], start[rows] + WINDOW, rtol=1e-12)
        last = np.argmax(start[rows])
        assert pad[rows][last] > 0 and end[rows][last] == dur[rows][last]  # the padded tail
        assert (pad[rows][start[rows] + WINDOW <= dur[rows]] == 0).all()


@pytest.mark.parametrize("extra, message", [
    (["--hop_s", "0"], "--hop_s: expected seconds > 0, got 0.0"),
    (["--window_s", "-1"], "--window_s: expected seconds > 0, got -1.0"),
    (["--batch_size", "0"], "--batch_size: expected an integer >= 1, got 0"),
    (["--top_k", "0"], "--top_k: expected an integer >= 1, got 0"),
    (["--top_k", "-3"], "--top_k: expected an integer >= 1, got -3"),
    (["--min_conf", "2"], "--min_conf: expected a confidence in [0, 1], got 2.0"),
])
def test_predict_options_are_checked_before_the_model_is_opened(extra, message, corpus,  # noqa: F811
                                                                tmp_path, capsys):
    """Item 12: `--hop 0` silently tiled; `--top_k 0/-3` and `--min_conf 2` were accepted. The
    model does not exist: the option's error proves nothing was loaded or computed first."""
    argv = [str(tmp_path / "no-model"), str(corpus / "files"), "--out",
            str(tmp_path / "d.csv"), "--quiet", *extra]
    assert birdjepa.predict.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {message}"]


def test_output_paths_are_checked_before_any_compute(corpus, tmp_path, capsys):  # noqa: F811
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir.npz").mkdir()
    cases = [(tmp_path / "e.txt", "--out: expected a .parquet or .npz file, got"),
             (tmp_path / "e.csv", "--out: expected a .parquet or .npz file, got"),
             (tmp_path / "a-file" / "sub" / "e.npz", "to be a directory (the output goes "
              "under it), got a file"),
             (tmp_path / "a-dir.npz", "--out: expected a file, got the directory")]
    for out, message in cases:
        argv = [str(tmp_path / "no-model"), str(corpus / "files"), "--out", str(out)]
        assert birdjepa.embed.main(argv) == 2, out
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (out, err)


def test_bad_directory_entries_and_bad_files_are_counted_skips_named_by_file(
        run_dir, corpus, tmp_path, capsys):  # noqa: F811
    """Item 12: one dangling symlink or a directory named *.wav aborted the run; item 4: a decode
    failure was named "row 2", only the first one, with Python source lines."""
    d = _files(corpus, tmp_path)
    os.symlink(d / "gone.flac", d / "dangling.wav")
    (d / "folder.wav").mkdir()
    (d / "bad1.wav").write_bytes(b"RIFF not really a wave file")
    (d / "bad2.flac").write_bytes(b"\x00" * 64)
    out = tmp_path / "e.parquet"
    assert birdjepa.embed.main([str(run_dir), str(d), "--out", str(out), "--window_s",
                                str(WINDOW)]) == 0
    lines = [ln for ln in capsys.readouterr().err.replace("\r", "\n").splitlines() if ln]
    warns = [ln for ln in lines if ln.startswith("warning:")]
    assert len(warns) == 2, lines
    assert "SOURCE: skipped 2 entries that are not regular files" in warns[0]
    assert f"{d / 'dangling.wav'}" in warns[0]
    assert "skipped 2 of 6 recording(s) that failed to decode" in warns[1]
    assert f"{d / 'bad1.wav'}: " in warns[1] and f"{d / 'bad2.flac'}: " in warns[1]
    assert not [ln for ln in lines if ln.startswith(" ")]  # no Python source lines
    got = set(pq.read_table(out).column("file").to_pylist())
    assert got == {str(p) for p in d.glob("rec*")}


@pytest.fixture(scope="module")
def encoder():
    cfg = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(
        width=32, depth=1, n_heads=2, n_registers=1, patch=(32, 32), pool="mean"))
    return birdjepa.model.ViT(cfg, n_frames=512, n_mels=128, key=jax.random.key(0))


def test_bucket_shapes_are_few_and_small_jobs_are_not_padded_to_batch_size():
    assert [inference.bucket(n, 64, set()) for n in (1, 2, 3, 6, 8, 9, 33, 64)] == [
        1, 2, 4, 8, 8, 16, 64, 64]
    assert inference.bucket(24, 64, {64}) == 64  # a tail after full batches: no new compile
    assert inference.bucket(5, 64, {8, 64}) == 8
    shapes = {inference.bucket(n, 64, set()) for n in range(1, 65)}
    assert shapes == {1, 2, 4, 8, 16, 32, 64}  # log2(64) + 1 shapes at most


def test_a_small_job_compiles_one_small_shape_and_equals_the_full_batch(encoder):
    x = np.random.default_rng(0).normal(size=(6, 512, 128)).astype(np.float32)
    batch = [(x, np.arange(6), np.zeros(6))]
    seen = []
    small = inference.encode(encoder, iter(batch), ("mean",), batch_size=64,
                             progress=lambda rows, c: seen.append((len(rows), c)))
    assert len(seen) == 1 and seen[0][0] == 6 and seen[0][1] > 0  # the compile is timed
    xp = np.pad(x, ((0, 58), (0, 0), (0, 0)))  # the old behaviour: padded to 64
    full = inference.encode(encoder, iter([(xp, np.arange(64), np.zeros(64))]), ("mean",),
                            batch_size=64)
    # Same windows through the same weights, only the batch shape differs: XLA may order
    # reductions differently per shape, so equal to float32 rounding, not bitwise.
    np.testing.assert_allclose(small["mean"], full["mean"][:6], rtol=1e-5, atol=1e-6)


def test_windows_are_regrouped_into_full_batches_only_the_last_short(encoder, tmp_path):
    paths = []
    for i in range(5):  # 5 recordings x 3 windows of 1 s
        p = tmp_path / f"r{i}.wav"
        soundfile.write(p, np.random.default_rng(i).normal(0, 0.1, 3 * SR).astype(np.float32),
                        SR)
        paths.append(str(p))
    w = features.Windows(window_s=1.0)
    durations = {}
    sizes = [len(x) for x, _, _ in features.features(paths, w, batch_size=4, n_workers=2,
                                                      durations=durations)]
    assert sizes == [4, 4, 4, 3]
    assert durations == {i: 3.0 for i in range(5)}


def test_progress_rate_leaves_compile_time_out():
    """Item 2: the bar showed rates such as "804901 windows/s" (first batch, before any work)."""
    bar = recordings.Progress(2, enabled=True)
    bar.t0 -= 10.0  # 10 s ago, 8 of them compiling: 30 windows in 2 s of encoding
    bar(np.zeros(30, np.int64), 8.0)
    rate = float(bar.bar.desc.split("(")[1].split("/s")[0])
    assert 14.0 < rate <= 15.0, bar.bar.desc  # not 30 / 10 s = 3, nor 30 / 0 s
    assert "compile 8.0 s" in bar.bar.desc
    bar.close()


def _read_raven(path) -> list[dict]:
    lines = path.read_text().splitlines()
    header = lines[0].split("\t")
    assert all(len(ln.split("\t")) == len(header) for ln in lines[1:])
    return [dict(zip(header, ln.split("\t"), strict=True)) for ln in lines[1:]]


def test_raven_selection_tables_read_back(run_dir, corpus, tmp_path):  # noqa: F811
    """Item 4: a combined table (--out) and one table per recording (--out_dir), read back as
    Raven reads them (tab-separated, one header line) and equal to the CSV detections."""
    common = [str(run_dir), str(corpus / "files"), "--window_s", str(WINDOW), "--top_k", "2",
              "--min_conf", "0.0", "--quiet"]
    assert birdjepa.predict.main([*common, "--out", str(tmp_path / "d.csv")]) == 0
    assert birdjepa.predict.main([*common, "--format", "raven", "--out",
                                  str(tmp_path / "all.txt")]) == 0
    assert birdjepa.predict.main([*common, "--format", "raven", "--out_dir",
                                  str(tmp_path / "tables")]) == 0
    ref = pyarrow.csv.read_csv(tmp_path / "d.csv").to_pylist()
    rows = _read_raven(tmp_path / "all.txt")
    assert list(rows[0]) == ["Selection", "View", "Channel", "Begin Time (s)", "End Time (s)",
                             "Low Freq (Hz)", "High Freq (Hz)", "Species", "Confidence",
                             "Class Index", "Padded (s)", "Begin Path", "File Offset (s)"]
    assert [int(r["Selection"]) for r in rows] == list(range(1, len(ref) + 1))
    assert {r["View"] for r in rows} == {"Spectrogram 1"} and {r["Channel"] for r in rows} == {"1"}
    for r in rows:  # the fbank's band: at most the model's 32 kHz, at most the recording's
        top = min(SR, soundfile.info(r["Begin Path"]).samplerate) / 2
        assert (float(r["Low Freq (Hz)"]), float(r["High Freq (Hz)"])) == (20.0, top)
    key = lambda r: (r["file"], round(r["start_s"], 6), str(r["class"]))  # noqa: E731
    want = {key(r): r for r in ref}
    for r in rows:
        assert os.path.isabs(r["Begin Path"]) and os.path.isfile(r["Begin Path"])
        d = want[(r["Begin Path"], round(float(r["File Offset (s)"]), 6), r["Species"])]
        at = float(r["Begin Time (s)"]) - float(r["File Offset (s)"])  # its sequence offset
        assert abs(float(r["End Time (s)"]) - at - d["end_s"]) < 1e-5
        assert float(r["End Time (s)"]) - at <= d["duration_s"] + 1e-5  # within the recording
        assert abs(float(r["Padded (s)"]) - d["padded_s"]) < 1e-6
        assert abs(float(r["Confidence"]) - d["confidence"]) < 1e-6
    tables = sorted((tmp_path / "tables").glob("*.selections.txt"))
    assert {p.name for p in (tmp_path / "tables").iterdir()} - {p.name for p in tables} == {
        LEDGER}  # and the ledger that says they are predict's
    files = sorted(str(p) for p in (corpus / "files").rglob("rec*"))
    assert [p.name for p in tables] == sorted(
        f"{os.path.basename(f).rsplit('.', 1)[0]}.selections.txt" for f in files)
    per = [r for p in tables for r in _read_raven(p)]
    assert len(per) == len(ref) and "Begin Path" not in per[0]
    assert int(_read_raven(tables[0])[0]["Selection"]) == 1  # numbered per table


def test_raven_needs_audio_files_and_one_output(run_dir, corpus, tmp_path, capsys):  # noqa: F811
    base = [str(run_dir), "--format", "raven", "--quiet"]
    assert birdjepa.predict.main([*base, str(corpus / "shards"), "--out",
                                  str(tmp_path / "a.txt")]) == 2
    assert "--format raven: expected audio files as SOURCE" in capsys.readouterr().err
    assert birdjepa.predict.main([*base, str(corpus / "files"), "--out",
                                  str(tmp_path / "a.csv")]) == 2
    assert "--out: expected a .txt file" in capsys.readouterr().err
    assert birdjepa.predict.main([str(run_dir), str(corpus / "files"), "--out_dir",
                                  str(tmp_path / "t")]) == 2
    assert "--out: expected one output" in capsys.readouterr().err


def test_predict_in_python_returns_the_rows_the_cli_writes(run_dir, corpus, tmp_path):  # noqa: F811
    """Item 11: `birdjepa.detections(model, source)` and `load_encoder(..., with_head=True)`."""
    rows = birdjepa.models.detect.detections(run_dir, corpus / "files", window_s=WINDOW, top_k=2,
                                          min_conf=0.0)
    assert birdjepa.predict.main([str(run_dir), str(corpus / "files"), "--out",
                                  str(tmp_path / "d.parquet"), "--window_s", str(WINDOW),
                                  "--top_k", "2", "--min_conf", "0.0", "--quiet"]) == 0
    assert pq.read_table(tmp_path / "d.parquet").equals(pyarrow.table(rows))
    assert birdjepa.detections is birdjepa.models.detect.detections
    with pytest.raises(ValueError, match="--top_k: expected an integer >= 1, got 0"):
        birdjepa.detections(run_dir, corpus / "files", top_k=0)
    enc, cfg, head, classes = birdjepa.models.load_encoder(run_dir, with_head=True)
    m = birdjepa.models.open_model(run_dir)
    assert classes == m.classes == ["0", "1", "2", "3"] and cfg.objective.name == "supervised"
    np.testing.assert_array_equal(np.asarray(head.w), np.asarray(m.head.w))
    assert enc.cfg == m.encoder.cfg
    *_, audio = birdjepa.models.load_encoder(run_dir, with_head=True, with_input=True)
    assert audio == m.audio and audio["n_frames"] == cfg.data.n_frames


def _embed(run_dir, source, out):  # noqa: F811
    assert birdjepa.embed.main([str(run_dir), str(source), "--out", str(out),
                                           "--window_s", str(WINDOW), "--quiet"]) == 0
    return pq.read_table(out)


def test_predict_on_a_dataset_keeps_its_columns_as_embed_does(run_dir, corpus, tmp_path):  # noqa: F811
    """Issue 36 item 6.1: predict on a dataset wrote only `row`, embed every column."""
    emb = _embed(run_dir, corpus / "shards", tmp_path / "e.parquet")
    det = birdjepa.models.detect.detections(run_dir, corpus / "shards", window_s=WINDOW, top_k=1,
                                         min_conf=0.0)  # one row per window, in window order
    where = [c for c in emb.column_names if not c.startswith("emb_")]
    meta = [c for c in where if c not in birdjepa.models.columns.RESERVED]
    assert where[0] == "row" and {"label", "species", "recording_id"} <= set(meta)
    assert list(det) == [*where, "class", "confidence", "class_index"]
    assert pyarrow.table({c: det[c] for c in where}).equals(emb.select(where))


def test_the_python_api_returns_the_columns_the_cli_writes(run_dir, corpus, tmp_path):  # noqa: F811
    """Issue 36 item 6.2: `birdjepa.embeddings` returned `mean`, `start_s` where the CLI wrote
    `emb_mean`, `end_s`, `padded_s`: the same names and values now (plus `row`)."""
    files = sorted(str(p) for p in (corpus / "files").rglob("rec*"))
    cli = _embed(run_dir, corpus / "files", tmp_path / "e.parquet")
    api = birdjepa.embeddings(run_dir, files, window_s=WINDOW)
    assert cli.column_names == ["file", "start_s", "end_s", "duration_s", "padded_s", "emb_cls"]
    assert list(api) == ["row", *cli.column_names]
    assert api["file"].tolist() == cli.column("file").to_pylist()
    for c in ("start_s", "end_s", "duration_s", "padded_s"):
        np.testing.assert_array_equal(api[c], cli.column(c).to_numpy(), err_msg=c)
    assert api["padded_s"].max() > 0  # the last window of a recording is padded, and says so
    np.testing.assert_allclose(api["emb_cls"], np.stack(cli.column("emb_cls").to_numpy(
        zero_copy_only=False)), rtol=1e-5, atol=1e-6)
    # A table source: its row ids and times are the CLI's, centre windows (the loader) too.
    shards = _embed(run_dir, corpus / "shards", tmp_path / "s.parquet")
    got = birdjepa.embeddings(run_dir, corpus / "shards", window_s=WINDOW)
    assert set(got) == {"row", "start_s", "end_s", "duration_s", "padded_s", "emb_cls"}
    for c in got:
        np.testing.assert_allclose(np.stack(shards.column(c).to_numpy(zero_copy_only=False)),
                                   got[c], rtol=1e-5, atol=1e-6, err_msg=c)
    centre = birdjepa.embeddings(run_dir, corpus / "shards", window_s=WINDOW, centre=True)
    np.testing.assert_array_equal(centre["duration_s"], shards.group_by("row").aggregate(
        [("duration_s", "max")]).sort_by("row").column("duration_s_max").to_numpy())
    np.testing.assert_allclose(centre["end_s"], centre["start_s"] + WINDOW)


def test_a_relative_dataset_writes_relative_paths(run_dir, corpus, tmp_path):  # noqa: F811
    """Issue 36 item 6.3: `from_files --relative` stored relative audio paths, but its `file`
    column (embed's and predict's `source_file`) held absolute ones, stale after a move."""
    d = _files(corpus, tmp_path)
    assert birdjepa.sources.main(["from_files", str(d), "--out_dir", str(tmp_path / "ds"),
                                  "--relative"]) == 0
    want = sorted(os.path.join("..", "audio", p.name) for p in d.iterdir())
    emb = _embed(run_dir, tmp_path / "ds", tmp_path / "e.parquet")
    assert sorted(set(emb.column("source_file").to_pylist())) == want
    det = birdjepa.models.detect.detections(run_dir, tmp_path / "ds", window_s=WINDOW)
    assert set(det["source_file"].to_pylist()) <= set(want)
    assert "file" not in emb.column_names and "file" not in det


def test_predict_in_python_defaults_to_the_model_clip(run_dir, corpus):  # noqa: F811
    """Issue 38 item 11: `birdjepa.detections` cut 5 s windows where the command line and
    `birdjepa.embeddings` cut the model's clip (here a model whose clip is 1.5 s; the recordings
    are 2-3 s long)."""
    m = birdjepa.models.open_model(run_dir)
    m = dataclasses.replace(m, audio={**m.audio, "window_s": 1.5})
    rows = birdjepa.detections(m, corpus / "files", top_k=1, min_conf=0.0)
    first = [s for f, s in zip(rows["file"].to_pylist(), rows["start_s"].to_pylist(), strict=True)
             if f == rows["file"][0].as_py()]
    assert first == [0.0, 1.5]


def test_hop_longer_than_the_window_never_starts_past_the_end():
    """Issue 38 item 16: a hop longer than the window stepped to or past a recording's end: a
    zero-length window row (10 s file, hop 10 s), or the recording failed (hop 20 s)."""
    sr = 32000
    for hop in (10.0, 20.0):
        assert features.Windows(window_s=5.0, hop_s=hop).starts(10 * sr, sr) == [0.0]
    assert features.Windows(window_s=5.0, hop_s=6.0).starts(13 * sr, sr) == [0.0, 6.0, 12.0]
    assert features.Windows(window_s=5.0, hop_s=2.5).starts(10 * sr, sr) == [0.0, 2.5, 5.0]


@pytest.mark.parametrize(("window", "message"), [
    ("10", "--window_s: expected at most the model's clip, 5 s (a longer window is cut to its "
           "first 5 s), got 10"),
    ("0.01", "--window_s: expected at least one fbank frame, 0.025 s, got 0.01")])
def test_window_the_model_cannot_see_is_refused(run_dir, corpus, tmp_path, capsys, window,  # noqa: F811
                                                message):
    """Issue 38 items 10 and 16: a 10 s window on a 5 s model was cut to 5 s (sound after 5 s
    embedded as silence, the row claiming 0-10 s); a 0.01 s window held no frame."""
    for main in (birdjepa.embed.main, birdjepa.predict.main):
        assert main([str(run_dir), str(corpus / "files"), "--out", str(tmp_path / "x.parquet"),
                     "--window_s", window, "--quiet"]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "x.parquet").exists()
    with pytest.raises(ValueError, match="--window_s: expected"):
        birdjepa.embeddings(run_dir, str(next((corpus / "files").glob("rec*"))),
                       window_s=float(window))


def test_dataset_columns_never_overwrite_each_other_or_outputs(run_dir, corpus, tmp_path):  # noqa: F811
    """Issue 38 item 8: a dataset with both `start_s` and `source_start_s`: `start_s` was renamed
    onto `source_start_s` and one of the two was lost."""
    import pyarrow as pa

    tbl = pyarrow.ipc.open_stream(next((corpus / "shards").resolve().glob("*.arrow"))).read_all()
    n = tbl.num_rows
    tbl = tbl.append_column("start_s", pa.array([10.0 + i for i in range(n)]))
    tbl = tbl.append_column("source_start_s", pa.array([20.0 + i for i in range(n)]))
    vec = birdjepa.models.columns.vector_name(birdjepa.models.open_model(run_dir).encoder.cfg.pool)
    tbl = tbl.append_column(vec, pa.array([30.0 + i for i in range(n)]))
    shards = tmp_path / "shards"
    shards.mkdir()
    with pyarrow.ipc.new_stream(shards / "data-00000-of-00001.arrow", tbl.schema) as w:
        w.write_table(tbl)
    out = _embed(run_dir, shards, tmp_path / "e.parquet").to_pydict()
    by_row = {r: i for i, r in enumerate(out["row"])}
    for r, i in by_row.items():
        assert out["source_start_s"][i] == 10.0 + r
        assert out["source_source_start_s"][i] == 20.0 + r
        assert out[f"source_{vec}"][i] == 30.0 + r
        assert len(out[vec][i]) > 1  # the embedding, not the dataset's number
    assert {birdjepa.models.columns.carried(c) for c in ("start_s", "source_start_s", "x")} == \
        {"source_start_s", "source_source_start_s", "x"}


def test_raven_high_freq_is_the_recordings_nyquist_below_the_models(run_dir, corpus, tmp_path):  # noqa: F811
    """Issue 47 item 21: an 8 kHz recording's selections said High Freq 16000 Hz (the model's
    Nyquist), a band Raven draws where the recording has nothing. The band's top is the lower
    of the model's and the recording's Nyquist frequency, in both layouts."""
    d = tmp_path / "audio"
    d.mkdir()
    rng = np.random.default_rng(0)
    for name, sr in (("narrow", 8000), ("wide", 48000)):
        soundfile.write(d / f"{name}.wav", 0.1 * rng.standard_normal(2 * sr), sr)
    common = [str(run_dir), str(d), "--window_s", str(WINDOW), "--min_conf", "0.0", "--quiet",
              "--format", "raven"]
    assert birdjepa.predict.main([*common, "--out", str(tmp_path / "all.txt")]) == 0
    assert birdjepa.predict.main([*common, "--out_dir", str(tmp_path / "t")]) == 0
    top = {}
    for r in _read_raven(tmp_path / "all.txt"):
        top.setdefault(os.path.basename(r["Begin Path"]), set()).add(float(r["High Freq (Hz)"]))
    assert top == {"narrow.wav": {4000.0}, "wide.wav": {SR / 2}}
    for name, want in (("narrow", 4000.0), ("wide", SR / 2)):
        rows = _read_raven(tmp_path / "t" / f"{name}.selections.txt")
        assert rows and {float(r["High Freq (Hz)"]) for r in rows} == {want}
