"""The loader with the real audio transform (decode -> resample -> fbank) on a tiny demo corpus:
shapes and normalisation, determinism across workers, split-and-resume, eval passes, and a
corrupt audio row that is counted and replaced deterministically."""

import json
import os
import shutil

import batches
import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pytest

import birdjepa.data
import birdjepa.demo_data

pytestmark = pytest.mark.timeout(180)

N = 12  # one recording per species
B = 4
KW = dict(batch_size=B, block_size=2, shuffle_window=8, seed=1)
CORRUPT = 5  # global row replaced by garbage bytes in the corrupt copy (shard 1, row 1)
PAD = 498  # Kaldi frames of a 5 s clip; frames PAD..511 are loader padding


@pytest.fixture(scope="module")
def demo(demo_corpus):
    """12 recordings of 3-9 s (some shorter than a clip), mixed codecs, rates and channels."""
    s = demo_corpus(n_recordings=N, n_shards=3, min_s=3.0, max_s=9.0)
    out = s["out_dir"]
    tbl = pa.concat_tables(pa.ipc.open_stream(pa.memory_map(p)).read_all() for p in s["shards"])
    return {
        "dir": str(out),
        "labels": tbl.column("label").to_numpy(),
        "duration_s": tbl.column("duration_s").to_numpy(),
    }


@pytest.fixture(scope="module")
def corrupt(demo, tmp_path_factory):
    """The same corpus with row CORRUPT's audio bytes replaced by random garbage."""
    out = tmp_path_factory.mktemp("audio") / "corrupt"
    out.mkdir()
    paths = birdjepa.data.resolve_shards(demo["dir"])
    for p in paths:
        shutil.copy(p, out)
    target = os.path.join(out, os.path.basename(paths[1]))
    with pa.OSFile(target) as f:  # not a memory map: the file is rewritten below
        tbl = pa.ipc.open_stream(f).read_all()
    audio = tbl.column("audio").to_pylist()
    audio[CORRUPT - N // 3]["bytes"] = np.random.default_rng(0).bytes(4000)
    col = pa.array(audio, type=tbl.schema.field("audio").type)
    tbl = tbl.set_column(0, tbl.schema.field("audio"), col)
    with pa.OSFile(target, "wb") as sink, pa.ipc.new_stream(sink, tbl.schema) as w:
        w.write_table(tbl)
    return str(out)


def take(d, n, state=None, **kw):
    return batches.take(d, n, state=state, **{**KW, **kw})


same = batches.assert_same


def test_features_are_normalised_and_deterministic_across_workers(demo):
    one = take(demo["dir"], 6, n_workers=1)  # two epochs
    two = take(demo["dir"], 6, n_workers=2)
    same(one, two)
    data = np.stack([b["data"] for b in one])
    assert data.shape == (6, B, 512, 128) and data.dtype == np.float32
    assert np.isfinite(data).all()
    assert (data[:, :, PAD:] == 0).all()  # loader padding: the dataset mean
    clip = data[:, :, :PAD]
    assert 0.05 < clip.std(axis=(2, 3)).min() and clip.std() < 1.0  # real, varied features
    assert abs(clip.mean()) < 1.0  # roughly centred by (x - mean) / (2 std)
    index = np.concatenate([b["index"] for b in one])
    target = np.concatenate([b["target"] for b in one])
    assert all(b["valid"].all() for b in one)
    np.testing.assert_array_equal(target, demo["labels"][index])
    assert sorted(index[:N]) == list(range(N)) and sorted(index[N:]) == list(range(N))
    assert set(target) == set(range(N))  # every species
    # Random crops: a recording longer than a clip gives different features in each epoch; one
    # shorter than a clip always starts at 0 and so gives the same features.
    flat = data.reshape(2 * N, 512, 128)
    for row in range(N):
        e0, e1 = flat[list(index[:N]).index(row)], flat[N + list(index[N:]).index(row)]
        if demo["duration_s"][row] > 5.5:
            assert not np.array_equal(e0, e1), row
        elif demo["duration_s"][row] < 5.0:
            assert np.array_equal(e0, e1), row


@pytest.mark.filterwarnings("ignore:birdjepa.data")
@pytest.mark.parametrize("which", ["clean", "corrupt"])
def test_split_and_resume_is_bitwise(demo, corrupt, which):
    d = demo["dir"] if which == "clean" else corrupt
    ref = take(d, 9, n_workers=2)
    for split in (1, 4, 7):
        with birdjepa.data.Loader(d, n_workers=2, **KW) as loader:
            head = [b for _, b in zip(range(split), loader, strict=False)]
            state = json.loads(json.dumps(loader.state_dict()))
        assert state["step"] == split
        same(ref, head + take(d, 9 - split, state=state, n_workers=1))


@pytest.mark.filterwarnings("ignore:birdjepa.data")
def test_eval_covers_every_sample_once(demo, corrupt):
    with birdjepa.data.Loader(demo["dir"], mode="eval", n_workers=2, **KW) as ev:
        assert len(ev) == 3
        first, second = list(ev), list(ev)
    same(first, second)
    same(first, take(demo["dir"], 3, mode="eval", n_workers=1, **{**KW, "seed": 7}))
    index = np.concatenate([b["index"] for b in first])
    np.testing.assert_array_equal(index, np.arange(N))
    assert all(b["valid"].all() for b in first)
    np.testing.assert_array_equal(np.concatenate([b["target"] for b in first]), demo["labels"])

    # A corrupt row keeps its slot in eval: real index, valid=False, zero data.
    with birdjepa.data.Loader(corrupt, mode="eval", n_workers=2, **KW) as ev:
        bad = list(ev)
        stats = ev.stats()
    assert (stats["failures"], stats["invalid"], stats["replaced"]) == (1, 1, 0)
    np.testing.assert_array_equal(np.concatenate([b["index"] for b in bad]), np.arange(N))
    valid = np.concatenate([b["valid"] for b in bad])
    assert not valid[CORRUPT] and valid.sum() == N - 1
    data = np.concatenate([b["data"] for b in bad])
    assert (data[CORRUPT] == 0).all()
    ok = np.arange(N) != CORRUPT
    assert data[ok].tobytes() == np.concatenate([b["data"] for b in first])[ok].tobytes()


def test_corrupt_row_is_counted_and_replaced_deterministically(demo, corrupt):
    n = 6
    clean = take(demo["dir"], n + 1, n_workers=2)
    with pytest.warns(RuntimeWarning, match=f"skipped sample {CORRUPT} .*row 1"):
        with birdjepa.data.Loader(corrupt, n_workers=2, **KW) as loader:
            bad = [b for _, b in zip(range(n), loader, strict=False)]
            stats = loader.stats()
    with pytest.warns(RuntimeWarning):
        same(bad, take(corrupt, n, n_workers=1))
    assert stats["failures"] >= 2 and stats["replaced"] >= 2 and stats["invalid"] == 0
    assert stats["failures_yielded"] == 2  # once per epoch in the 6 yielded batches
    last = stats["recent_failures"][-1]
    assert last["index"] == CORRUPT and last["row"] == 1
    assert last["shard"].endswith("data-00001-of-00003.arrow") and last["error"]

    hits = 0
    for s in range(n):
        assert bad[s]["valid"].all() and CORRUPT not in bad[s]["index"]
        for j in range(B):
            if clean[s]["index"][j] == CORRUPT:
                # Replaced by the row at the same slot of the next batch, with that position's crop.
                hits += 1
                src = clean[s + 1]
            else:
                src = clean[s]
            for k in ("data", "index", "target", "shard"):
                assert bad[s][k][j].tobytes() == src[k][j].tobytes(), (s, j, k)
    assert hits == 2
