"""Loader robustness: bad input, bad arguments, Ctrl-C latency, thread and memory leaks."""

import gc
import os
import signal
import threading
import time

import loader_shards
import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pytest

import birdjepa
import birdjepa.data

pytestmark = pytest.mark.timeout(120)

SMALL = dict(transform="debug", n_frames=16, n_mels=8, clip_s=0.1, batch_size=8)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return loader_shards.corpus(tmp_path_factory.mktemp("shards"), sizes=(100, 60))


def test_missing_column_names_file_and_column(shards):
    with pytest.raises(birdjepa.DatasetError, match=r"shard-000\.arrow: column 'sound': no such"):
        birdjepa.data._DebugLoader(shards, audio_column="sound", **SMALL)
    with pytest.raises(birdjepa.DatasetError, match=r"column 'species': no such column"):
        birdjepa.data._DebugLoader(shards, label_column="species", **SMALL)


def test_label_types(tmp_path):
    flt = loader_shards.write(
        tmp_path / "f.arrow", loader_shards.table(range(10), label_type=pa.float64())
    )
    with pytest.raises(
        birdjepa.DatasetError,
        match=r"f\.arrow: column 'label': expected an integer label type .*got Float64",
    ):
        birdjepa.data._DebugLoader([flt], **SMALL)
    i16 = loader_shards.write(
        tmp_path / "i.arrow", loader_shards.table(range(10), label_type=pa.int16())
    )
    with birdjepa.data._DebugLoader([i16], mode="eval", **SMALL) as ev:
        b = next(iter(ev))
    np.testing.assert_array_equal(b["target"], np.arange(8) % 10)
    with birdjepa.data._DebugLoader([i16], mode="eval", label_column=None, **SMALL) as ev:
        assert (next(iter(ev))["target"] == -1).all()


def test_truncated_and_garbage_shards(tmp_path, shards):
    data = open(shards[0], "rb").read()
    for name, cut in (("half.arrow", len(data) // 2), ("tail.arrow", len(data) - 100)):
        (tmp_path / name).write_bytes(data[:cut])
        with pytest.raises(birdjepa.DatasetError, match=rf"{name}: truncated"):
            birdjepa.data._DebugLoader([str(tmp_path / name)], **SMALL)
    fdata = open(shards[1], "rb").read()  # IPC file format
    (tmp_path / "f.arrow").write_bytes(fdata[:-30])
    with pytest.raises(birdjepa.DatasetError, match=r"f\.arrow: truncated"):
        birdjepa.data._DebugLoader([str(tmp_path / "f.arrow")], **SMALL)
    (tmp_path / "junk.arrow").write_bytes(b"\x00" * 7 + b"not arrow at all" * 10)
    with pytest.raises(birdjepa.DatasetError, match=r"junk\.arrow"):
        birdjepa.data._DebugLoader([str(tmp_path / "junk.arrow")], **SMALL)
    with pytest.raises(birdjepa.DatasetError, match=r"nope\.arrow: cannot open"):
        birdjepa.data._DebugLoader([str(tmp_path / "nope.arrow")], **SMALL)


def test_compressed_shard_is_rejected_at_open(tmp_path):
    tbl = loader_shards.table(range(20))
    opts = pa.ipc.IpcWriteOptions(compression="zstd")
    path = str(tmp_path / "z.arrow")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, tbl.schema, options=opts) as w:
        w.write_table(tbl)
    with pytest.raises(birdjepa.DatasetError, match=r"z\.arrow: .*expected uncompressed"):
        birdjepa.data._DebugLoader([path], **SMALL)


def test_bad_arguments(tmp_path, shards):
    empty = loader_shards.write(tmp_path / "e.arrow", loader_shards.table(range(0)))
    bad = birdjepa.BadArgumentError
    with pytest.raises(bad, match="shards: expected a dataset with at least one row, got 0 rows"):
        birdjepa.data._DebugLoader([empty], **SMALL)
    with pytest.raises(bad, match="shards: expected at least one shard path"):
        birdjepa.data._DebugLoader([], **SMALL)
    with pytest.raises(bad, match="batch_size: expected >= 1, got 0"):
        birdjepa.data._DebugLoader(shards, **{**SMALL, "batch_size": 0})
    with pytest.raises(bad, match="n_workers: expected >= 1, got 0"):
        birdjepa.data._DebugLoader(shards, n_workers=0, **SMALL)
    with pytest.raises(bad, match="batch_size: expected a multiple of process_count=3, got 8"):
        birdjepa.data._DebugLoader(shards, process_count=3, **SMALL)
    with pytest.raises(bad, match="process_index: expected < process_count=2, got 2"):
        birdjepa.data._DebugLoader(shards, process_count=2, process_index=2, **SMALL)
    with pytest.raises(bad, match='mode: expected "train" or "eval", got "test"'):
        birdjepa.data._DebugLoader(shards, mode="test", **SMALL)
    with pytest.raises(bad, match='transform: expected "audio" or "debug", got "wav"'):
        birdjepa.data.Loader(shards, batch_size=8, transform="wav")
    with pytest.raises(TypeError, match="infinite"):
        len(birdjepa.data._DebugLoader(shards, **SMALL))


def test_ctrl_c_while_waiting_is_fast(shards):
    loader = birdjepa.data._DebugLoader(shards, n_workers=1, debug_delay_s=1.0, **SMALL)
    sent = []

    def interrupt():
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    # Ctrl-C reaches Python through its default SIGINT handler; earlier tests in the same session
    # (JAX, wandb, submitit) may have installed others, so pin the default for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(iter(loader))  # the first batch needs 8 s of slow transforms
        latency = time.perf_counter() - sent[0]
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
        t0 = time.perf_counter()
        loader.close()
        close_s = time.perf_counter() - t0
    assert latency < 0.5, latency
    assert close_s < 1.5, close_s  # waits only for the transform in progress


def _ours(expect: list[str] | None = None, wait_s: float = 2.0) -> list[str]:
    """Loader threads still alive: Rust threads are named `birdjepa-*`, plus Python threads.

    Other libraries loaded by earlier tests (XLA, TensorStore) start native
    threads lazily, so the process-wide count is not ours to assert on. A
    joined thread can still be listed in /proc/self/task for a moment (the
    kernel clears its tid before it leaves the group), so wait that out: a
    leaked thread never leaves.
    """
    deadline = time.monotonic() + wait_s
    while True:
        names = []
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    names.append(f.read().strip())
            except FileNotFoundError:  # exited while we listed
                pass
        ours = sorted(n for n in names if n.startswith("birdjepa"))
        ours += sorted(
            f"py:{t.name}" for t in threading.enumerate() if t is not threading.main_thread()
        )
        if expect is None or ours == expect or time.monotonic() > deadline:
            return ours


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_no_thread_or_memory_leak_over_200_loaders(shards):
    def cycle(k):
        loader = birdjepa.data._DebugLoader(shards, n_workers=2, seed=k, **SMALL)
        next(iter(loader))
        if k % 2:
            loader.close()
        else:
            with loader:
                next(iter(loader))

    gc.collect()  # loaders an earlier test dropped join here, not mid-test
    base_threads = _ours()
    for k in range(20):  # warm-up: allocator arenas, caches
        cycle(k)
    rss0 = _rss_mb()
    for k in range(200):
        cycle(k)
        assert _ours(base_threads) == base_threads, k
    grew = _rss_mb() - rss0
    assert grew < 20, f"RSS grew by {grew:.1f} MB over 200 loaders"
    # Dropping without close also joins (the Rust side joins on drop).
    loader = birdjepa.data._DebugLoader(shards, n_workers=3, **SMALL)
    next(iter(loader))
    del loader
    assert _ours(base_threads) == base_threads
