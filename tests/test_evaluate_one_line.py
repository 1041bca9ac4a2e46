"""Issue 30 item 13 (evaluate): cases that ended in a traceback are one line and exit 2:
all-garbage test audio, a non-finite encoder, window_s 1e5 and hop_s 1e-5."""

import shutil

import numpy as np
import pyarrow as pa
import pytest

import birdjepa.demo_data
import birdjepa.evaluate.__main__
import birdjepa.evaluate.cache

TINY = """
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


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A focal training split, a soundscape test split, and the test split with every
    recording's bytes replaced by garbage."""
    root = tmp_path_factory.mktemp("eval-one-line")
    birdjepa.demo_data.write(root / "train", n_recordings=24, n_shards=1, min_s=5.0, max_s=5.0,
                             workers=1, seed=0)
    birdjepa.demo_data.write_soundscapes(root / "test", n_soundscapes=2, n_segments=3)
    (root / "tiny.toml").write_text(TINY)
    shutil.copytree(root / "test", root / "garbage")
    (shard,) = (root / "garbage").glob("*.arrow")
    t = pa.ipc.open_stream(shard.read_bytes()).read_all()  # not mapped: rewritten below
    col = t.column("audio").combine_chunks()
    junk = pa.StructArray.from_arrays(
        [pa.array([b"garbage" * 50] * len(t), pa.binary()), col.field("path")],
        names=["bytes", "path"]).cast(t.schema.field("audio").type)
    t = t.set_column(t.column_names.index("audio"), t.schema.field("audio"),
                     pa.chunked_array([junk]))
    with pa.OSFile(str(shard), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    return root


def _evaluate(root, capsys, *extra, test="test") -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = birdjepa.evaluate.__main__.main([
        "--random", str(root / "tiny.toml"), "--train_shards", str(root / "train"),
        "--test_shards", str(root / test), "--shots", "0", "--seeds", "0", "--out_dir",
        str(root / "out"), *extra])
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error")]
    return rc, err


@pytest.mark.parametrize("args, message", [
    (("--window_s", "1e5"), "config key 'window_s': expected seconds in (0, 3600], got 100000"),
    (("--hop_s", "1e-5", "--train_windows", "all"),
     "config key 'hop_s': expected seconds in [0.01, 3600] (one fbank frame at least)"),
])
def test_window_and_hop_out_of_range_are_one_line(corpus, capsys, args, message):
    rc, err = _evaluate(corpus, capsys, *args)
    assert rc == 2 and len(err) == 1 and message in err[0], err


def test_all_garbage_test_audio_is_one_line(corpus, capsys):
    rc, err = _evaluate(corpus, capsys, test="garbage")
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: too many failed samples: 6 of the last 6 samples failed")
    assert "unsupported codec" in err[0] and "garbage" in err[0]


def test_a_non_finite_encoder_is_one_line(corpus, capsys, monkeypatch):
    """Embeddings as a NaN encoder gives them (its weights cannot be saved in a checkpoint:
    the checkpointer refuses NaN state, so the NaN is put into the embeddings)."""
    real = birdjepa.evaluate.cache.embed_all

    def nan_embeddings(*a, **k):
        out = real(*a, **k)
        return {key: {**v, "pooled": np.full_like(v["pooled"], np.nan)}
                for key, v in out.items()}

    monkeypatch.setattr(birdjepa.evaluate.cache, "embed_all", nan_embeddings)
    rc, err = _evaluate(corpus, capsys)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: encoder 'random-tiny': expected finite embeddings, got ")
