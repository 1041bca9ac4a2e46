"""`python -m birdjepa.sources pack` resumes after a SIGKILL: finished shards are kept, the
partial one is redone, and the result is byte-identical to the files."""

import os
import signal
import subprocess
import sys
import time

import pyarrow as pa

import birdjepa.data
import birdjepa.data.pack
import birdjepa.demo_data.birdset as birdset
import birdjepa.demo_data.catalogue as catalogue


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
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    assert f"packed 600 rows into {n_shards} shards" in out and \
        f"{len(done)} already done" in out, out
    assert not [f for f in os.listdir(dst) if f.endswith(".tmp")]
    got = [r for f in birdjepa.data.resolve_shards(str(dst))
           for r in pa.ipc.open_stream(pa.memory_map(f)).read_all().to_pylist()]
    assert [r["filepath"] for r in got] == [r["filepath"] for r in many]
    for r, g in zip(many, got, strict=True):
        with open(r["audio"]["path"], "rb") as f:
            assert g["audio"]["bytes"] == f.read()
