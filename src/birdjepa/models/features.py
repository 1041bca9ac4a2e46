"""The encoder input of audio windows, through exactly the training transform: `Windows` (where
a recording's windows are and how they become input, from a model's input settings) and
`features(source, windows)`, batches of (n_frames, n_mels) input from audio files, bytes, a
(wave, sample_rate) array, shards or a `datasets.Dataset`.

Per window: decode (seeking where the container allows), resample to `sample_rate` with the
model's `resampler`, Kaldi log-mel (`birdjepa.data.audio.clip`, the loader's Rust code),
normalise and pad or cut to the encoder's `n_frames`: what `birdjepa.data.Loader` feeds it.
`centre=True` takes the loader's eval crop (tests/test_embed.py checks equality with the
loader); otherwise windows of `window_s` every `hop_s` (default `window_s`) until the end, the
last one zero-padded. A raw `(wave, sample_rate)` array is resampled whole, then cut.
birdjepa.models.inference encodes them.
"""

import collections
import concurrent.futures
import dataclasses
import math
import os
from collections.abc import Iterator

import numpy as np

import birdjepa.common.errors as errors
import birdjepa.data
import birdjepa.data.audio
import birdjepa.data.loader_config
import birdjepa.data.paths
import birdjepa.data.table as table
import birdjepa.models.failures


@dataclasses.dataclass(frozen=True)
class Windows:
    """Where the windows of a recording are and how they become encoder input."""

    window_s: float = 5.0
    """Window length, seconds (the loader's clip_s)."""
    hop_s: float | None = None
    """Window start spacing, seconds; None means window_s (tiling)."""
    centre: bool = False
    """One window per recording at its centre (the loader's eval crop) instead of sliding."""
    sample_rate: int = 32000
    """Rate the audio is resampled to before the fbank."""
    n_frames: int = 512
    """Encoder input frames; longer features are cut, shorter padded (`pad`)."""
    n_mels: int = 128
    """Mel bins."""
    mean: float = birdjepa.data.DEFAULT_MEAN
    std: float = birdjepa.data.DEFAULT_STD
    """Normalisation of the log-mel values, as the loader's: (x - mean) / (2 * std)."""
    pad: str = "zero"
    """Frames past a clip shorter than n_frames: "zero" (0.0 after normalising), "min" (the
    clip's minimum log-mel value before normalising: Bird-MAE) or "repeat" (the clip again)."""
    segment: str = "centre"
    """With `centre`: "centre" (the loader's eval crop; a file no longer than the window whole)
    or "columns" (each row's [start, end] s from `segment_columns`, cut there; shards only)."""
    segment_columns: tuple[str, str] = ("start_time", "end_time")
    """Segment start and end columns, seconds (segment = "columns")."""
    resampler: str = birdjepa.data.loader_config.DEFAULT_RESAMPLER
    """Filter for audio not at sample_rate: the model's (birdjepa.data.audio.RESAMPLERS)."""

    def starts(self, n_samples: int, sr: int) -> list[float]:
        """Start times (s) of the windows of a recording of `n_samples` at `sr` Hz."""
        win = int(round(self.window_s * sr))
        if self.centre:
            # Rust's f64::round (half away from zero), not Python's round (half to even).
            return [math.floor(0.5 * max(0, n_samples - win) + 0.5) / sr]
        hop = int(round((self.hop_s or self.window_s) * sr))
        if hop <= 0:
            raise ValueError(f"hop_s: expected > 0, got {self.hop_s}")
        n = 1 + max(0, -(-(n_samples - win) // hop))
        # A hop longer than the window can step past the end: a window there holds nothing.
        return [i * hop / sr for i in range(n) if i == 0 or i * hop < n_samples]

    def normalise(self, feats_tm: np.ndarray, valid_s: float | None = None) -> np.ndarray:
        """(n_frames, n_mels) float32 encoder input (birdjepa.data.audio.model_input)."""
        return birdjepa.data.audio.model_input(feats_tm, self.n_frames, self.n_mels, self.mean,
                                               self.std, self.pad, valid_s)

    @classmethod
    def for_model(cls, audio: dict, *, window_s: float | None = None, **kw) -> "Windows":
        """Windows feeding a model whose input settings are `audio` (as_model): every setting
        from the model; `window_s` None is the model's clip (a window's frames beyond the
        model's n_frames are cut, shorter ones padded; data.audio.check_window refuses others)."""
        clip = birdjepa.data.audio.check_window(window_s, audio["window_s"])
        window_s = clip if window_s is None else window_s
        return cls(window_s=window_s, sample_rate=audio["sample_rate"],
                   n_frames=audio["n_frames"], n_mels=audio["n_mels"], mean=audio["mean"],
                   std=audio["std"], pad=audio["pad"], resampler=audio["resampler"], **kw)



# -- sources ----------------------------------------------------------------------------------


def _items(source, audio_column: str, channels_first: bool = False, *, audio_root: str = "",
           path_map=None) -> Iterator[tuple[int, str, object]]:
    """(row id, name for messages, bytes | path | (wave, sr) | None) per recording, one at a
    time (files are read when their turn comes; shards one shard at a time); a raw wave follows
    birdjepa.data.audio.as_mono's convention; a table's path-only rows resolve with
    `audio_root` / `path_map` (birdjepa.data.paths.resolve)."""
    moved = dict(audio_root=audio_root, path_map=path_map)
    if isinstance(source, bytes | bytearray | memoryview):
        yield 0, "the bytes", bytes(source)
    elif is_audio_files(source):
        for i, path in enumerate(source):
            yield i, str(path), str(path)
    elif isinstance(source, tuple) and len(source) == 2:
        wave, sr = source
        yield 0, "the wave", (birdjepa.data.audio.as_mono(wave, channels_first=channels_first),
                              int(sr))
    elif isinstance(source, str | os.PathLike) and os.path.isfile(source) and not str(
            source).endswith(".arrow"):
        yield 0, str(source), str(source)
    elif table.is_dataset(source):
        yield from ((i, f"row {i}", a) for i, a in enumerate(table.read_audio(
            source, audio_column, **moved)))
    else:
        row = 0
        for shard in birdjepa.data.resolve_shards(source):
            for a in table.read_audio(shard, audio_column, **moved):
                yield row, f"row {row} of {source}", a
                row += 1


def _plan(item, w: Windows, max_audio_mb: float = birdjepa.data.paths.MAX_AUDIO_MB):
    """(duration_s, window starts, window(start) -> (normalised features, None or where the
    data stops early), None or why the data stops early, the recording's own sample rate) of one
    recording (a path: a regular
    file of at most `max_audio_mb` MB, birdjepa.data.paths.read_file). A recording without a
    length in its header is decoded to count: its length is what the data holds."""
    if item is None:
        raise errors.EmptyAudioError("no audio (neither bytes nor a path)")
    if isinstance(item, tuple):
        wave, sr = item
        x = (birdjepa.data.audio.resample(wave, sr, w.sample_rate, resampler=w.resampler)
             if sr != w.sample_rate else wave)
        win = int(round(w.window_s * w.sample_rate))

        def cut(s):
            a = int(round(s * w.sample_rate))
            piece = np.zeros(win, np.float32)
            piece[: len(x[a : a + win])] = x[a : a + win]
            return w.normalise(birdjepa.data.audio.fbank(piece, sample_rate=w.sample_rate,
                                                         n_mels=w.n_mels),
                               len(x[a : a + win]) / w.sample_rate), None, s
        return len(x) / w.sample_rate, w.starts(len(x), w.sample_rate), cut, None, sr
    data = (birdjepa.data.paths.read_file(item, max_audio_mb) if isinstance(item, str | os.PathLike)
            else birdjepa.data.audio._bytes(item))
    info = birdjepa.data.audio.info(data)
    n, sr = info["n_frames"], info["sample_rate"]
    damage = None
    if n is None:  # no length in the header: decode to count (what the data holds)
        wave, _sr, _seeked, damage = birdjepa._rs.decode(data)
        n, damage = len(wave), damage and damage["message"]

    def at(s):
        return birdjepa.data.audio.clip(data, start_s=s, duration_s=w.window_s,
                                        sample_rate=w.sample_rate, n_mels=w.n_mels,
                                        resampler=w.resampler, with_damage=True)

    def clip(s):  # (features, None or where the data stops early, the window's start)
        """The window at `s`, placed by what the data holds, not by the header: a window that
        starts where the data has ended is no window (EmptyAudioError), and the centre
        window of a recording whose data stops early is the centre of that data (the loader's
        eval crop places it so too)."""
        try:
            feats, dmg = at(s)
        except errors.EmptyAudioError as e:
            if not (w.centre and "after the data ends" in str(e)):
                raise
            feats, dmg = None, {"end_s": _data_seconds(data), "message": str(e)}
        end = None if dmg is None else float(dmg["end_s"])
        if end is not None and w.centre and end < s + w.window_s:
            s = w.starts(int(round(end * sr)), sr)[0]
            feats, again = at(s)
            dmg = again or dmg
        elif end is not None and end <= s:
            raise errors.EmptyAudioError(f"window starts at {s:g} s, after the data ends at "
                                         f"{end:g} s ({dmg['message']})")
        return w.normalise(feats, min(w.window_s, (end if end is not None else n / sr) - s)), \
            dmg, s
    return n / sr, w.starts(n, sr), clip, damage, sr


def _data_seconds(data: bytes) -> float:
    """Seconds of audio the data of a damaged recording holds (decoded whole: rare)."""
    wave, sr, _seeked, _damage = birdjepa._rs.decode(data)
    return len(wave) / sr


def _window_tasks(items, w: Windows, failures: birdjepa.models.failures.Failures, durations: dict | None,
                  max_audio_mb: float, rates: dict | None = None):
    """(row, name, start_s, features thunk) per window, recording after recording; a recording
    whose header cannot be read is a counted failure."""
    for row, name, item in items:
        failures.n_items += 1
        try:
            dur, starts, fn, damage, sr = _plan(item, w, max_audio_mb)
        except birdjepa.models.failures.SKIPPED as e:
            failures.add(name, e)
            continue
        if damage is not None:
            failures.damaged[name] = damage
        if durations is not None:
            durations[row] = dur
        if rates is not None:
            rates[row] = sr
        for s in starts:
            yield row, name, s, fn


def _clip_features(items, w: Windows, batch_size: int, n_workers: int, failures: birdjepa.models.failures.Failures,
                   durations: dict | None, max_audio_mb: float, rates: dict | None = None):
    """Windows transformed in `n_workers` threads, at most ~2 batches ahead of the consumer
    (memory flat in the number and length of recordings), regrouped into full batches (only the
    last is short). A window that fails drops the rest of its recording (named in failures),
    unless the recording's data stops early (a truncated file): then the windows up to the damage
    are kept (the last one padded: `durations` becomes where the data ends), the ones after it
    dropped, and the recording is named in `failures.damaged`."""
    tasks = _window_tasks(items, w, failures, durations, max_audio_mb, rates)
    ahead = max(2 * batch_size, 4 * n_workers)
    queue, failed = collections.deque(), set()
    xs, rows, starts = [], [], []
    with concurrent.futures.ThreadPoolExecutor(max(1, n_workers)) as ex:
        def fill():
            while len(queue) < ahead:
                t = next(tasks, None)
                if t is None:
                    return
                queue.append((t[0], t[1], t[2], ex.submit(t[3], t[2])))

        fill()
        while queue:
            row, name, s, fut = queue.popleft()
            fill()
            if row in failed:
                continue
            try:
                x, damage, s = fut.result()  # the start where the data put the window
            except birdjepa.models.failures.SKIPPED as e:
                failed.add(row)
                if s > 0 and isinstance(e, errors.EmptyAudioError) and "after the data ends" \
                        in str(e):  # past the damage: the windows before it stand
                    failures.damaged.setdefault(name, str(e).split("after ", 1)[1])
                else:
                    failures.add(name if s == 0 else f"{name} at {s:g} s", e)
                continue
            if damage is not None:  # this window reaches the damage: the recording ends there
                failures.damaged.setdefault(name, damage["message"])
                if durations is not None:
                    durations[row] = min(durations.get(row, np.inf), damage["end_s"])
            xs.append(x)
            rows.append(row)
            starts.append(s)
            if len(xs) == batch_size:
                yield np.stack(xs), np.asarray(rows, np.int64), np.asarray(starts, np.float64)
                xs, rows, starts = [], [], []
    if xs:
        yield np.stack(xs), np.asarray(rows, np.int64), np.asarray(starts, np.float64)


def header_durations(source, w: Windows, audio_column: str, files: dict,
                     rows: set | None = None, *, channels_first: bool = False
                     ) -> dict[int, float]:
    """{row: its recording's seconds} from the headers (of `rows`, default all), each file read
    once however many rows name it (an event-level split names a soundscape per event); a row
    whose header cannot be read is left out (the loader skipped it, naming it)."""
    out, seen = {}, {}
    for r, _name, item in _items(source, audio_column, channels_first,
                                audio_root=files.get("audio_root", ""),
                                path_map=files.get("path_map")):
        if rows is not None and r not in rows:
            continue
        key = os.fspath(item) if isinstance(item, str | os.PathLike) else None
        try:
            if key is None or key not in seen:
                dur = _plan(item, w, files.get("max_audio_mb", birdjepa.data.paths.MAX_AUDIO_MB))[0]
                if key is not None:
                    seen[key] = dur
            out[r] = seen[key] if key is not None else dur
        except birdjepa.models.failures.SKIPPED:
            continue
    return out


def is_audio_files(source) -> bool:
    """A list or tuple of audio file paths (not Arrow shards): row i is the i-th file."""
    return isinstance(source, list | tuple) and bool(source) and all(
        isinstance(p, str | os.PathLike) and os.path.isfile(p) and not str(p).endswith(".arrow")
        for p in source)


def is_table_source(source) -> bool:
    """Shards or a `datasets.Dataset` backed by Arrow files (what the loader reads); an
    in-memory Dataset (no cache files) is read through pyarrow instead."""
    if table.is_dataset(source):
        return bool(getattr(source, "cache_files", None))
    if is_audio_files(source):
        return False
    return not (isinstance(source, bytes | bytearray | memoryview | tuple) or (
        isinstance(source, str | os.PathLike) and os.path.isfile(source)
        and not str(source).endswith(".arrow")))


def _loader_features(source, w: Windows, batch_size: int, audio_column: str, n_workers: int,
                     files: dict):
    """Centre windows of every row through the Rust loader's eval mode (one pass in row order;
    rows that fail to decode are skipped with the loader's warning naming file and row);
    `files`: the loader's audio_root, path_map and max_audio_mb."""
    cfg = birdjepa.data.LoaderConfig(
        n_workers=max(1, n_workers), n_frames=w.n_frames, n_mels=w.n_mels, clip_s=w.window_s,
        sample_rate=w.sample_rate, mean=w.mean, std=w.std, pad=w.pad, audio_column=audio_column,
        label_column=None, segment=w.segment, segment_start_column=w.segment_columns[0],
        segment_end_column=w.segment_columns[1], resampler=w.resampler, **files)
    with birdjepa.data.Loader(source, config=cfg, mode="eval", batch_size=batch_size) as loader:
        for b in loader:
            ok = b["valid"]
            if ok.any():
                yield b["data"][ok], b["index"][ok], b["start_s"][ok]


def features(source, w: Windows, *, batch_size: int = 64, audio_column: str = "audio",
             n_workers: int = 2, engine: str = "auto", channels_first: bool = False,
             durations: dict | None = None, failures: birdjepa.models.failures.Failures | None = None,
             audio_root: str = "", path_map: dict[str, str] | None = None,
             max_audio_mb: float = birdjepa.data.paths.MAX_AUDIO_MB, rates: dict | None = None
             ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Batches (x (b, n_frames, n_mels) float32, row ids (b,), start_s (b,)); a batch may be
    short. `engine`: "loader" batches centre windows of shards or a `datasets.Dataset` through
    the Rust loader's eval mode; "clip" transforms each window with `birdjepa.data.audio.clip` in
    `n_workers` threads (the Rust code drops the GIL), about two batches of windows ahead of the
    consumer and regrouped so only the last batch is short; "auto" takes the loader where it
    applies (centre windows of a table source). "clip" fills `durations` (row -> seconds) and
    `rates` (row -> the recording's own sample rate in Hz) when given; with `failures` given the caller reports them (`birdjepa.models.failures.Failures.report`), else a recording
    that fails is a counted skip with one warning at the end (all failing: an error). Path-only
    rows of a table resolve with `audio_root` / `path_map` (birdjepa.data.paths.resolve, the
    loader's rule) and are read only if they are regular files within `max_audio_mb` MB."""
    if engine not in ("auto", "loader", "clip"):
        raise ValueError(f"engine: expected 'auto', 'loader' or 'clip', got {engine!r}")
    use_loader = w.centre and is_table_source(source)
    if w.segment != "centre" and not use_loader:
        raise ValueError(f"segment={w.segment!r}: expected centre windows of shards or a "
                         f"datasets.Dataset (the loader cuts segments), got centre={w.centre} "
                         f"and {type(source).__name__}")
    if engine == "loader" and not use_loader:
        raise ValueError("engine='loader': expected centre windows of shards or a "
                         f"datasets.Dataset, got centre={w.centre} and {type(source).__name__}")
    if engine != "clip" and use_loader:
        yield from _loader_features(source, w, batch_size, audio_column, n_workers, dict(
            audio_root=audio_root, path_map=path_map or None, max_audio_mb=max_audio_mb))
        return
    fails = birdjepa.models.failures.Failures() if failures is None else failures
    items = _items(source, audio_column, channels_first, audio_root=audio_root,
                   path_map=path_map)
    yield from _clip_features(items, w, batch_size, n_workers, fails, durations, max_audio_mb,
                              rates)
    if failures is None:
        fails.report()


