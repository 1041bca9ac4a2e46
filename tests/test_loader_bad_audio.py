"""The loader with the real audio transform and a corrupt float WAV (one sample ~3e38, a single
flipped exponent bit): a per-sample error, counted and replaced in train and `valid=False` in
eval, naming the row and frame. Before the fix it raised `BadArgumentError: bad argument wave:
expected finite samples, got NaN at index ...` naming no file or row, and ended training (a rerun
died at the same batch); a run of such samples made rubato panic and stopped the pipeline."""

import io

import loader_shards
import numpy as np
import pyarrow as pa
import pytest
import soundfile as sf

import birdjepa
import birdjepa.data

pytestmark = pytest.mark.timeout(120)

N, B, BAD = 12, 4, 5
KW = dict(batch_size=B, n_frames=98, n_mels=128, clip_s=1.0, block_size=2, shuffle_window=4,
          n_workers=2)


def float_wav(x: np.ndarray, sr: int) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, sr, subtype="FLOAT", format="WAV")
    return buf.getvalue()


@pytest.fixture(scope="module", params=["one", "run"])
def shard(request, tmp_path_factory):
    rng = np.random.default_rng(0)
    payload = []
    for i in range(N):
        sr = (44100, 48000)[i % 2]
        x = (0.3 * rng.standard_normal(int(1.5 * sr))).astype(np.float32)
        if i == BAD:
            if request.param == "one":
                x[int(0.7 * sr)] = 3e38
            else:
                x[int(0.7 * sr):int(0.7 * sr) + 100] = -3e38  # made rubato panic
        payload.append({"bytes": float_wav(x, sr), "path": f"{i}.wav"})
    tbl = pa.table({"audio": pa.array(payload, type=loader_shards.AUDIO),
                    "label": pa.array([i % 3 for i in range(N)], type=pa.int64())})
    return loader_shards.write(tmp_path_factory.mktemp("bad") / "s.arrow", tbl)


def test_train_skips_and_counts_the_corrupt_float_wav(shard):
    with pytest.warns(RuntimeWarning, match=rf"skipped sample {BAD} .*row {BAD}\): corrupt audio: "
                                            r".*expected samples with \|x\| <= 65536.* at frame"):
        with birdjepa.data.Loader([shard], seed=3, **KW) as loader:
            batches = [b for _, b in zip(range(2 * N // B), loader, strict=False)]
            stats = loader.stats()
    assert all(b["valid"].all() for b in batches)
    assert all(np.isfinite(b["data"]).all() for b in batches)
    assert stats["failures"] >= 2 and stats["replaced"] >= 2 and stats["invalid"] == 0
    assert all(f["index"] == BAD for f in stats["recent_failures"])


def test_eval_marks_the_corrupt_float_wav_invalid(shard):
    with pytest.warns(RuntimeWarning, match=f"skipped sample {BAD}"):
        with birdjepa.data.Loader([shard], mode="eval", **KW) as ev:
            batches = list(ev)
            stats = ev.stats()
    valid = np.concatenate([b["valid"] for b in batches])
    index = np.concatenate([b["index"] for b in batches])
    np.testing.assert_array_equal(index, np.arange(N))
    assert not valid[BAD] and valid.sum() == N - 1
    assert np.isfinite(np.concatenate([b["data"] for b in batches])).all()
    assert (stats["failures"], stats["invalid"], stats["replaced"]) == (1, 1, 0)
    assert "corrupt audio" in stats["recent_failures"][0]["error"]
