"""JAX compilation, within a process and across processes.

Within a process: every trace and every XLA compile is counted by function name (JAX's
monitoring events), so the training loop can say how long the update took to compile, whether it
came from the persistent cache, and warn if it is ever traced again (a train state whose types
change between updates recompiles the step: docs/issues/022-gpu-kept-busy).

Across processes: JAX's persistent compilation cache keeps compiled executables on disk, so a
resumed or requeued run, or a second run of the same shapes, loads its update instead of compiling
it again (17-18 s for ViT-S on an H200). The directory is, in this order: the `compile_cache`
setting, $BIRDJEPA_COMPILE_CACHE, JAX's own JAX_COMPILATION_CACHE_DIR, or
$XDG_CACHE_HOME/birdjepa/jax-compile (default ~/.cache/...); "off" in the setting or the
variable disables it. A cluster points it at shared storage so that every node shares one copy
(on a CPU backend, in a subdirectory per instruction set: XLA's CPU code is the host's).
JAX writes only compiles slower than `jax_persistent_cache_min_compile_time_secs` (1 s; its
environment variable JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS sets it).
"""

import collections
import dataclasses
import hashlib
import os
import pathlib
import platform
import sys
import threading

import jax
from jax._src import compilation_cache as _jax_cache
from jax._src.compilation_cache_interface import CacheInterface
from jax.experimental.compilation_cache import compilation_cache

import birdjepa.common.outputs as outputs

ENV = "BIRDJEPA_COMPILE_CACHE"
OFF = "off"

_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_COMPILE = "/jax/core/compile/backend_compile_duration"
_HIT = "/jax/compilation_cache/cache_hits"
_MISS = "/jax/compilation_cache/cache_misses"


def default_dir() -> pathlib.Path:
    """$XDG_CACHE_HOME/birdjepa/jax-compile, or ~/.cache/birdjepa/jax-compile."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "birdjepa" / "jax-compile"


def resolve(setting: str) -> str | None:
    """The cache directory for a `compile_cache` setting ("" = not set), or None for "off"."""
    for value in (setting, os.environ.get(ENV, ""), os.environ.get("JAX_COMPILATION_CACHE_DIR", "")):
        if value:
            return None if value == OFF else os.path.abspath(os.path.expanduser(value))
    return str(default_dir())


def _cpu_subdir() -> str:
    """`cpu-<hash of this CPU's instruction-set flags>`: XLA compiles CPU executables for the
    host's instruction set, and JAX's cache key does not say which, so CPUs that differ (nodes of
    a cluster sharing a home directory) keep apart."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    tag = flags or f"{platform.machine()} {platform.processor()}"
    return "cpu-" + hashlib.sha256(tag.encode()).hexdigest()[:12]


def enable(setting: str) -> str | None:
    """Point JAX's persistent compilation cache at `resolve(setting)` (in a subdirectory per
    instruction set on a CPU backend; None: turn it off) and start counting compiles; returns
    the directory."""
    watch()
    path = resolve(setting)
    if path is not None and jax.default_backend() == "cpu":
        path = os.path.join(path, _cpu_subdir())
    if path != jax.config.jax_compilation_cache_dir or \
            (path is not None) != jax.config.jax_enable_compilation_cache:
        jax.config.update("jax_enable_compilation_cache", path is not None)
        compilation_cache.set_cache_dir(path)
        compilation_cache.reset_cache()  # the next compile opens the new directory
    if path is not None and not isinstance(_jax_cache._cache, CheckedCache):
        _jax_cache._initialize_cache()  # JAX's own, then ours in its place
        _jax_cache._cache = CheckedCache(path)
    return path


class CheckedCache(CacheInterface):
    """JAX's persistent compilation cache directory with entries that are never half-written
    nor misplaced (issue 47 items 4 and 20c). JAX's own wrote an entry in place: a disk that
    filled once left it truncated, and every later start warned, recompiled and never replaced
    it (its put skips an existing file); an entry copied under another key was loaded as that
    key's executable, computing the wrong function. Here each entry is written beside its name
    and renamed into place, and ends with MAGIC and the sha256 of its key and payload; an entry
    without them, or not of its key, or cut short, is a miss: set aside (`<name>.bad`, one line
    on stderr) and written anew by the compile that follows. A write that fails (a full disk)
    leaves no entry and the run compiling on."""

    MAGIC = b"BIRDJEPA-CACHE-1"

    def __init__(self, path: str | os.PathLike):
        self._path = pathlib.Path(path)
        self._path.mkdir(parents=True, exist_ok=True)
        self.failed_write = False

    def _file(self, key: str) -> pathlib.Path:
        return self._path / f"{key}-cache"

    def _seal(self, key: str, value: bytes) -> bytes:
        return self.MAGIC + hashlib.sha256(key.encode() + b"\0" + value).digest()

    def get(self, key: str) -> bytes | None:
        path = self._file(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        n = len(self.MAGIC) + 32
        value = data[:-n]
        if len(data) < n or data[-n:] != self._seal(key, value):
            why = ("cut short, or written before birdjepa sealed its entries"
                   if len(data) < n or data[-n:-32] != self.MAGIC
                   else "not this key's, or its bytes changed")
            path.rename(path.with_name(path.name + ".bad"))  # set aside, never read again
            print(f"compilation cache: set aside {path.name} ({why}); compiling it anew",
                  file=sys.stderr, flush=True)
            return None
        return value

    def put(self, key: str, value: bytes) -> None:
        try:
            with outputs.replacing(self._file(key)) as tmp:
                tmp.write_bytes(value + self._seal(key, value))
        except OSError as e:  # a full disk: no entry, the run goes on
            if not self.failed_write:
                self.failed_write = True
                print(f"compilation cache: could not write an entry in {self._path} ({e}); "
                      "compiles are not kept", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Compile:
    seconds: float
    """Wall time of the XLA compile (or of the load from the persistent cache)."""
    cache_hit: bool | None
    """Loaded from the persistent cache; False: compiled (and written if slow enough); None:
    the cache was not in use."""


class _Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.traces: collections.Counter = collections.Counter()
        self.compiles: dict[str, list[Compile]] = collections.defaultdict(list)
        self.pending: dict[int, bool] = {}  # thread -> the cache's verdict on its compile

    def on_event(self, event: str, **_) -> None:
        if event in (_HIT, _MISS):
            with self.lock:
                self.pending[threading.get_ident()] = event == _HIT

    def on_duration(self, event: str, seconds: float, *, fun_name: str = "", **_) -> None:
        if event not in (_TRACE, _COMPILE):
            return
        name = fun_name.removeprefix("jit(").removesuffix(")")
        with self.lock:
            if event == _TRACE:
                self.traces[name] += 1
            else:
                hit = self.pending.pop(threading.get_ident(), None)
                self.compiles[name].append(Compile(seconds, hit))


_COUNTS: _Counts | None = None
_REGISTER = threading.Lock()


def watch() -> None:
    """Start counting traces and compiles in this process (idempotent)."""
    global _COUNTS
    with _REGISTER:
        if _COUNTS is None:
            _COUNTS = _Counts()
            jax.monitoring.register_event_listener(_COUNTS.on_event)
            jax.monitoring.register_event_duration_secs_listener(_COUNTS.on_duration)


def traces(name: str) -> int:
    """How often the function `name` (e.g. "update") was traced since `watch()`."""
    return 0 if _COUNTS is None else _COUNTS.traces[name]


def compiles(name: str) -> list[Compile]:
    """The XLA compiles of the function `name` since `watch()`, oldest first."""
    return [] if _COUNTS is None else list(_COUNTS.compiles.get(name, []))


def describe(c: Compile | None, cache_dir: str | None) -> str:
    """"compiled in 18.3 s, cached in DIR" / "loaded from the compilation cache in 0.4 s" /
    "compiled in 18.3 s, compilation cache off"."""
    if c is None:
        return "no compile (already in memory)"
    if c.cache_hit:
        return f"loaded from the compilation cache {cache_dir} in {c.seconds:.1f} s"
    if cache_dir is None or c.cache_hit is None:
        return f"compiled in {c.seconds:.1f} s, compilation cache off"
    return f"compiled in {c.seconds:.1f} s, cache miss in {cache_dir}"


class Retrace:
    """Warns once if the function `name` is traced again after this point: each new trace also
    compiles, and in a training loop it means the state's types changed between updates."""

    def __init__(self, name: str, *, enabled: bool = True):
        self.name, self.enabled = name, enabled
        self.traced, self.warned = traces(name), False

    def check(self, step: int) -> None:
        n = traces(self.name)
        if n != self.traced and not self.warned:
            self.warned = True
            if self.enabled:
                print(f"warning: step {step}: {self.name} was traced again ({n - self.traced} "
                      "more time(s)) and recompiled: its inputs' types or shardings changed "
                      "(docs/issues/022-gpu-kept-busy)", flush=True)
