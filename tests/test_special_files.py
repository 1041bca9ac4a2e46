"""Issue 30 item 10 for the Python readers: a path-only row naming a FIFO, /dev/zero or a
directory used to hang `pack` and `embed` (a plain open of a FIFO waits for a writer) or read
without end. Every Python reader now goes through birdjepa.data.paths (stat or fstat first,
regular files within max_audio_mb only): pack fails in one line, embed skips the row (counted),
evaluate names it before embedding, all at once (the timeout catches a hang)."""

import os
import re
import time

import numpy as np
import pytest
import soundfile

import birdjepa
import birdjepa.audio
import birdjepa.data.from_files
import birdjepa.data.paths as paths
import birdjepa.data.sources
import birdjepa.evaluate.checks as checks
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.models.failures
import birdjepa.models.features as features
import birdjepa.sources

pytestmark = pytest.mark.timeout(60)
KINDS = {"pipe": "a FIFO (named pipe)", "zero": "a character device", "folder": "a directory"}


@pytest.fixture
def files(tmp_path):
    """{"real": a 1 s WAV, "pipe": a FIFO no writer ever opens, "zero": /dev/zero, "folder": a
    directory named like audio}."""
    real = tmp_path / "real.wav"
    soundfile.write(real, 0.1 * np.sin(np.arange(32000) / 10.0), 32000)
    os.mkfifo(tmp_path / "pipe.wav")
    (tmp_path / "folder.wav").mkdir()
    return {"real": str(real), "pipe": str(tmp_path / "pipe.wav"), "zero": "/dev/zero",
            "folder": str(tmp_path / "folder.wav")}


def shard(d, names: list[str], files) -> str:
    """A path-only shard (absolute paths, a label column) naming `files[name]` per row."""
    return str(birdjepa.data.from_files.write([files[n] for n in names], d, label_from="parent"))


def test_the_one_reader_refuses_them_at_once(files):
    for name, kind in KINDS.items():
        for read in (paths.read_file, birdjepa.audio.info):  # the public decode reads the same
            t0 = time.monotonic()
            with pytest.raises(birdjepa.DatasetError,
                               match=re.escape(f"{files[name]}: expected a regular audio "
                                               f"file, got {kind}") + "$"):
                read(files[name])
            assert time.monotonic() - t0 < 1.0
        with pytest.raises(birdjepa.DatasetError, match="expected a regular audio file"):
            paths.check_file(files[name])
    with pytest.raises(birdjepa.DatasetError, match=r"expected at most max_audio_mb=0.01 MB, got "
                       r"0.1 MB \(raise max_audio_mb to read it\)"):
        paths.read_file(files["real"], max_audio_mb=0.01)
    with open(files["real"], "rb") as f:
        assert paths.read_file(files["real"]) == f.read()


@pytest.mark.parametrize("bad", ["pipe", "zero", "folder"])
def test_pack_fails_in_one_line_naming_row_and_kind(files, bad, tmp_path, capsys):
    src = shard(tmp_path / "src", ["real", bad], files)
    t0 = time.monotonic()
    assert birdjepa.sources.main(["pack", src, "--out_dir", str(tmp_path / "out")]) == 2
    assert time.monotonic() - t0 < 1.0
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {src}: row 1, column 'audio': {files[bad]}: expected a regular "
                   f"audio file, got {KINDS[bad]}")
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_pack_bounds_file_size_and_still_packs_regular_files(files, tmp_path, capsys):
    src = shard(tmp_path / "src", ["real"], files)
    args = ["pack", src, "--out_dir", str(tmp_path / "out")]
    assert birdjepa.sources.main(args + ["--max_audio_mb", "0.01"]) == 2
    assert "expected at most max_audio_mb=0.01 MB" in capsys.readouterr().err
    assert birdjepa.sources.main(["pack", src, "--out_dir", str(tmp_path / "ok")]) == 0


def test_embed_skips_them_counted_and_named(files, tmp_path):
    src = shard(tmp_path / "src", ["real", "pipe", "zero", "folder"], files)
    w = features.Windows(window_s=0.5, n_frames=32, n_mels=64)
    failures = birdjepa.models.failures.Failures()
    t0 = time.monotonic()
    rows = [r for _, ids, _ in features.features(src, w, batch_size=4, n_workers=2,
                                                  failures=failures) for r in ids]
    assert time.monotonic() - t0 < 10.0  # one real second of audio; the others skip at once
    assert set(rows) == {0} and len(rows) == 2
    assert failures.n_items == 4 and list(failures.by_kind) == ["DatasetError"]
    named = failures.by_kind["DatasetError"]
    for name in ("pipe", "zero", "folder"):
        assert sum(f"expected a regular audio file, got {KINDS[name]}" in n for n in named) == 1
    with pytest.warns(RuntimeWarning, match=r"skipped 3 of 4 recording\(s\)"):
        list(features.features(src, w, batch_size=4))


def test_evaluate_names_them_before_embedding(files, tmp_path, embed_calls):
    src = shard(tmp_path / "src", ["real", "zero"], files)
    cfg = eval_config.EvalConfig(random=("x.toml",), train_shards=src, test_shards=src,
                            train_label_column="label", test_label_column="label")
    t0 = time.monotonic()
    with pytest.raises(birdjepa.config.ConfigError, match=r"config key 'test_shards': expected "
                       r"regular audio files \(within max_audio_mb\) in its path-only rows, got "
                       r"1 of 2 unreadable, .*: row 1: /dev/zero: expected a regular audio "
                       r"file, got a character device"):
        checks.build(cfg)
    assert time.monotonic() - t0 < 1.0
    assert embed_calls == {"features": 0, "encode": 0}


def test_pack_checks_the_opened_file_too(files, tmp_path):
    """A file replaced by a FIFO after the up-front check is refused when opened (fstat of the
    open file), never read or waited on."""
    import birdjepa.data.pack as pack  # noqa: PLC0415

    os.link(files["real"], tmp_path / "swap.wav")
    src = pack.Source([shard(tmp_path / "src", ["swap"], {"swap": str(tmp_path / "swap.wav")})],
                      "audio", "", None)
    src.check(paths.MAX_AUDIO_MB)
    os.unlink(tmp_path / "swap.wav")
    os.mkfifo(tmp_path / "swap.wav")
    t0 = time.monotonic()
    with pytest.raises(birdjepa.DatasetError, match="got a FIFO"):
        pack.write_shard(src, pack._schema(src), 0, 1, str(tmp_path / "out.arrow"))
    assert time.monotonic() - t0 < 1.0
