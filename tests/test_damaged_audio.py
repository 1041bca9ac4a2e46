"""Damaged audio yields what it holds (issue 36 item 1): a recording whose header claims more
than the file holds (a recorder whose battery died) gives every window up to the damage, with
one warning naming the file, where its data ends and why, in decode, the loader, embed and
predict; a window past the damage is dropped, one across it padded (`padded_s`)."""

import io
import warnings

import jax
import numpy as np
import pyarrow as pa
import pytest
import soundfile as sf

import birdjepa
import birdjepa.audio
import birdjepa.data
import birdjepa.model
import birdjepa.models.features as features
import birdjepa.models.inference as inference

SR, SECONDS, KEEP = 48000, 20.0, 0.9


def _encode(x: np.ndarray, fmt: str, subtype: str) -> bytes:
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", SR, 1, format=fmt, subtype=subtype) as f:
        for i in range(0, len(x), 65536):
            f.write(x[i:i + 65536])
    return buf.getvalue()


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """A 20 s 48 kHz WAV and Ogg/Vorbis cut at 90 % of their bytes, and an intact WAV:
    {name: (path, bytes, the intact decode's seconds)}."""
    root = tmp_path_factory.mktemp("damaged")
    rng = np.random.default_rng(0)
    t = np.arange(int(SR * SECONDS)) / SR
    x = (0.3 * np.sin(2 * np.pi * 2000 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32)
    out = {}
    for name, fmt, sub in (("cut.wav", "WAV", "PCM_16"), ("cut.ogg", "OGG", "VORBIS"),
                           ("whole.wav", "WAV", "PCM_16")):
        data = _encode(x, fmt, sub)
        if name.startswith("cut"):
            data = data[:int(len(data) * KEEP)]
        path = root / name
        path.write_bytes(data)
        out[name] = (str(path), data)
    return out


def _caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(m.message) for m in w if issubclass(m.category, RuntimeWarning)]


def test_decode_gives_what_the_file_holds_and_says_where_it_stops(recordings):
    whole, _ = birdjepa.audio.decode(recordings["whole.wav"][0])
    for name in ("cut.wav", "cut.ogg"):
        path = recordings[name][0]
        (wave, sr), caught = _caught(lambda: birdjepa.audio.decode(path))  # noqa: B023
        assert sr == SR and 0.85 * SECONDS < len(wave) / sr < KEEP * SECONDS + 0.1
        assert len(caught) == 1 and path in caught[0] and "the data ends at" in caught[0] \
            and "truncated" in caught[0], caught
        if name == "cut.wav":  # PCM: the samples are the intact file's, to the damage
            np.testing.assert_array_equal(wave, whole[:len(wave)])
        # A window before the damage is whole and silent; one after it is empty audio.
        (w, _), caught = _caught(lambda: birdjepa.audio.decode(path, start_s=2.0,  # noqa: B023
                                                               duration_s=5.0))
        assert len(w) == 5 * SR and caught == []
        with pytest.raises(birdjepa.EmptyAudioError, match="after the data ends at"):
            birdjepa.audio.decode(path, start_s=19.0, duration_s=1.0)


def test_embed_and_predict_keep_the_windows_up_to_the_damage(recordings):
    """The windows embed and predict compute (birdjepa.models.inference, as their command
    lines call it): up to the damage, the last one padded by what is missing (`durations`
    becomes where the data ends: the tables' duration_s, end_s and padded_s), none after it, one
    warning naming the damaged recordings; the same encoder embeds them."""
    cfg = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(
        width=32, depth=1, n_heads=2, n_registers=1, patch=(32, 32), pool="mean"))
    encoder = birdjepa.model.ViT(cfg, n_frames=512, n_mels=128, key=jax.random.key(0))
    paths = [recordings[n][0] for n in ("cut.wav", "whole.wav", "cut.ogg")]
    w = features.Windows(window_s=5.0, hop_s=5.0, n_frames=512)
    durations = {}
    batches, caught = _caught(lambda: list(features.features(paths, w, batch_size=8,
                                                               durations=durations)))
    assert len(caught) == 1 and "2 recording(s) damaged" in caught[0] and \
        "the data ends at" in caught[0], caught
    rows, starts = (np.concatenate([b[i] for b in batches]) for i in (1, 2))
    for row, damaged in enumerate((True, False, True)):
        assert starts[rows == row].tolist() == [0.0, 5.0, 10.0, 15.0], (row, starts)
        padded = max(15.0 + 5.0 - durations[row], 0.0)
        assert (1.0 < padded < 3.5) if damaged else padded == 0.0, (row, durations[row])
    out = inference.encode(encoder, iter(batches), ("mean",), batch_size=8)
    assert out["mean"].shape == (12, 32) and np.isfinite(out["mean"]).all()


def test_the_loader_crops_inside_what_a_damaged_recording_holds(recordings, tmp_path):
    audio_t = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = [{"bytes": recordings[n][1], "path": n} for n in ("cut.wav", "cut.ogg")]
    shard = tmp_path / "data.arrow"
    table = pa.table({"audio": pa.array(rows, audio_t), "label": pa.array([0, 1], pa.int64())})
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    for mode, n_batches, views in (("train", 6, dict(view_window_s=6.0, n_views=2)),
                                   ("eval", 1, {})):
        def read(mode=mode, n_batches=n_batches, views=views):
            with birdjepa.data.Loader(str(shard), mode=mode, batch_size=2, n_workers=1,
                                      label_column=None, **views) as loader:
                it = iter(loader)
                return [next(it) for _ in range(n_batches)], loader.stats()
        (batches, stats), caught = _caught(read)
        assert all(b["valid"].all() for b in batches), mode
        starts = np.concatenate([np.ravel(b["start_s"]) for b in batches])
        assert ((starts >= 0) & (starts + 5.12 <= KEEP * SECONDS)).all(), starts
        assert stats["failures"] == 0 and stats["damaged"] >= 1
        # One warning per recording, however often it is drawn, once a crop meets the damage:
        # always for the Ogg (no length in its header: decoded whole), for the WAV when a
        # random crop reached past its data (it was then placed again inside).
        warned = [c.split(" row ")[1][0] for c in caught]
        assert "1" in warned and len(warned) == len(set(warned)) and set(warned) <= {"0", "1"}
        assert all("the data ends at" in c for c in caught), caught


def _wav_with_data_to(tmp_path, header_s: float, data_s: float) -> str:
    """A 48 kHz 16-bit WAV whose header says `header_s` seconds and whose data ends at
    `data_s` (a recorder card pulled mid-write)."""
    t = np.arange(int(SR * header_s)) / SR
    data = _encode((0.3 * np.sin(2 * np.pi * 1500 * t)).astype(np.float32), "WAV", "PCM_16")
    path = tmp_path / f"to-{data_s}.wav"
    path.write_bytes(data[:44 + 2 * int(round(SR * data_s))])
    return str(path)


def test_no_window_starts_where_the_data_has_ended(tmp_path):
    """Issue 47 item 8: header 10 s, data to 4.99975 s: the window at 5.0 s was pure padding,
    with no error; embed kept it (start_s 5.0, end_s 4.99975, padded_s 5.00025 > the window),
    predict wrote detections from padding alone, its Raven table End Time < Begin Time. A
    window that starts at or after where the data ends is no window."""
    path = _wav_with_data_to(tmp_path, 10.0, 4.99975)
    w = features.Windows(window_s=5.0, hop_s=5.0, n_frames=512)
    durations = {}
    batches, caught = _caught(lambda: list(features.features([path], w, batch_size=8,
                                                               durations=durations)))
    starts = np.concatenate([b[2] for b in batches])
    assert starts.tolist() == [0.0], starts
    assert abs(durations[0] - 4.99975) < 1e-4 and any("the data ends at" in m for m in caught)


def test_centre_is_the_centre_of_the_data_a_truncated_file_holds(tmp_path):
    """Item 9: `--centre` on a truncated file took the centre of the header's length (half the
    window past the data); a file whose data ends at 1 s gave no row. The loader's eval crop
    and embed agree on the data's length."""
    w = features.Windows(window_s=2.0, centre=True, n_frames=512)
    for data_s, want in ((6.0, 2.0), (1.0, 0.0)):  # header 20 s: centre 9 s before
        path = _wav_with_data_to(tmp_path, 20.0, data_s)
        durations = {}
        batches, _ = _caught(lambda: list(features.features(  # noqa: B023
            [path], w, batch_size=8, durations=durations)))  # noqa: B023
        starts = np.concatenate([b[2] for b in batches]) if batches else np.array([])
        assert starts.tolist() == [want], (data_s, starts)
