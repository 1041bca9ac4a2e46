"""`birdjepa.embeddings` applies exactly the training transform, windows whole recordings, pools, and
reads every kind of source; `audio.decode`/`clip` take paths."""

import jax
import numpy as np
import pytest

import birdjepa
import birdjepa.audio
import birdjepa.data
import birdjepa.data.table as table
import birdjepa.demo_data
import birdjepa.model
import birdjepa.models.features as features
import birdjepa.models.inference as inference

N_FRAMES = 512  # > 498 frames of 5 s: the loader pads, so padding is compared too


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("embed-corpus")
    birdjepa.demo_data.write(root, n_recordings=6, n_shards=2, min_s=5.0, max_s=9.0,
                             workers=1, seed=3)
    return root


@pytest.fixture(scope="module")
def encoder():
    cfg = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(
        width=32, depth=1, n_heads=2, n_registers=1, patch=(32, 32), pool="mean"))
    return birdjepa.model.ViT(cfg, n_frames=N_FRAMES, n_mels=128, key=jax.random.key(0))


def test_centre_windows_equal_the_loader_eval_crop(corpus, encoder):
    with birdjepa.data.Loader(corpus, mode="eval", batch_size=4, label_column=None,
                              n_frames=N_FRAMES, n_workers=1) as loader:
        batches = list(loader)
    want = np.concatenate([b["data"][b["valid"]] for b in batches])
    rows = np.concatenate([b["index"][b["valid"]] for b in batches])
    w = features.Windows(centre=True, n_frames=N_FRAMES)
    got = list(features.features(corpus, w, batch_size=4, engine="clip"))  # per window, in Python
    via_loader = list(features.features(corpus, w, batch_size=4))
    np.testing.assert_array_equal(np.concatenate([g[0] for g in via_loader]), want)
    np.testing.assert_array_equal(np.concatenate([g[1] for g in via_loader]), rows)
    x = np.concatenate([g[0] for g in got])
    np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), rows)
    assert x.shape == want.shape == (6, N_FRAMES, 128)
    np.testing.assert_allclose(x, want, rtol=0, atol=1e-5)
    assert (x[:, 498:] == 0).all() and np.abs(x[:, :498]).sum() > 0
    # ... and the embedding of the loader's batch is embed's.
    out = inference.embeddings(encoder, corpus, centre=True, pool=("mean", "patches"), batch_size=4)
    ref = encoder(jax.numpy.asarray(want))
    np.testing.assert_allclose(out["emb_mean"], np.asarray(ref.pooled_bd), atol=1e-4)
    np.testing.assert_allclose(out["patches"], np.asarray(ref.patches_bnd), atol=1e-4)


def test_sliding_windows_sources_and_pools(corpus, encoder, tmp_path):
    audio = table.audio_bytes(table.read(corpus, ["audio"]))
    info = birdjepa.audio.info(audio[0])
    dur = info["n_frames"] / info["sample_rate"]
    out = birdjepa.embeddings(encoder, audio[0], window_s=2.0, hop_s=1.5, pool="cls")
    n = 1 + int(np.ceil((dur - 2.0) / 1.5 - 1e-9))
    assert out["emb_cls"].shape == (n, 32) and (out["row"] == 0).all()
    np.testing.assert_allclose(out["start_s"], np.arange(n) * 1.5, atol=1e-3)
    # Window i equals a clip decoded at its start time, normalised and padded.
    w = features.Windows(window_s=2.0, n_frames=N_FRAMES)
    clip = w.normalise(birdjepa.audio.clip(audio[0], start_s=float(out["start_s"][1]),
                                           duration_s=2.0))
    one = inference.encode(inference.with_pool(encoder, "cls"), [(clip[None], np.zeros(1),
                                                          np.zeros(1))], ("cls",), batch_size=1)
    np.testing.assert_allclose(out["emb_cls"][1], one["cls"][0], atol=1e-5)
    # A path decodes like its bytes (audio.decode/clip take paths too).
    path = tmp_path / "rec.bin"
    path.write_bytes(audio[0])
    np.testing.assert_array_equal(birdjepa.audio.decode(path)[0],
                                  birdjepa.audio.decode(audio[0])[0])
    by_path = birdjepa.embeddings(encoder, str(path), window_s=2.0, hop_s=1.5, pool="cls")
    np.testing.assert_array_equal(by_path["emb_cls"], out["emb_cls"])
    # (wave, sr): resampled whole then cut; the same recording, so close to the bytes' path.
    wave, sr = birdjepa.audio.decode(audio[0])
    arr = birdjepa.embeddings(encoder, (wave, sr), window_s=2.0, hop_s=1.5, pool="cls")
    assert arr["emb_cls"].shape == out["emb_cls"].shape
    assert np.corrcoef(arr["emb_cls"].ravel(), out["emb_cls"].ravel())[0, 1] > 0.99
    # Whole shard directories: every recording tiled, rows in order; npz and Arrow output.
    tiles = birdjepa.embeddings(encoder, corpus, pool="mean", out=tmp_path / "e.npz")
    assert set(np.unique(tiles["row"])) == set(range(6))
    assert (np.diff(tiles["row"]) >= 0).all() and len(tiles["row"]) > 6
    with np.load(tmp_path / "e.npz") as z:
        np.testing.assert_array_equal(z["emb_mean"], tiles["emb_mean"])
    inference.write(tiles, tmp_path / "e.arrow")
    assert (tmp_path / "e.arrow").stat().st_size > 0
    with pytest.raises(ValueError, match="pool: expected values in"):
        birdjepa.embeddings(encoder, audio[0], pool="max")


def test_datasets_source_and_multilabel_column(tmp_path, encoder):
    datasets = pytest.importorskip("datasets")
    rec = birdjepa.demo_data.write(tmp_path / "src", n_recordings=3, n_shards=1, min_s=5.0,
                                   max_s=5.0, workers=1, seed=4)
    audio = table.audio_bytes(table.read(rec["out_dir"], ["audio"]))
    names = ["a", "b", "c", "d"]
    feats = datasets.Features({
        # The Audio feature's encoder needs torchcodec; its storage is this struct.
        "audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
        "ebird_code_multilabel": datasets.Sequence(datasets.ClassLabel(names=names)),
    })
    ds = datasets.Dataset.from_dict(
        {"audio": [{"bytes": b, "path": None} for b in audio],
         "ebird_code_multilabel": [[0, 2], [], [3]]}, features=feats)
    ds.save_to_disk(str(tmp_path / "ds"))
    loaded = datasets.load_from_disk(str(tmp_path / "ds"))
    for source in (loaded, tmp_path / "ds"):
        y = table.multi_hot(table.read(source, ["ebird_code_multilabel"]),
                            "ebird_code_multilabel", 4)
        np.testing.assert_array_equal(y, [[1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1]])
        assert table.class_names(source, "ebird_code_multilabel") == names
    a = birdjepa.embeddings(encoder, loaded, centre=True)
    b = birdjepa.embeddings(encoder, tmp_path / "ds", centre=True)
    np.testing.assert_array_equal(a["emb_mean"], b["emb_mean"])
    # An in-memory Dataset (no Arrow files for the loader) goes through the per-window path.
    assert not ds.cache_files
    c = birdjepa.embeddings(encoder, ds, centre=True)
    np.testing.assert_allclose(c["emb_mean"], a["emb_mean"], atol=1e-4)
    np.testing.assert_array_equal(c["row"], a["row"])
    assert a["emb_mean"].shape == (3, 32)
