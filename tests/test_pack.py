"""`python -m birdjepa.sources pack` resumes after a SIGKILL: finished shards are kept, the
partial one is redone, and the result is byte-identical to the files."""

import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest

import birdjepa.data
import birdjepa.data.pack
import birdjepa.data.pack_dst
import birdjepa.demo_data.birdset as birdset
import birdjepa.demo_data.catalogue as catalogue
import birdjepa.sources


def test_pack_resumes_after_sigkill(tmp_path):
    s = birdset.write(tmp_path / "bs", n_recordings=4, n_soundscapes=1, n_segments=1,
                      max_s=10.0)
    (path,) = birdjepa.data.resolve_shards(s["train"])
    rows = pa.ipc.open_stream(pa.memory_map(path)).read_all().to_pylist()
    many = [{**rows[i % 4], "filepath": f"row{i}"} for i in range(600)]  # files reused
    src = str(tmp_path / "src" / "data.arrow")
    os.makedirs(os.path.dirname(src))
    birdset.write_split(src, many, birdset.features([c.code for c in catalogue.SPECIES]))
    dst = tmp_path / "packed"
    cmd = [sys.executable, "-m", "birdjepa.sources", "pack", src, "--out_dir", str(dst), "--shard_mb", "2",
           "--workers", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
            f.endswith(".arrow") for f in (os.listdir(dst) if dst.exists() else [])):
        time.sleep(0.005)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    done = sorted(f for f in os.listdir(dst) if f.endswith(".arrow"))
    n_shards = len(birdjepa.data.pack.plan(birdjepa.data.pack.Source([src], "audio", "", None),
                                           int(2e6)))
    assert 1 <= len(done) < n_shards, (done, n_shards)
    assert not (dst / "state.json").exists()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"packed 600 rows into {n_shards} shards" in out and \
        f"{len(done)} already done" in out, out
    assert not [f for f in os.listdir(dst) if f.endswith(".tmp")], os.listdir(dst)
    got = [r for f in birdjepa.data.resolve_shards(str(dst))
           for r in pa.ipc.open_stream(pa.memory_map(f)).read_all().to_pylist()]
    assert [r["filepath"] for r in got] == [r["filepath"] for r in many]
    for r, g in zip(many, got, strict=True):
        with open(r["audio"]["path"], "rb") as f:
            assert g["audio"]["bytes"] == f.read()


@pytest.fixture(scope="module")
def small_src(tmp_path_factory):
    """A path-only source shard of 300 rows (4 recordings reused) in its own directory."""
    root = tmp_path_factory.mktemp("pack-src")
    s = birdset.write(root / "bs", n_recordings=4, n_soundscapes=1, n_segments=1, max_s=10.0)
    (path,) = birdjepa.data.resolve_shards(s["train"])
    rows = pa.ipc.open_stream(pa.memory_map(path)).read_all().to_pylist()
    many = [{**rows[i % 4], "filepath": f"row{i}"} for i in range(300)]
    src = root / "src" / "data.arrow"
    src.parent.mkdir()
    birdset.write_split(str(src), many, birdset.features([c.code for c in catalogue.SPECIES]))
    return src


def _pack_cli(src, dst, capsys, *extra) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = birdjepa.sources.main(["pack", str(src), "--out_dir", str(dst), "--shard_mb", "0.5",
                                "--workers", "1", *extra])
    return rc, capsys.readouterr().err.strip().splitlines()


def _rows(dst) -> list:
    return [r["filepath"] for f in birdjepa.data.resolve_shards(str(dst))
            for r in pa.ipc.open_stream(pa.memory_map(f)).read_all().to_pylist()]


def test_pack_refuses_a_destination_at_inside_or_around_the_source(small_src, capsys):
    """Issue 30 item 2: packing into the source directory reported "already done", exit 0."""
    for dst, rel in ((small_src.parent, "is the source"), (small_src.parent / "packed",
                                                            "is inside the source"),
                     (small_src.parent.parent, "contains the source")):
        rc, err = _pack_cli(small_src, dst, capsys)
        assert rc == 2 and len(err) == 1 and f"which {rel} directory" in err[0], err
    assert not (small_src.parent / "packed").exists()
    assert sorted(os.listdir(small_src.parent)) == ["data.arrow"]


def test_pack_refuses_files_it_did_not_write_and_a_second_pack(small_src, tmp_path, capsys):
    """Issue 30 item 2: an unrelated same-named shard in DST was kept as the result; two packs
    into one DST had no lock (a pyarrow traceback)."""
    dst = tmp_path / "dst"
    dst.mkdir()
    shutil.copy(small_src, dst / "data-00000-of-00001.arrow")  # someone else's shard
    rc, err = _pack_cli(small_src, dst, capsys)
    assert rc == 2 and len(err) == 1 and "1 file(s) pack did not write" in err[0], err
    other = tmp_path / "other"
    other.mkdir()
    fd = os.open(other / birdjepa.data.pack_dst.LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a pack in flight
        rc, err = _pack_cli(small_src, other, capsys)
        assert rc == 2 and len(err) == 1 and "expected no other pack writing into" in err[0], err
    finally:
        os.close(fd)
    assert _pack_cli(small_src, other, capsys)[0] == 0


def test_a_shard_counts_as_done_only_if_the_manifest_and_its_hash_say_so(small_src, tmp_path,
                                                                       capsys):
    dst = tmp_path / "dst"
    assert _pack_cli(small_src, dst, capsys)[0] == 0
    want = _rows(dst)
    shards = sorted(f for f in os.listdir(dst) if f.endswith(".arrow"))
    assert len(shards) >= 2 and len(want) == 300
    # the same row count, other content: another shard's bytes under the first one's name
    shutil.copy(dst / shards[1], dst / shards[0])
    rc, _ = _pack_cli(small_src, dst, capsys)
    assert rc == 0 and _rows(dst) == want
    src = birdjepa.data.pack.Source([str(small_src)], "audio", "", None)
    first = birdjepa.data.pack.plan(src, int(0.5e6))[0]
    assert birdjepa.data.pack_dst.Manifest(str(dst)).holds(str(dst), shards[0],
                                                            src.stamp(*first))


def test_a_source_rewritten_in_place_is_packed_again(small_src, tmp_path, capsys):
    """Issue 38 item 19: after a source audio file's content changed (same size) pack said
    "already done" and kept the old bytes."""
    rows = pa.ipc.open_stream(pa.memory_map(str(small_src))).read_all().to_pylist()
    audio = tmp_path / "audio"
    shutil.copytree(os.path.dirname(rows[0]["audio"]["path"]), audio)
    dst = tmp_path / "dst"
    rc, _ = _pack_cli(small_src, dst, capsys, "--path_map",
                      f"{os.path.dirname(rows[0]['audio']['path'])}={audio}")
    assert rc == 0
    target = audio / os.path.basename(rows[0]["audio"]["path"])
    old = target.read_bytes()
    new = old[:-64] + bytes(64)  # same size, other content (the last samples silenced)
    time.sleep(0.01)
    target.write_bytes(new)
    capsys.readouterr()
    rc = birdjepa.sources.main(["pack", str(small_src), "--out_dir", str(dst), "--shard_mb",
                                "0.5", "--workers", "1", "--path_map",
                                f"{os.path.dirname(rows[0]['audio']['path'])}={audio}"])
    out = capsys.readouterr().out
    assert rc == 0 and "0 already done" in out, out  # every shard holds row 0's recording
    got = [r for f in birdjepa.data.resolve_shards(str(dst))
           for r in pa.ipc.open_stream(pa.memory_map(f)).read_all().to_pylist()]
    assert got[0]["audio"]["bytes"] == new


def test_a_full_disk_while_the_manifest_is_written_leaves_no_temporary_file(
        small_src, tmp_path, capsys, monkeypatch):
    """Issue 38 item 23: a full disk while pack wrote its manifest left pack-manifest.json.tmp
    in 6 of 25 tmpfs sizes (the README says temporary files are removed)."""
    real = os.replace

    def full(a, b):  # rename(2) too fails with ENOSPC when the directory cannot grow
        if os.path.basename(b) == birdjepa.data.pack_dst.MANIFEST:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(a, b)

    dst = tmp_path / "dst"
    monkeypatch.setattr(os, "replace", full)
    rc, err = _pack_cli(small_src, dst, capsys)
    assert rc == 2 and len(err) == 1 and "No space left on device" in err[0], err
    monkeypatch.undo()
    assert sorted(os.listdir(dst)) == sorted([birdjepa.data.pack_dst.LOCK,
                                              birdjepa.data.pack_dst.PLAN])
    assert _pack_cli(small_src, dst, capsys)[0] == 0 and len(_rows(dst)) == 300


def test_pack_stops_at_the_first_write_failure_and_removes_its_temporary_files(
        small_src, tmp_path, capsys, monkeypatch):
    """Issue 30 item 2: on a full disk pack left 68 .tmp files and tried every queued shard."""
    calls = []
    real = birdjepa.data.pack._audio_array

    def full_disk(*a):
        calls.append(1)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device", "data-00000.arrow.tmp")
        return real(*a)

    monkeypatch.setattr(birdjepa.data.pack, "_audio_array", full_disk)
    dst = tmp_path / "dst"
    rc, err = _pack_cli(small_src, dst, capsys)
    assert rc == 2 and len(err) == 1 and "No space left on device" in err[0], err
    assert len(calls) == 2  # no further shard was attempted
    assert not [f for f in os.listdir(dst) if f.endswith(".tmp")], os.listdir(dst)
    monkeypatch.setattr(birdjepa.data.pack, "_audio_array", real)
    assert _pack_cli(small_src, dst, capsys)[0] == 0 and len(_rows(dst)) == 300


def test_pack_reencodes_at_the_models_rate_and_the_loader_sees_the_same_clips(demo_corpus,
                                                                              tmp_path, capsys):
    """`--codec wav --sample_rate 32000`: every recording becomes 16-bit mono WAV at 32 kHz (the
    loader then neither resamples nor decodes a codec), the other columns stay, and the loader's
    eval features of the packed corpus equal the original's up to the 16-bit quantisation and
    the crop's sub-sample placement. An undecodable row is kept as it was and reported."""
    import numpy as np

    import birdjepa._rs

    s = demo_corpus(n_recordings=12, min_s=5.0, max_s=8.0)
    src = pa.ipc.open_stream(pa.memory_map(s["shards"][0])).read_all()
    rows = src.to_pylist()
    rows[3] = {**rows[3], "audio": {"bytes": b"RIFF" + bytes(100), "path": "broken.wav"}}
    bad = tmp_path / "src" / "data.arrow"
    bad.parent.mkdir()
    with pa.OSFile(str(bad), "wb") as f, pa.ipc.new_stream(f, src.schema) as w:
        w.write_table(pa.Table.from_pylist(rows, src.schema))
    dst = tmp_path / "wav"
    rc, err = _pack_cli(bad, dst, capsys, "--codec", "wav", "--sample_rate", "32000")
    warnings = [line for line in err if line.startswith("warning")]
    assert rc == 0 and len(warnings) == 1 and "warning: 1 recording(s) could not be decoded " \
        f"and were kept as they were (first: {bad}: row 3: " in warnings[0], err
    packed = [r for f in birdjepa.data.resolve_shards(str(dst))
              for r in pa.ipc.open_stream(pa.memory_map(f)).read_all().to_pylist()]
    assert [{k: v for k, v in r.items() if k != "audio"} for r in packed] == \
        [{k: v for k, v in r.items() if k != "audio"} for r in rows]
    assert packed[3]["audio"] == rows[3]["audio"]
    for r in packed[:3] + packed[4:]:
        info = birdjepa._rs.info(r["audio"]["bytes"])
        assert (info["sample_rate"], info["channels"], info["codec"]) == (32000, 1, "pcm_s16le")

    def features(path):
        with birdjepa.data.Loader(str(path), mode="eval", batch_size=12, n_workers=1) as loader:
            return next(iter(loader))["data"]

    a = features(s["out_dir"])
    with pytest.warns(RuntimeWarning, match="skipped sample 3 "):
        b = features(dst)
    # Compared below ~8 kHz (mel bins 0-99): above the Nyquist frequency of a 22.05 kHz
    # recording the original's log-mel is the log floor, the packed one's the 16-bit noise.
    diff = np.linalg.norm((a - b)[..., :100].reshape(12, -1), axis=1)
    rel = diff / np.linalg.norm(a[..., :100].reshape(12, -1), axis=1)
    keep = [i for i in range(12) if i != 3]
    assert rel[keep].max() < 5e-3, rel

    rc, err = _pack_cli(bad, dst, capsys, "--codec", "flac", "--sample_rate", "32000")
    assert rc == 2 and len(err) == 1 and "differs in codec" in err[0], err
    # The filter is part of the plan: a resumed pack keeps its own (a plan written before the
    # setting existed names none and used the legacy one), another one is refused.
    plan = dst / birdjepa.data.pack_dst.PLAN
    assert json.loads(plan.read_text())["resampler"] == "soxr-hq"
    wav = ("--codec", "wav", "--sample_rate", "32000")
    rc, err = _pack_cli(bad, dst, capsys, *wav, "--resampler", "rubato-bh2-1024")
    assert rc == 2 and len(err) == 1 and "differs in resampler" in err[0], err
    old = {k: v for k, v in json.loads(plan.read_text()).items() if k != "resampler"}
    plan.write_text(json.dumps(old))
    assert _pack_cli(bad, dst, capsys, *wav)[0] == 0
    assert json.loads(plan.read_text()) == old
    rc, err = _pack_cli(bad, dst, capsys, *wav, "--resampler", "soxr-hq")
    assert rc == 2 and len(err) == 1 and "differs in resampler" in err[0], err
    rc, err = _pack_cli(bad, tmp_path / "x", capsys, "--sample_rate", "32000")
    assert rc == 2 and err == ["error: bad argument codec, sample_rate: expected copy (no "
                               "rate: the bytes are kept as they are) or wav/flac with no rate "
                               "or one in [1000, 384000] Hz, got 'copy', 32000"], err


def test_a_damaged_recording_is_named_by_the_pack_and_marked_in_its_manifest(demo_corpus,
                                                                            tmp_path, capsys):
    """Issue 47 item 11: `pack --codec wav` of a truncated recording wrote a clean, shorter file;
    the only trace was a raw Python warning naming no file, and afterwards nothing saw the
    damage. The pack names each damaged recording (shard, row, where its data ends) and its
    manifest keeps the mark beside the shard."""
    import io
    import json
    import warnings

    import numpy as np
    import soundfile as sf

    s = demo_corpus(n_recordings=4, min_s=5.0, max_s=6.0)
    src = pa.ipc.open_stream(pa.memory_map(s["shards"][0])).read_all()
    rows = src.to_pylist()
    buf = io.BytesIO()
    t = np.arange(10 * 32000) / 32000
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 900 * t)).astype(np.float32), 32000, format="WAV",
             subtype="PCM_16")
    rows[2] = {**rows[2], "audio": {"bytes": buf.getvalue()[:44 + 2 * 3 * 32000],
                                    "path": "cut.wav"}}  # header 10 s, data 3 s
    bad = tmp_path / "src" / "data.arrow"
    bad.parent.mkdir()
    with pa.OSFile(str(bad), "wb") as f, pa.ipc.new_stream(f, src.schema) as w:
        w.write_table(pa.Table.from_pylist(rows, src.schema))
    dst = tmp_path / "wav"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, err = _pack_cli(bad, dst, capsys, "--codec", "wav", "--sample_rate", "32000")
    assert rc == 0 and not [str(c.message) for c in caught], [str(c.message) for c in caught]
    said = [line for line in err if "damaged" in line]
    assert len(said) == 1 and f"1 recording(s) damaged, packed with what they hold: {bad}: " \
        "row 2 (the data ends at 3" in said[0], err
    manifest = json.loads((dst / birdjepa.data.pack_dst.MANIFEST).read_text())
    (entry,) = manifest.values()
    assert len(entry["damaged"]) == 1 and entry["damaged"][0][0] == 2 \
        and "the data ends at 3" in entry["damaged"][0][1], entry
