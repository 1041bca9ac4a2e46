"""Cost of the up-front path-only check (`birdjepa.data.table.check_audio_files`): 10,000 small
files and one shard naming them under a stale prefix, checked with `path_map` three times.

    PYTHONPATH=src python docs/issues/018-daily-workflow/path_check_cost.py [DIR]
"""

import os
import sys
import tempfile
import time

import pyarrow as pa

import birdjepa.data.table as table

N = 10_000


def main(root: str) -> None:
    audio = os.path.join(root, "audio")
    os.makedirs(audio, exist_ok=True)
    for i in range(N):
        with open(os.path.join(audio, f"{i:05d}.wav"), "wb") as f:
            f.write(b"x" * 100)
    col = pa.array([{"bytes": None, "path": f"/old/{i:05d}.wav"} for i in range(N)],
                   pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    t = pa.table({"audio": col})
    shard = os.path.join(root, "data.arrow")
    with pa.OSFile(shard, "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    for _ in range(3):
        t0 = time.perf_counter()
        got = table.check_audio_files(shard, path_map={"/old": audio})
        print(f"{got['checked']} path-only rows checked in {time.perf_counter() - t0:.3f} s, "
              f"{len(got['missing'])} missing")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(sys.argv[1] if len(sys.argv) > 1 else tmp)
