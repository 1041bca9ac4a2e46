"""Issue 47 items 4 and 20c: JAX's persistent compilation cache on a disk that filled once kept
truncated entries (64 KiB, 0 bytes): every later start warned, recompiled, reported a miss and
never replaced them. And an entry copied under another key was loaded unchecked (an
AssertionError traceback). birdjepa's cache directory holds entries written beside and renamed
into place, each carrying its key and a hash: a damaged or misplaced one is set aside and
compiled anew, and the next start loads the new one."""

import json
import os
import subprocess
import sys

SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
import birdjepa.runtime.compiles as compiles
compiles.enable(sys.argv[1])

def f(x):
    return jnp.sin(x) @ x.T

def g(x):
    return jnp.cos(x) @ x.T + 1.0

x = np.linspace(0.0, 1.0, 64 * 64, dtype=np.float32).reshape(64, 64)  # no compile of its own
out = {}
for fn in [{"f": f, "g": g}[n] for n in sys.argv[2].split(",")]:
    y = np.asarray(jax.jit(fn)(x))
    ref = (np.sin if fn is f else np.cos)(np.asarray(x)) @ np.asarray(x).T + (0.0 if fn is f else 1.0)
    out[fn.__name__] = {"hit": [c.cache_hit for c in compiles.compiles(fn.__name__)],
                        "ok": bool(np.allclose(y, ref, rtol=1e-4, atol=1e-3))}
print("RESULT " + json.dumps(out))
"""


def _run(cache, names: str) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("BIRDJEPA_COMPILE_CACHE", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(cache), names], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), r.stderr


def _entries(cache) -> set:
    return {p for p in cache.rglob("*-cache")}


def test_truncated_and_misplaced_entries_are_set_aside_and_written_anew(tmp_path):
    cache = tmp_path / "cc"
    first, _ = _run(cache, "f")
    assert first["f"] == {"hit": [False], "ok": True}
    (f_entry,) = _entries(cache)
    second, _ = _run(cache, "g")
    (g_entry,) = _entries(cache) - {f_entry}
    good_f = f_entry.read_bytes()
    # A full disk once: f's entry cut short. And g's entry replaced by f's (another key's).
    f_entry.write_bytes(good_f[:len(good_f) // 3])
    g_entry.write_bytes(good_f)
    third, err = _run(cache, "f,g")
    assert third == {"f": {"hit": [False], "ok": True}, "g": {"hit": [False], "ok": True}}, err
    fourth, err = _run(cache, "f,g")  # the damaged entries were replaced: loaded now
    assert fourth == {"f": {"hit": [True], "ok": True}, "g": {"hit": [True], "ok": True}}, err
