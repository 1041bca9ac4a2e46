"""Issue 23 items 7 and 11: `embed`'s and `birdjepa.audio`'s input conventions are explicit, and
one bad recording does not abort sliding-window embedding."""

import io
import warnings

import jax
import numpy as np
import pyarrow as pa
import pytest
import soundfile

import birdjepa
import birdjepa.audio
import birdjepa.config.architecture
import birdjepa.model
import birdjepa.models.inference as inference

SR = 32000


@pytest.fixture(scope="module")
def encoder():
    cfg = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(
        width=32, depth=1, n_heads=2, n_registers=1, patch=(32, 32), pool="mean"))
    return birdjepa.model.ViT(cfg, n_frames=512, n_mels=128, key=jax.random.key(0))


def tone(seconds: float, f: float = 1000.0) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32)


def test_as_mono_conventions():
    x = tone(0.5)
    stereo_nc = np.stack([x, 0.5 * x], axis=1)  # (n, channels)
    np.testing.assert_allclose(birdjepa.audio.as_mono(stereo_nc), 0.75 * x, rtol=1e-6)
    np.testing.assert_allclose(birdjepa.audio.as_mono(stereo_nc.T, channels_first=True),
                               0.75 * x, rtol=1e-6)
    with pytest.raises(birdjepa.BadArgumentError,
                       match=r"expected \(n, channels\), got shape \(2, 16000\), more channels "
                             r"than samples; pass channels_first=True"):
        birdjepa.audio.as_mono(stereo_nc.T)
    i16 = np.round(x * 32767).astype(np.int16)
    np.testing.assert_allclose(birdjepa.audio.as_mono(i16), i16 / 32768.0, rtol=0, atol=1e-7)
    u8 = np.array([0, 128, 255], np.uint8)
    np.testing.assert_allclose(birdjepa.audio.as_mono(u8), [-1.0, 0.0, 127 / 128])
    for empty in (np.zeros(0, np.float32), np.zeros((0, 2), np.float32)):
        with pytest.raises(birdjepa.BadArgumentError, match="expected at least one sample"):
            birdjepa.audio.as_mono(empty)
    with pytest.raises(birdjepa.BadArgumentError, match="dtype complex64"):
        birdjepa.audio.as_mono(x.astype(np.complex64))
    with pytest.raises(birdjepa.BadArgumentError, match="expected at least one sample"):
        birdjepa.audio.fbank(np.zeros(0, np.float32))  # the same rule in birdjepa.audio
    np.testing.assert_array_equal(birdjepa.audio.fbank(i16), birdjepa.audio.fbank(i16 / 32768))


def test_embed_reads_arrays_by_the_convention(encoder):
    """Main averaged a (2, n) array over time (a 2-sample clip), used int16 at 32768x the float
    scale and embedded an empty array as one window of silence."""
    x = tone(5.0)
    ref = inference.embeddings(encoder, (x, SR))["emb_mean"]
    assert ref.shape == (1, 32)
    both = np.stack([x, x])  # (channels, n)
    np.testing.assert_allclose(inference.embeddings(encoder, (both, SR), channels_first=True)["emb_mean"],
                               ref, atol=1e-5)
    np.testing.assert_allclose(inference.embeddings(encoder, (both.T, SR))["emb_mean"], ref, atol=1e-5)
    with pytest.raises(birdjepa.BadArgumentError, match="channels_first=True"):
        inference.embeddings(encoder, (both, SR))
    i16 = np.round(x * 32767).astype(np.int16)  # the same tone at full scale 32768
    np.testing.assert_allclose(inference.embeddings(encoder, (i16, SR))["emb_mean"],
                               inference.embeddings(encoder, (i16 / 32768, SR))["emb_mean"], atol=1e-6)
    with pytest.raises(birdjepa.BadArgumentError, match="expected at least one sample"):
        inference.embeddings(encoder, (np.zeros(0, np.float32), SR))


def wav(seconds: float) -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, tone(seconds), SR, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def test_one_bad_recording_is_a_counted_skip_in_sliding_windows(encoder, tmp_path):
    """Item 11: main aborted the whole pass with `CorruptAudioError: corrupt audio: wave:
    truncated`, naming neither file nor row."""
    good = wav(6.0)
    rows = [good, good[:44] + b"\x00", good]  # row 1: a WAV header and no whole frame
    audio = pa.array([{"bytes": b, "path": f"{i}.wav"} for i, b in enumerate(rows)],
                     type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    path = tmp_path / "shard.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, pa.schema(
            [("audio", audio.type)])) as w:
        w.write_table(pa.table({"audio": audio}))
    with pytest.raises(birdjepa.AudioError):
        birdjepa.audio.decode(rows[1])  # the row is really bad: nothing in it decodes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = inference.embeddings(encoder, str(path), window_s=5.0, n_workers=1)
    assert sorted(set(out["row"].tolist())) == [0, 2]  # 2 windows each, row 1 skipped
    assert len(out["row"]) == 4
    msgs = [str(w.message) for w in caught if "embed: skipped" in str(w.message)]
    assert len(msgs) == 1 and "skipped 1 of 3 recording(s)" in msgs[0], msgs
    assert f"row 1 of {path}: EmptyAudioError" in msgs[0], msgs
