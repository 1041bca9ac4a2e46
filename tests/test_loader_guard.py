"""Nothing silent: a shard changed under a running loader, and a dataset whose samples fail."""

import os
import re
import subprocess
import sys
import textwrap
import time

import loader_shards
import pytest

import birdjepa
import birdjepa.data

pytestmark = pytest.mark.timeout(120)

SMALL = dict(transform="debug", n_frames=16, n_mels=8, clip_s=0.1, batch_size=8)

# Iterate, change shard-000 under the loader, iterate on: the process must not die of SIGBUS
# (truncation used to kill it, rc -7) or panic (overwrite), but raise DatasetError naming it.
CHANGE = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {support!r})
    import loader_shards, birdjepa, birdjepa.data
    paths = loader_shards.corpus({d!r}, sizes=(400, 400, 400), fmts=["stream"] * 3)
    loader = birdjepa.data._DebugLoader(paths, transform="debug", n_frames=16, n_mels=8,
                                        clip_s=0.1, batch_size=8, n_workers=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    if {how!r} == "truncate":
        os.truncate(paths[0], os.path.getsize(paths[0]) // 3)
    else:
        loader_shards.write(paths[0], loader_shards.table(range(5000, 5400)), "stream")
    try:
        for _ in range(500):
            next(it)
    except birdjepa.DatasetError as e:
        print("RAISED", e)
        sys.exit(0)
    print("NO ERROR")
""")


@pytest.mark.parametrize("how", ["truncate", "overwrite"])
def test_shard_changed_mid_iteration_raises_naming_it(tmp_path, how):
    support = os.path.join(os.path.dirname(__file__), "support")
    code = CHANGE.format(support=support, d=str(tmp_path), how=how)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"rc {r.returncode}: {out[-2000:]}"
    assert "RAISED" in out and "shard-000.arrow" in out, out[-2000:]
    assert "changed under the loader" in out, out[-2000:]
    assert "panicked" not in out, out[-2000:]


@pytest.mark.filterwarnings("ignore:birdjepa.data. skipped sample")
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_all_corrupt_dataset_fails_fast_naming_error_and_rows(tmp_path, mode):
    paths = loader_shards.corpus(tmp_path, sizes=(60, 40), corrupt=range(100))
    t0 = time.perf_counter()
    with birdjepa.data._DebugLoader(paths, mode=mode, **SMALL) as loader:
        with pytest.raises(birdjepa.TooManyFailuresError) as e:
            for _ in range(50):
                next(loader)
    assert time.perf_counter() - t0 < 5
    msg = str(e.value)
    assert isinstance(e.value, birdjepa.DatasetError)
    n = re.search(r"(\d+) of the last (\d+) samples failed", msg)
    assert n and n[1] == n[2] and int(n[1]) >= 100, msg
    assert "max_failure_fraction=0.1" in msg, msg
    assert "most common: corrupt audio" in msg, msg
    assert "shard-00" in msg and ".arrow row " in msg and "\n" not in msg, msg


def test_one_corrupt_row_in_a_hundred_is_only_skipped(tmp_path):
    paths = loader_shards.corpus(tmp_path, sizes=(600, 400), corrupt=range(0, 1000, 100))
    with pytest.warns(RuntimeWarning, match="skipped sample"):
        with birdjepa.data._DebugLoader(paths, **SMALL) as loader:
            for _ in range(300):  # 2400 samples, 2+ epochs
                next(loader)
        with birdjepa.data._DebugLoader(paths, mode="eval", **SMALL) as ev:
            assert sum(int(b["valid"].sum()) for b in ev) == 990


def test_max_failure_fraction_is_checked_and_can_disable_the_guard(tmp_path):
    paths = loader_shards.corpus(tmp_path, sizes=(50,), corrupt=range(50))
    with pytest.raises(birdjepa.BadArgumentError, match=r"max_failure_fraction: expected a "
                                                        r"number in \[0, 1\], got 1.5"):
        birdjepa.data._DebugLoader(paths, max_failure_fraction=1.5, **SMALL)
    with pytest.warns(RuntimeWarning):
        with birdjepa.data._DebugLoader(paths, mode="eval", max_failure_fraction=1.0,
                                        **SMALL) as ev:
            assert sum(int(b["valid"].sum()) for b in ev) == 0
