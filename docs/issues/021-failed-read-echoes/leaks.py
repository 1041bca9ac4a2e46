"""Count what a failed checkpoint read leaves behind: asyncio "exception was never retrieved"
records and Orbax coroutines finalised as unraisable exceptions, per restore of a corrupt step.

    .venv/bin/python docs/issues/021-failed-read-echoes/leaks.py          # as shipped
    .venv/bin/python docs/issues/021-failed-read-echoes/leaks.py --raw    # without the remedy

`--raw` turns off the remedy (the asyncio filter and the collection after the fallback)."""

import gc
import logging
import pathlib
import shutil
import sys
import tempfile
import time

import jax.numpy as jnp

import birdjepa.runtime.checkpoint
import birdjepa.runtime.integrity as integrity
import birdjepa.runtime.rundir as rundir

RESTORES = 16


def wide_state(step: int) -> dict:
    return {f"w{i:02d}": jnp.full((1024,), step + i, jnp.float32) for i in range(48)}


def main(raw: bool) -> None:
    records, unraisable = [], []

    class Count(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage().splitlines()[0])

    logging.getLogger("asyncio").addHandler(Count())
    logging.getLogger("birdjepa").setLevel(logging.ERROR)  # the one warning per step: expected
    sys.unraisablehook = unraisable.append
    if raw:
        integrity.collect_failed_reads = lambda: None
        integrity._ECHOES.filter = lambda record: True
    tmp = pathlib.Path(tempfile.mkdtemp())
    with birdjepa.runtime.checkpoint.Checkpointer(tmp / "template", every=1, keep=2) as c:
        for s in (3, 4):
            c.save(s, wide_state(s), loader={"pos": s}, meta={"step": s})
    per_restore = []
    for i in range(RESTORES):
        d = tmp / str(i)
        shutil.copytree(tmp / "template", d)
        (d / "4" / rundir.MANIFEST).unlink()  # read to be checked: this version's step, damaged
        f = max((d / "4" / "state" / "d").iterdir(), key=lambda p: p.stat().st_size)
        data = bytearray(f.read_bytes())
        for at in range(len(data) // 8, len(data), len(data) // 8):
            data[at:at + 64] = bytes(b ^ 0xFF for b in data[at:at + 64])
        f.write_bytes(bytes(data))
        before = len(records), len(unraisable)
        with birdjepa.runtime.checkpoint.Checkpointer(d, every=1, keep=2) as c:
            assert c.restore(wide_state(0)).step == 3
        gc.collect()
        per_restore.append((len(records) - before[0], len(unraisable) - before[1]))
    time.sleep(1)
    gc.collect()
    coroutines = sum("coroutine" in repr(u.object) for u in unraisable)
    closed = sum("Event loop is closed" in repr(u.exc_value) for u in unraisable)
    print(f"{'raw' if raw else 'shipped'}: {RESTORES} restores of a corrupt step; asyncio "
          f"records per restore {[r for r, _ in per_restore]}, total {len(records)} "
          f"{sorted(set(records))}; unraisable {len(unraisable)}: Orbax coroutines {coroutines}, "
          f"'Event loop is closed' {closed}")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main("--raw" in sys.argv[1:])
