"""Mutation fuzzing of `birdjepa.audio.decode`/`clip` over real-format seed files.

Seeds are written with soundfile (WAV int16/int24/float32/float64, FLAC, Ogg/Vorbis, MP3, mono
and stereo, several rates); each case applies one to three mutations (bit flips, byte runs,
truncation, extreme header fields, huge or non-finite float samples, spliced chunks) and runs
`info`, `decode` and `clip` on the result. A case passes when every call either returns finite
values or raises a `birdjepa.AudioError`; anything else (another exception, a pyo3
PanicException, non-finite output) is a failure. A signal kills the process, which the caller
sees as a negative exit status. The summary (JSON on stdout) includes peak-RSS growth
(VmHWM after the seeds warmed up -> end) and the slowest case.

    python tests/audio_fuzz.py --cases 2000 --seed 0        # what tests/test_audio_fuzz.py runs
    python tests/audio_fuzz.py --cases 100000 --seed 1      # the longer manual run (docs/issues/006)

Deterministic: the same seed gives the same cases.
"""

import argparse
import io
import json
import struct
import sys
import time

import numpy as np
import soundfile as sf

import birdjepa
import birdjepa.audio as audio

# name: (format, subtype, sample rate, channels)
SEEDS = {
    "wav16": ("WAV", "PCM_16", 22050, 1),
    "wav24": ("WAV", "PCM_24", 48000, 2),
    "wavf": ("WAV", "FLOAT", 44100, 1),
    "wavd": ("WAV", "DOUBLE", 16000, 1),
    "flac": ("FLAC", "PCM_16", 44100, 2),
    "ogg": ("OGG", "VORBIS", 32000, 1),
    "mp3": ("MP3", "MPEG_LAYER_III", 44100, 1),
}
SECONDS = 1.5
CLIP_S = 1.0
# Values a float sample may be corrupted into (one exponent bit flip turns 0.3 into ~1e38).
SPECIALS_F32 = [3e38, -3e38, 1e30, 1e20, 1e10, 65537.0, 1e-45, np.inf, -np.inf, np.nan]
SPECIALS_F64 = [1e300, -1e300, 1e39, *SPECIALS_F32]
EXTREME_U32 = [0, 1, 2, 3, 999, 1000, 768_000, 768_001, 2**16 - 1, 2**31, 2**32 - 1]


def seed_files() -> dict[str, bytes]:
    rng = np.random.default_rng(12345)
    out = {}
    for name, (fmt, subtype, sr, ch) in SEEDS.items():
        t = np.arange(int(SECONDS * sr)) / sr
        x = 0.3 * np.sin(2 * np.pi * (300 + 2000 * t) * t) + 0.05 * rng.standard_normal(len(t))
        x = np.stack([x] * ch, axis=1) if ch > 1 else x
        buf = io.BytesIO()
        sf.write(buf, x.astype(np.float32), sr, subtype=subtype, format=fmt)
        out[name] = buf.getvalue()
    return out


def wav_chunks(d: bytes) -> dict[bytes, int]:
    """Offsets of the payloads of a RIFF file's chunks ('fmt ', 'data', ...)."""
    found, at = {}, 12
    while at + 8 <= len(d):
        cid, size = d[at:at + 4], struct.unpack_from("<I", d, at + 4)[0]
        found.setdefault(cid, at + 8)
        at += 8 + size + (size & 1)
    return found


def put(d: bytearray, at: int, fmt: str, v: int) -> None:
    size = struct.calcsize(fmt)
    if 0 <= at and at + size <= len(d):
        struct.pack_into(fmt, d, at, v % (1 << (8 * size)))


def mutate_header(name: str, d: bytearray, rng) -> str:
    v = int(rng.choice(EXTREME_U32)) if rng.random() < 0.8 else int(rng.integers(0, 2**32))
    if len(d) < 32:  # already truncated below any header field we know
        return f"{name} header: too short ({len(d)} bytes)"
    if name.startswith("wav"):
        c = wav_chunks(bytes(d))
        fmt_at, data_at = c.get(b"fmt ", 20), c.get(b"data", 44)
        field, off, f = [
            ("format", 0, "<H"), ("channels", 2, "<H"), ("rate", 4, "<I"),
            ("byte_rate", 8, "<I"), ("block_align", 12, "<H"), ("bits", 14, "<H"),
            ("data_size", -4, "<I"), ("riff_size", None, "<I"),
        ][int(rng.integers(0, 8))]
        at = 4 if off is None else (data_at - 4 if off == -4 else fmt_at + off)
        put(d, at, f, v)
        return f"wav {field}={v}"
    if name == "flac":
        # STREAMINFO after "fLaC" + 4-byte block header: block sizes (2+2), frame sizes (3+3),
        # then 20 bits rate, 3 bits channels-1, 5 bits bits-1, 36 bits total samples.
        si = 8
        which = int(rng.integers(0, 4))
        if which == 0:
            bits = int.from_bytes(d[si + 10:si + 18], "big")
            rate = v & 0xFFFFF
            bits = (bits & ~(0xFFFFF << 44)) | (rate << 44)
            d[si + 10:si + 18] = bits.to_bytes(8, "big")
            return f"flac rate={rate}"
        if which == 1:
            bits = int.from_bytes(d[si + 10:si + 18], "big")
            total = v * int(rng.integers(1, 17)) & ((1 << 36) - 1)
            bits = (bits & ~((1 << 36) - 1)) | total
            d[si + 10:si + 18] = bits.to_bytes(8, "big")
            return f"flac total_samples={total}"
        if which == 2:
            put(d, si + int(rng.choice([0, 2])), ">H", v)
            return f"flac block_size={v & 0xFFFF}"
        d[si + 12] = int(rng.integers(0, 256))
        return f"flac channels/bits byte={d[si + 12]}"
    # Ogg and MP3: an extreme little- or big-endian field somewhere in the first 64 bytes.
    at = int(rng.integers(0, min(64, len(d) - 4)))
    f = str(rng.choice(["<I", ">I", "<H", ">H"]))
    put(d, at, f, v)
    return f"{name} {f}@{at}={v}"


def mutate_floats(name: str, d: bytearray, rng) -> str:
    c = wav_chunks(bytes(d))
    data_at = c.get(b"data", 44)
    width = 4 if name == "wavf" else 8
    n = (len(d) - data_at) // width
    if n <= 0:
        return "floats: no data"
    v = float(rng.choice(SPECIALS_F32 if width == 4 else SPECIALS_F64))
    run = int(rng.choice([1, 1, 3, 100, 5000]))
    at = int(rng.integers(0, n))
    f = "<f" if width == 4 else "<d"
    for i in range(at, min(n, at + run)):
        struct.pack_into(f, d, data_at + i * width, v)
    return f"floats {v:g} x{run} @{at}"


def mutate(name: str, data: bytes, rng) -> tuple[bytes, list[str]]:
    d = bytearray(data)
    what = []
    for _ in range(int(rng.choice([1, 1, 1, 2, 3]))):
        kind = int(rng.integers(0, 7 if name in ("wavf", "wavd") else 6))
        if kind == 0:
            k = int(rng.integers(1, 9))
            for _ in range(k):
                i = int(rng.integers(0, len(d)))
                d[i] ^= 1 << int(rng.integers(0, 8))
            what.append(f"flip {k} bits")
        elif kind == 1:
            n = int(rng.integers(1, 65))
            i = int(rng.integers(0, max(1, len(d) - n)))
            d[i:i + n] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            what.append(f"bytes {n}@{i}")
        elif kind == 2:
            cut = int(rng.integers(0, len(d)))
            del d[cut:]
            what.append(f"truncate {cut}")
        elif kind in (3, 4):
            what.append(mutate_header(name, d, rng))
        elif kind == 5:
            a, b = sorted(int(x) for x in rng.integers(0, len(d) + 1, 2))
            i = int(rng.integers(0, len(d) + 1))
            d[i:i] = d[a:b][:4096]
            what.append(f"splice {a}:{b} at {i}")
        else:
            what.append(mutate_floats(name, d, rng))
        if len(d) == 0:
            break
    return bytes(d), what


def vm(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def check_case(data: bytes, rng) -> tuple[str, float]:
    """Run info, decode and clip; returns (outcome, max |feature|). Raises on a failure."""
    outcome, biggest = [], 0.0
    try:
        audio.info(data)
        outcome.append("info:ok")
    except birdjepa.AudioError as e:
        outcome.append(f"info:{type(e).__name__}")
    try:
        wave, _ = audio.decode(data)
        if not np.isfinite(wave).all():
            raise AssertionError(f"decode returned {int((~np.isfinite(wave)).sum())} non-finite samples")
        outcome.append("decode:ok")
    except birdjepa.AudioError as e:
        outcome.append(f"decode:{type(e).__name__}")
    start = float(rng.choice([0.0, 0.0, 0.3, 1.0]))
    try:
        feats = audio.clip(data, start_s=start, duration_s=CLIP_S)
        if not np.isfinite(feats).all():
            raise AssertionError(f"clip returned {int((~np.isfinite(feats)).sum())} non-finite values")
        biggest = float(np.abs(feats).max()) if feats.size else 0.0
        outcome.append("clip:ok")
    except birdjepa.AudioError as e:
        outcome.append(f"clip:{type(e).__name__}")
    return " ".join(outcome), biggest


def run(n_cases: int, seed: int, max_failures: int = 20) -> dict:
    seeds = seed_files()
    names = list(seeds)
    for data in seeds.values():  # warm up: codecs, resamplers, fbank
        check_case(data, np.random.default_rng(0))
    hwm0, rss0 = vm("VmHWM"), vm("VmRSS")
    rng = np.random.default_rng(seed)
    failures, outcomes = [], {}
    slowest = (0.0, "")
    biggest = 0.0
    t0 = time.perf_counter()
    for case in range(n_cases):
        name = names[case % len(names)]
        data, what = mutate(name, seeds[name], rng)
        t = time.perf_counter()
        try:
            outcome, big = check_case(data, rng)
            biggest = max(biggest, big)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # a PanicException is a BaseException
            if len(failures) < max_failures:
                failures.append({"case": case, "seed": name, "mutations": what,
                                 "error": f"{type(e).__name__}: {str(e)[:300]}"})
            else:
                failures.append({"case": case})
        dt = time.perf_counter() - t
        if dt > slowest[0]:
            slowest = (dt, f"case {case} {name} {what}")
    return {
        "cases": n_cases,
        "seed": seed,
        "seconds": round(time.perf_counter() - t0, 2),
        "n_failures": len(failures),
        "failures": failures[:max_failures],
        "slowest_case_s": round(slowest[0], 4),
        "slowest_case": slowest[1],
        "max_abs_feature": biggest,
        "hwm_growth_mb": round(vm("VmHWM") - hwm0, 1),
        "rss_growth_mb": round(vm("VmRSS") - rss0, 1),
        "outcomes": dict(sorted(outcomes.items(), key=lambda kv: -kv[1])[:15]),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    summary = run(a.cases, a.seed)
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 1 if summary["n_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
