"""Encoding a waveform as ogg/vorbis, mp3, flac or wav bytes with soundfile, with the two
non-deterministic fields libsndfile writes pinned down (the Ogg stream serial, the WAV peak
chunk's timestamp), so the same call gives the same bytes."""

import io
import struct
import zlib

import numpy as np
import soundfile as sf

import birdjepa.demo_data.catalogue as catalogue

BLOCK_FRAMES = 65536
"""Frames per soundfile write call (one large Vorbis write segfaulted)."""

# ---------------------------------------------------------------------------------------------
# Encoding (with the two non-deterministic fields libsndfile writes pinned down)

_REVERSE_BITS = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def _ogg_crc(data: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04c11db7, MSB first, no init or final xor), via zlib.

    Ogg's CRC is zlib's with bits reflected and without the 0xffffffff pre/post conditioning;
    the conditioning's contribution is the CRC of as many zero bytes.
    """
    r = data.translate(_REVERSE_BITS)
    reflected = zlib.crc32(r) ^ zlib.crc32(bytes(len(r)))
    return int(f"{reflected:032b}"[::-1], 2)


def _fix_ogg_serial(data: bytes, serial: int) -> bytes:
    """Set every page's stream serial number (libsndfile draws a time-seeded one)."""
    buf = bytearray(data)
    pos = 0
    while pos < len(buf):
        if buf[pos : pos + 4] != b"OggS":
            raise ValueError(f"not an Ogg page at byte {pos}")
        n_segs = buf[pos + 26]
        body = sum(buf[pos + 27 : pos + 27 + n_segs])
        end = pos + 27 + n_segs + body
        struct.pack_into("<I", buf, pos + 14, serial)
        struct.pack_into("<I", buf, pos + 22, 0)
        struct.pack_into("<I", buf, pos + 22, _ogg_crc(bytes(buf[pos:end])))
        pos = end
    return bytes(buf)


def _fix_wav_peak(data: bytes) -> bytes:
    """Zero the timestamp of a WAV PEAK chunk (libsndfile writes the wall clock there)."""
    buf = bytearray(data)
    pos = 12
    while pos + 8 <= len(buf):
        cid = bytes(buf[pos : pos + 4])
        size = struct.unpack_from("<I", buf, pos + 4)[0]
        if cid == b"PEAK":
            struct.pack_into("<I", buf, pos + 12, 0)  # after the 4-byte version
        pos += 8 + size + (size & 1)
    return bytes(buf)


def encode(x: np.ndarray, sample_rate: int, codec: str, serial: int = 0) -> bytes:
    """Encode float32 (frames, channels) audio; the bytes depend only on the arguments."""
    fmt, subtype, _ = catalogue.CODECS[codec]
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", sample_rate, x.shape[1], format=fmt, subtype=subtype) as f:
        for i in range(0, len(x), BLOCK_FRAMES):
            f.write(x[i : i + BLOCK_FRAMES])
    data = buf.getvalue()
    if fmt == "OGG":
        data = _fix_ogg_serial(data, serial)
    elif fmt == "WAV":
        data = _fix_wav_peak(data)
    return data
