"""Path-only audio and per-row columns through the public Loader (issue 30 items 7, 10 and 16):
only regular files within max_audio_mb are read, a FIFO or device never hangs, metadata changes
pass and content changes are counted skips, and one bad event row fails alone."""

import os
import shutil
import time
import warnings

import loader_shards
import numpy as np
import pyarrow as pa
import pytest

import birdjepa
import birdjepa.data

pytestmark = pytest.mark.timeout(120)

SMALL = dict(transform="debug", n_frames=16, n_mels=8, clip_s=0.1, n_workers=2)
NOT_REGULAR = "not a regular audio file"


def payload(i: int, size: int = 0) -> bytes:
    b = b"row-%08d" % i
    return b + b"\0" * max(0, size - len(b))


def path_shard(d, files, events=None) -> str:
    """One path-only shard (HF Audio with null bytes) naming `files`, labels i % 10."""
    audio = pa.array([{"bytes": None, "path": str(f)} for f in files], type=loader_shards.AUDIO)
    cols = {"audio": audio, "label": pa.array([i % 10 for i in range(len(files))], pa.int64())}
    os.makedirs(d, exist_ok=True)
    return loader_shards.write(os.path.join(d, "data.arrow"), pa.table(cols))


def audio_files(d, n: int, sizes=None) -> list[str]:
    os.makedirs(d, exist_ok=True)
    out = []
    for i in range(n):
        p = os.path.join(d, f"{i:03d}.wav")
        with open(p, "wb") as f:
            f.write(payload(i, (sizes or {}).get(i, 0)))
        out.append(p)
    return out


def run(spec, n_batches, **kw):
    """(batches, stats, warning lines) of `n_batches` from a debug Loader over `spec`."""
    kw = {"batch_size": 4, **SMALL, **kw}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with birdjepa.data._DebugLoader(spec, **kw) as loader:
            if kw.get("mode") == "eval":
                batches = list(loader)
            else:
                batches = [next(loader) for _ in range(n_batches)]
            stats = loader.stats()
    return batches, stats, [str(x.message) for x in w]


def indices(batches) -> set[int]:
    return {int(i) for b in batches for i, v in zip(b["index"], b["valid"], strict=True) if v}


def test_fifos_devices_and_directories_are_counted_skips_never_a_hang(tmp_path):
    """Item 10: a FIFO used to hang the Loader (and training, which then ignored SIGTERM),
    /dev/zero read without end until the OOM killer; open called a FIFO "does not exist"."""
    files = audio_files(tmp_path / "audio", 16)
    os.mkfifo(tmp_path / "pipe.wav")  # no writer ever opens it
    (tmp_path / "folder.wav").mkdir()
    special = {1: str(tmp_path / "pipe.wav"), 6: "/dev/zero", 9: "/dev/urandom",
               14: str(tmp_path / "folder.wav")}
    spec = path_shard(tmp_path, [special.get(i, f) for i, f in enumerate(files)])
    t0 = time.monotonic()
    batches, stats, lines = run(spec, 8, max_failure_fraction=1.0)  # two epochs
    assert time.monotonic() - t0 < 30
    opened = [m for m in lines if "audio files checked cannot be read" in m]
    assert len(opened) == 1 and opened[0].startswith(
        "birdjepa.data: 4 of 16 audio files checked cannot be read as audio (row 1: "
        f"{special[1]}: expected a regular audio file, got a FIFO (named pipe)"), lines
    assert not any("do not exist" in m for m in lines), lines
    n = stats["failures_by_kind"][NOT_REGULAR]
    assert set(stats["failures_by_kind"]) == {NOT_REGULAR} and n >= 8  # each, every epoch
    skips = [m for m in lines if f"[{NOT_REGULAR}: " in m]  # one line at 1, 10, 100 skips
    assert len(skips) == sum(k <= n for k in (1, 10, 100)), lines
    assert any(p in skips[0] for p in special.values()), lines
    assert all(b["valid"].all() for b in batches)
    assert indices(batches) == set(range(16)) - set(special)
    # Eval: the same rows are invalid, the others read.
    batches, _, _ = run(spec, 0, mode="eval", max_failure_fraction=1.0)
    valid = np.concatenate([b["valid"] for b in batches])
    assert [i for i in range(16) if not valid[i]] == sorted(special)
    # Nothing readable at all: one error at open naming a file, not a loader that waits.
    only = path_shard(tmp_path / "only", [special[1], special[6]])
    with pytest.raises(birdjepa.DatasetError, match=r"none of the 2 audio files checked can be "
                       r"read \(row 0: .*pipe.wav: expected a regular audio file, got a FIFO"):
        birdjepa.data._DebugLoader(only, batch_size=2, **SMALL)


def test_a_file_above_max_audio_mb_is_a_counted_skip(tmp_path):
    """Item 10: reads are bounded; the bound is a loader setting."""
    files = audio_files(tmp_path / "audio", 8, sizes={3: 2_500_000})
    spec = path_shard(tmp_path, files)
    batches, stats, lines = run(spec, 4, max_audio_mb=1.0)
    big = files[3]
    assert any(m.startswith("birdjepa.data: 1 of 8 audio files checked cannot be read as audio "
                            f"(row 3: {big}: expected at most max_audio_mb=1 MB, got 2.5 MB")
               for m in lines), lines
    assert set(stats["failures_by_kind"]) == {"audio file too large"}
    assert 3 not in indices(batches) and indices(batches) == set(range(8)) - {3}
    # The default (1024 MB) reads it, and a bad bound is refused in the usual words.
    batches, stats, _ = run(spec, 4)
    assert stats["failures"] == 0 and indices(batches) == set(range(8))
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument max_audio_mb: expected "
                       r"a finite number of MB > 0, got 0$"):
        birdjepa.data._DebugLoader(spec, batch_size=4, max_audio_mb=0, **SMALL)


def test_metadata_changes_pass_and_a_content_change_is_one_warning_and_skips(tmp_path):
    """Item 16: chmod, touch, a hard link or an identical re-copy of a file used to stop the
    Loader mid-run; a file whose content changed is a counted skip with one warning naming it."""
    files = audio_files(tmp_path / "audio", 8)
    spec = path_shard(tmp_path, files)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with birdjepa.data._DebugLoader(spec, batch_size=8, prefetch=1, **SMALL) as loader:
            first = next(loader)  # every file read once
            os.chmod(files[0], 0o600)
            os.utime(files[1], (time.time() + 100, time.time() + 100))
            os.link(files[2], tmp_path / "link.wav")
            shutil.copy(files[3], tmp_path / "copy.wav")
            os.replace(tmp_path / "copy.wav", files[3])  # a new inode, the same bytes
            same = [next(loader) for _ in range(6)]
            assert loader.stats()["failures"] == 0
            assert all(indices([b]) == set(range(8)) for b in [first, *same])
            # Same size, other bytes, mtime put back (as `rsync -t` or a restore would).
            st = os.stat(files[5])
            with open(files[5], "r+b") as f:
                f.write(b"ROW!")
            os.utime(files[5], ns=(st.st_atime_ns, st.st_mtime_ns))
            later = [next(loader) for _ in range(6)]  # the first ones may be read already
            stats = loader.stats()
    lines = [str(x.message) for x in w]
    changed = [m for m in lines if "audio file changed" in m]
    assert len(changed) == 1 and f"{files[5]}: its content changed since this run first read " \
        "it" in changed[0], lines
    assert set(stats["failures_by_kind"]) == {"audio file changed"}
    assert 1 <= stats["failures_by_kind"]["audio file changed"] < 10
    assert 5 not in indices(later[4:]) and all(b["valid"].all() for b in later)


def events_shard(d, bad_row: int) -> str:
    """300 rows in three 100-row record batches, each with one event; `bad_row`'s starts at
    -0.5 s."""
    t = loader_shards.table(range(300))
    ev = [[[-0.5, 1.0]] if i == bad_row else [[0.1, 0.2 + i / 1000]] for i in range(300)]
    t = t.append_column("detected_events", pa.array(ev, pa.list_(pa.list_(pa.float64()))))
    return loader_shards.write(os.path.join(d, "events.arrow"), t, batch_rows=100)


def test_one_bad_event_row_fails_alone_and_is_named(tmp_path):
    """Item 7: one event starting at -0.5 s used to make its whole 100-row record batch
    unreadable: at max_failure_fraction 0.5 training silently saw 200 of 300 rows, and at the
    default it raised after 512 samples naming innocent rows."""
    spec = events_shard(tmp_path, bad_row=150)
    batches, stats, lines = run(spec, 16, batch_size=20, crop="events")  # one epoch and more
    assert indices(batches) == set(range(300)) - {150}
    assert stats["failures_by_kind"] == {"unreadable row": stats["failures"]}
    assert 1 <= stats["failures"] <= 2  # row 150 in each epoch reached
    (skip,) = [m for m in lines if "skipped sample" in m]
    assert (f"{spec}: row 150, column 'detected_events': expected [start, end] seconds with 0 "
            "<= start <= end, got [Some(-0.5), Some(1.0)]") in skip, skip
    # Every bad row is named alone when too many fail.
    with pytest.raises(birdjepa.TooManyFailuresError) as e:
        run(spec, 40, batch_size=20, crop="events", failure_window=4, max_failure_fraction=0.0)
    named = e.value.args[0].split("e.g. ")[1].split("; first:")[0]
    assert set(named.split(", ")) == {f"{spec} row 150"}, e.value


@pytest.mark.heavy
@pytest.mark.timeout(280)
def test_training_on_a_fifo_and_dev_zero_runs_and_stops_on_sigterm(tmp_path, demo_corpus):
    """Item 10: training on path-only rows naming a FIFO or /dev/zero used to hang (and then
    ignore SIGTERM) or eat all memory; now it trains on the other rows and SIGTERM stops it at
    a step boundary with the preemption exit code."""
    import signal

    import resume_helpers as h
    import tiny

    corpus = demo_corpus(**h.CORPUS)["out_dir"]
    (shard,) = birdjepa.data.resolve_shards(str(corpus))[:1]
    with pa.memory_map(shard) as f:
        t = pa.ipc.open_stream(f).read_all()
    os.mkfifo(tmp_path / "pipe.wav")
    paths = []
    for i, a in enumerate(t.column("audio").to_pylist()):
        p = tmp_path / f"{i:03d}.wav"
        p.write_bytes(a["bytes"])
        paths.append({1: str(tmp_path / "pipe.wav"), 4: "/dev/zero"}.get(i, str(p)))
    audio = pa.array([{"bytes": None, "path": p} for p in paths], type=t.schema.field("audio").type)
    data = tmp_path / "data"
    data.mkdir()
    loader_shards.write(data / "data.arrow", t.set_column(t.schema.get_field_index("audio"),
                                                          t.schema.field("audio"), audio))
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(tiny.tiny_toml(data, n_steps=1000, ckpt_every=1000).replace(
        "[data]", "[data]\nmax_failure_fraction = 0.5"))
    proc = h.Proc(cfg, tmp_path / "run")
    assert proc.wait_step(2, timeout=200), proc.text()
    t0 = time.monotonic()
    proc.signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    assert rc == 75 and time.monotonic() - t0 < 60, (rc, proc.text())
    assert "pipe.wav" in proc.text() or "/dev/zero" in proc.text(), proc.text()
