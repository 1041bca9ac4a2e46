"""The demo corpus: datasets-compatible format, mixture, determinism and learnable species."""

import collections
import dataclasses
import io
import json
import pathlib

import datasets
import numpy as np
import pyarrow as pa
import pytest
import soundfile as sf

import birdjepa.demo_data as demo_data
import birdjepa.demo_data.__main__
from birdjepa.common.outputs import LEDGER

N_RECORDINGS = 36
N_SHARDS = 3
KW = {"n_recordings": N_RECORDINGS, "n_shards": N_SHARDS, "seed": 1, "min_s": 5.0, "max_s": 8.0}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "corpus"
    summary = demo_data.write(out, workers=1, **KW)
    rows = []
    for path in summary["shards"]:
        rows += pa.ipc.open_stream(path).read_all().to_pylist()
    return out, summary, rows


def test_files_and_summary(corpus):
    out, summary, rows = corpus
    names = [f"data-{i:05d}-of-{N_SHARDS:05d}.arrow" for i in range(N_SHARDS)]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*names, "dataset_info.json", "state.json", LEDGER]  # the ledger: what --overwrite may
    )                                                       # replace (issue 47 item 1)
    assert [pathlib.Path(p).name for p in summary["shards"]] == names
    assert summary["n_recordings"] == len(rows) == N_RECORDINGS
    assert summary["rows_per_shard"] == [12, 12, 12]
    assert summary["species"] == [s.code for s in demo_data.SPECIES]
    assert len(set(summary["species"])) == len(demo_data.SPECIES) >= 10
    assert sum(summary["codec_counts"].values()) == N_RECORDINGS
    assert summary["total_bytes"] == sum(pathlib.Path(p).stat().st_size for p in summary["shards"])
    # Nothing left behind next to the corpus by the atomic write.
    assert [p.name for p in out.parent.iterdir()] == ["corpus"]


def test_arrow_stream_schema_and_metadata(corpus):
    out, summary, _ = corpus
    for path, n in zip(summary["shards"], summary["rows_per_shard"], strict=True):
        reader = pa.ipc.open_stream(path)  # a stream, not the IPC file format
        table = reader.read_all()
        assert table.num_rows == n
        assert table.schema.field("audio").type == pa.struct(
            [("bytes", pa.binary()), ("path", pa.string())]
        )
        assert table.schema.field("label").type == pa.int64()
        meta = json.loads(table.schema.metadata[b"huggingface"])
        feats = meta["info"]["features"]
        assert feats["audio"] == {"decode": False, "_type": "Audio"}
        assert feats["label"] == {"names": summary["species"], "_type": "ClassLabel"}
        assert list(feats) == table.schema.names


def test_datasets_reads_shards_and_directory(corpus):
    out, summary, rows = corpus
    shard = datasets.Dataset.from_file(summary["shards"][1])
    assert isinstance(shard.features["audio"], datasets.Audio)
    assert shard.features["audio"].decode is False
    assert isinstance(shard.features["label"], datasets.ClassLabel)
    assert shard.features["label"].names == summary["species"]
    assert len(shard) == summary["rows_per_shard"][1]

    ds = datasets.load_from_disk(str(out))
    assert len(ds) == N_RECORDINGS
    assert ds.features == shard.features
    assert ds["label"] == [r["label"] for r in rows]
    row = ds[7]
    assert row["species"] == ds.features["label"].int2str(row["label"])
    x, sr = sf.read(io.BytesIO(row["audio"]["bytes"]))
    assert sr == row["sample_rate"] and len(x) == round(row["duration_s"] * sr)


def test_same_layout_as_datasets_save_to_disk(corpus, tmp_path):
    """Re-saving with `datasets` itself gives the same schema, metadata and JSON files."""
    out, summary, _ = corpus
    resaved = tmp_path / "resaved"
    datasets.load_from_disk(str(out)).save_to_disk(str(resaved), num_shards=N_SHARDS)
    for path in summary["shards"]:
        ours = pa.ipc.open_stream(path)
        theirs = pa.ipc.open_stream(resaved / pathlib.Path(path).name)
        assert ours.schema.equals(theirs.schema, check_metadata=True)
        assert ours.read_all().equals(theirs.read_all())
    ours_state = json.loads((out / "state.json").read_text())
    theirs_state = json.loads((resaved / "state.json").read_text())
    assert ours_state.keys() == theirs_state.keys()
    assert ours_state["_data_files"] == theirs_state["_data_files"]
    ours_info = json.loads((out / "dataset_info.json").read_text())
    theirs_info = json.loads((resaved / "dataset_info.json").read_text())
    assert ours_info["features"] == theirs_info["features"]


def test_labels_balanced_and_shuffled(corpus):
    _, summary, rows = corpus
    labels = [r["label"] for r in rows]
    n_species = len(demo_data.SPECIES)
    assert all(isinstance(v, int) and 0 <= v < n_species for v in labels)
    counts = collections.Counter(labels)
    assert set(counts) == set(range(n_species))
    assert max(counts.values()) - min(counts.values()) <= 1
    assert summary["label_counts"] == [counts[k] for k in range(n_species)]
    assert labels != sorted(labels)
    start = 0
    for n in summary["rows_per_shard"]:
        # Not species-sorted: every shard mixes many species.
        assert len(set(labels[start : start + n])) >= n_species // 3
        start += n
    for r in rows:
        sp = demo_data.SPECIES[r["label"]]
        assert (r["species"], r["common_name"]) == (sp.code, sp.name)


def test_codec_rate_channel_mixture_matches_the_bytes(corpus):
    _, summary, rows = corpus
    seen = collections.Counter()
    for r in rows:
        info = sf.info(io.BytesIO(r["audio"]["bytes"]))
        assert info.samplerate == r["sample_rate"]
        assert info.channels == r["channels"]
        assert info.subtype == r["subtype"]
        assert r["audio"]["path"].endswith("." + r["codec"])
        assert info.format == {"ogg": "OGG", "mp3": "MP3", "flac": "FLAC", "wav": "WAV"}[r["codec"]]
        seen[(info.format, info.subtype)] += 1
    assert set(seen) == {
        ("OGG", "VORBIS"),
        ("MP3", "MPEG_LAYER_III"),
        ("FLAC", "PCM_16"),
        ("WAV", "PCM_16"),
        ("WAV", "FLOAT"),
    }
    assert {r["sample_rate"] for r in rows} == {22050, 44100, 48000}
    assert {r["channels"] for r in rows} == {1, 2}
    assert sorted(seen.values()) == sorted(summary["codec_counts"].values())


def test_every_file_decodes_to_its_duration(corpus):
    for r in corpus[2]:
        assert KW["min_s"] - 1e-3 <= r["duration_s"] <= KW["max_s"] + 1e-3
        x, sr = sf.read(io.BytesIO(r["audio"]["bytes"]), dtype="float32", always_2d=True)
        assert x.shape == (round(r["duration_s"] * sr), r["channels"])
        assert np.all(np.isfinite(x))
        peak = np.abs(x).max()
        assert 0.1 < peak <= 1.0, (r["recording_id"], peak)


def test_deterministic_whatever_the_worker_count(tmp_path):
    small = {**KW, "n_recordings": 12, "n_shards": 2, "min_s": 3.0, "max_s": 4.0}
    one = demo_data.write(tmp_path / "one", workers=1, **small)
    two = demo_data.write(tmp_path / "two", workers=2, **small)
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "two").iterdir())
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert one["total_bytes"] == two["total_bytes"]
    # Another seed gives another recording.
    plan = demo_data.plan_corpus(1, seed=1, min_s=5.0, max_s=5.0)[0]
    other = dataclasses.replace(plan, seed=2)
    assert not np.array_equal(demo_data.synthesize(plan), demo_data.synthesize(other))
    assert np.array_equal(demo_data.synthesize(plan), demo_data.synthesize(plan))


def test_encode_is_deterministic_for_ogg_and_float_wav():
    """libsndfile writes a random Ogg serial number and a wall-clock WAV PEAK timestamp."""
    x = np.random.default_rng(0).uniform(-0.5, 0.5, (30000, 2)).astype(np.float32)
    for codec in demo_data.CODECS:
        a = demo_data.encode(x, 22050, codec, serial=7)
        b = demo_data.encode(x, 22050, codec, serial=7)
        assert a == b, codec
        y, sr = sf.read(io.BytesIO(a), dtype="float32")
        assert y.shape == x.shape and sr == 22050
    ogg = demo_data.encode(x, 22050, "ogg", serial=0x01020304)
    assert ogg[14:18] == bytes([4, 3, 2, 1])


def _band_features(data: bytes) -> tuple[np.ndarray, float]:
    """Mean spectrum (24 log bands, 0.5-10 kHz, level removed) of the loudest frames, and its
    spectral centroid."""
    x, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    n = 1024
    frames = np.lib.stride_tricks.sliding_window_view(x[:, 0], n)[:: n // 2] * np.hanning(n)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    f = np.fft.rfftfreq(n, 1 / sr)
    band = (f >= 500) & (f < 10000)
    energy = power[:, band].sum(1)
    spec = power[energy >= np.quantile(energy, 0.8)].mean(0)
    edges = np.geomspace(500, 10000, 25)
    bands = np.log(
        [
            spec[(f >= lo) & (f < hi)].mean() + 1e-12
            for lo, hi in zip(edges[:-1], edges[1:], strict=True)
        ]
    )
    centroid = float((spec[band] * f[band]).sum() / spec[band].sum())
    return bands - bands.mean(), centroid


def test_species_differ_spectrally(corpus):
    rows = corpus[2]
    feats, cents = zip(*(_band_features(r["audio"]["bytes"]) for r in rows), strict=True)
    feats, cents = np.array(feats), np.array(cents)
    labels = np.array([r["label"] for r in rows])
    n_species = len(demo_data.SPECIES)
    # Leave-one-out nearest class mean on the band spectrum: chance would be 1/12.
    hits = 0
    for i in range(len(rows)):
        rest = np.arange(len(rows)) != i
        means = np.array([feats[rest & (labels == k)].mean(0) for k in range(n_species)])
        hits += int(np.argmin(((means - feats[i]) ** 2).sum(1)) == labels[i])
    assert hits / len(rows) >= 0.7
    # Mean spectral centroid per species: spread between species >> spread within.
    by_species = [cents[labels == k] for k in range(n_species)]
    means = np.array([c.mean() for c in by_species])
    within = np.mean([c.var() for c in by_species])
    assert means.var() / within > 10
    code = [s.code for s in demo_data.SPECIES]
    centroid = dict(zip(code, means, strict=True))
    assert centroid["hisee1"] > centroid["slatri1"] > centroid["rufchi1"] > centroid["lowcoo1"]


def test_song_fills_most_windows_and_snr_is_as_drawn():
    plans = demo_data.plan_corpus(12, seed=3, min_s=20.0, max_s=30.0)
    assert sorted(p.label for p in plans) == list(range(12))
    covered = []
    for plan in plans:
        stems = demo_data.synthesize(plan, stems=True)
        song, noise = stems["song"].astype(np.float64), stems["noise"].astype(np.float64)
        assert song.shape == noise.shape == (plan.n_frames,)
        hop = plan.sample_rate // 100  # 10 ms frames
        rms = np.sqrt((song[: len(song) // hop * hop].reshape(-1, hop) ** 2).mean(1))
        active = rms > 0.01 * rms.max()
        # Seconds of song in each 5 s window, windows 1 s apart.
        per_window = np.lib.stride_tricks.sliding_window_view(active, 500)[::100].sum(1) / 100
        covered += list(per_window >= 0.25)
        snr = 10 * np.log10((song[song != 0] ** 2).mean() / (noise**2).mean())
        assert 3.0 <= stems["snr_db"] <= 20.0
        assert abs(snr - stems["snr_db"]) < 0.5
        assert np.abs(stems["background"]).max() < np.abs(song).max()
    assert np.mean(covered) >= 0.9


def test_refuses_to_overwrite_unless_asked(tmp_path):
    out = tmp_path / "c"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    small = {"n_recordings": 2, "n_shards": 1, "min_s": 1.0, "max_s": 1.5, "workers": 1}
    with pytest.raises(FileExistsError, match=r"exists and is not empty; --overwrite "
                       r"\(overwrite=True\) replaces an earlier demo corpus there"):
        demo_data.write(out, **small)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    with pytest.raises(ValueError):
        demo_data.write(tmp_path / "bad", n_recordings=2, n_shards=3)
    with pytest.raises(ValueError):
        demo_data.write(tmp_path / "bad", min_s=10.0, max_s=5.0)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("kind", ["hf", "soundscape", "birdset"])
def test_overwrite_replaces_only_an_earlier_demo_corpus(tmp_path, kind):
    """Issue 47 item 1: `--overwrite` deleted whatever `--out_dir` held (a user's own files:
    renamed aside and removed; with `--layout birdset` removed before anything was written).
    It replaces an earlier demo corpus, recognised by the ledger its writer leaves (every file
    listed, unchanged), and refuses a directory holding anything else, naming it."""
    import birdjepa.demo_data.birdset as birdset
    import birdjepa.demo_data.soundscape as soundscape

    out = tmp_path / "c"
    write = {
        "hf": lambda **kw: demo_data.write(out, n_recordings=2, n_shards=1, min_s=1.0,
                                           max_s=1.5, workers=1, **kw),
        "soundscape": lambda **kw: soundscape.write(out, n_soundscapes=1, n_segments=2, **kw),
        "birdset": lambda **kw: birdset.write(out, n_recordings=2, n_soundscapes=1,
                                              n_segments=2, min_s=1.0, max_s=1.5, **kw),
    }[kind]
    write()
    first = sorted(p.relative_to(out) for p in out.rglob("*"))
    write(overwrite=True)  # its own corpus: replaced
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == first
    some_dir = next(p for p in out.rglob("*") if p.is_dir()) if kind == "birdset" else out
    (some_dir / "notes.txt").write_text("a user's notes")
    with pytest.raises(FileExistsError, match=r"holds files the demo writer did not write "
                       r"\(e.g. .*notes.txt\); --overwrite replaces only an earlier demo corpus"):
        write(overwrite=True)
    assert (some_dir / "notes.txt").read_text() == "a user's notes"
    assert sorted(p.relative_to(out) for p in out.rglob("*") if p.name != "notes.txt") == first
    if kind == "hf":  # a corpus written before the ledger (`make demo` in an older checkout)
        (out / "notes.txt").unlink()
        (out / LEDGER).unlink()
        write(overwrite=True)
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == first


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["--out_dir", str(out), "--n-recordings", "3", "--n-shards", "2", "--seed", "4"]
    assert birdjepa.demo_data.__main__.main([*argv, "--min-s", "1", "--max-s", "2", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 3 recordings" in printed and "rufchi1" in printed
    assert len(list(out.glob("data-*-of-00002.arrow"))) == 2
    assert birdjepa.demo_data.__main__.main([*argv]) == 2  # exists: refused
