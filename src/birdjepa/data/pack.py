"""`python -m birdjepa.sources pack SRC --out_dir DST`: write any readable dataset (path-only audio
included) as embedded-bytes Arrow shards of about `--shard_mb` each, for clusters where many
small files on a network file system are slow.

* Every column is kept; the audio column becomes HF's `{bytes, path}` struct whose bytes are the
  files' bytes exactly (`--codec copy`, the default) and whose path is the stored one.
* `--codec wav|flac [--sample_rate SR]` re-encodes each recording (mono, resampled once to SR, 16-bit); at the model's rate the loader neither resamples nor
  decodes a codec. Undecodable ones are kept, and named.
* The rows are planned once (`pack-plan.json` in DST: sources, row ranges per shard, settings);
  shards are written in parallel (threads: reading and writing release the GIL), each to a
  temporary file renamed when complete, with a progress bar over rows.
* Resumable: run the same command again after a kill; a shard counts as done only when pack's
  own manifest (`pack-manifest.json`: sha256 and size of each finished shard, written before
  the shard is renamed into place) lists it and its content still hashes to that; the others are
  redone. A different SRC or setting for an existing plan is an error.
* Refused in one line: a DST equal to, inside or containing a source directory, and a DST
  holding files pack did not write. DST is locked (`pack.lock`, flock) while pack writes: a
  second pack into it is refused. The first failed write (a full disk) stops the pack, and
  its temporary files are removed.
* Path-only audio resolves with `audio_root` / `path_map`, the loader's
  rule. Before anything is written every such file is checked (stat only): a missing one, or
  one that is not a regular file (a FIFO, /dev/zero, a directory) or is above `max_audio_mb`,
  is one error naming the shard, the row and the file; files are read only after the same
  check on the open file (a FIFO never blocks, a device is never read).
* At the end the row count is verified and `state.json` / `dataset_info.json` make DST a
  `save_to_disk` directory (`datasets.load_from_disk` and `birdjepa.data.Loader` read it).
"""

import concurrent.futures
import hashlib
import json
import os
import sys
import threading
import time

import numpy as np
import pyarrow as pa

import birdjepa._rs
import birdjepa.common.cli_args as cli_args
import birdjepa.common.errors as errors
import birdjepa.common.outputs as outputs
import birdjepa.data.audio
import birdjepa.data.ipc
import birdjepa.data.loader_config as loader_config
import birdjepa.data.pack_dst as pack_dst
import birdjepa.data.paths as paths

BATCH_ROWS = 100
"""Rows per record batch, as `datasets` writes audio datasets."""


def _audio_values(col: pa.ChunkedArray) -> tuple[list, list]:
    """(bytes or None, stored path or None) per row of an audio column (struct, binary or
    string of paths)."""
    t = col.type
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        flat = col.combine_chunks()
        b = flat.field("bytes").to_pylist() if "bytes" in names else [None] * len(flat)
        p = flat.field("path").to_pylist() if "path" in names else [None] * len(flat)
        nulls = flat.is_null().to_pylist()
        return ([None if n else x for x, n in zip(b, nulls, strict=True)],
                [None if n else x for x, n in zip(p, nulls, strict=True)])
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return col.to_pylist(), [None] * len(col)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [None] * len(col), col.to_pylist()
    raise errors.BadArgumentError(
        f"bad argument audio_column: expected struct {{bytes, path}}, binary or a string of "
        f"paths, got {t}")


class Source:
    """The source rows: tables (memory-mapped), each row's stored audio and its size."""

    def __init__(self, files: list[str], audio_column: str, audio_root: str, path_map):
        self.files, self.audio_column = files, audio_column
        self.tables = [birdjepa.data.ipc.read_table(f) for f in files]
        self.rows: list[tuple[int, int]] = []  # (file, row in file)
        self.audio: list[tuple[bytes | None, str | None, str | None]] = []
        for i, (f, t) in enumerate(zip(files, self.tables, strict=True)):
            if audio_column not in t.column_names:
                raise errors.DatasetError(
                    f"{f}: column '{audio_column}': no such column (columns: "
                    f"{', '.join(t.column_names)})")
            data, stored = _audio_values(t.column(audio_column))
            d = os.path.dirname(os.path.abspath(f))
            for r, (b, p) in enumerate(zip(data, stored, strict=True)):
                file = None if b else (p and paths.resolve(p, d, audio_root, path_map))
                self.rows.append((i, r))
                self.audio.append((b, p, file))

    def take(self, column: str, start: int, end: int) -> pa.Array:
        """Rows [start, end) of `column`, as one array (slices of the source tables)."""
        parts, k = [], start
        while k < end:
            i, r = self.rows[k]
            n = min(end - k, self.tables[i].num_rows - r)
            parts.append(self.tables[i].column(column).slice(r, n))
            k += n
        return pa.chunked_array([c for p in parts for c in p.chunks],
                                self.tables[0].schema.field(column).type).combine_chunks()

    def check(self, max_audio_mb: float) -> None:
        """Every path-only row's file exists and is a regular file within `max_audio_mb` MB
        (stat only); else one DatasetError naming shard, row, stored path and file."""
        for k, (b, p, file) in enumerate(self.audio):
            if b or not file:
                continue
            i, r = self.rows[k]
            where = f"{self.files[i]}: row {r}, column '{self.audio_column}'"
            try:
                paths.check_file(file, max_audio_mb)
            except FileNotFoundError:
                read_as = f", read as {file!r}" if file != p else ""
                raise errors.DatasetError(
                    f"{where}: stores {p!r}{read_as}, which does not exist; set --audio_root "
                    "(relative paths) or --path_map OLD=NEW (a moved prefix)") from None
            except errors.DatasetError as e:
                raise errors.DatasetError(f"{where}: {e}") from None

    def stamp(self, start: int, end: int) -> str:
        """What rows [start, end) are made from, as a short hash: the path, size and
        modification time of each source shard they come from and each audio file they name
        (rsync's quick check: a file rewritten in place, same size, has a new mtime)."""
        h = hashlib.sha256()
        for path in [*sorted({self.files[self.rows[k][0]] for k in range(start, end)}),
                     *(self.audio[k][2] or "" for k in range(start, end))]:
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            h.update(f"{path}\0{st and st.st_size}\0{st and st.st_mtime_ns}\n".encode())
        return h.hexdigest()[:32]

    def size(self, k: int) -> int:
        b, _, file = self.audio[k]
        if b:
            return len(b)
        try:
            return os.stat(file).st_size if file else 0
        except OSError:
            return 0


def plan(src: Source, shard_bytes: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) row ranges of about `shard_bytes` of audio each."""
    out, start, acc = [], 0, 0
    for k in range(len(src.rows)):
        acc += src.size(k)
        if acc >= shard_bytes:
            out.append((start, k + 1))
            start, acc = k + 1, 0
    if start < len(src.rows) or not out:
        out.append((start, len(src.rows)))
    return out


def _audio_array(src: Source, start: int, end: int,
                 max_audio_mb: float = paths.MAX_AUDIO_MB,
                 recode: "birdjepa.data.audio.Recoder | None" = None) -> pa.StructArray:
    """The {bytes, path} audio of rows [start, end): each file read once, straight into one
    values buffer (no per-row bytes objects, no second copy; with `recode`, each recording
    re-encoded); a file is read only if it is a regular file within `max_audio_mb` once open
    (birdjepa.data.paths.open_regular)."""
    parts, stored = [], []
    for k in range(start, end):
        b, p, file = src.audio[k]
        if not b and not file:
            raise errors.DatasetError(
                f"{src.files[src.rows[k][0]]}: row {src.rows[k][1]}, column "
                f"'{src.audio_column}': neither audio bytes nor a path")
        try:
            if recode is not None:  # the re-encoded bytes, not the file's
                where = f"{src.files[src.rows[k][0]]}: row {src.rows[k][1]}"
                parts.append(recode(b or paths.read_file(file, max_audio_mb), where, k))
            else:
                parts.append(b if b else paths.open_regular(file, max_audio_mb))
        except BaseException:
            for x in parts:
                if not isinstance(x, bytes):
                    x[0].close()
            raise
        stored.append(p)
    sizes = np.array([len(x) if isinstance(x, bytes) else x[1] for x in parts], np.int64)
    parts = [x if isinstance(x, bytes) else x[0] for x in parts]
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    values = bytearray(int(offsets[-1]))
    view = memoryview(values)
    for x, a, b in zip(parts, offsets[:-1], offsets[1:], strict=True):
        if isinstance(x, bytes):
            view[a:b] = x
            continue
        with x:
            got = x.readinto(view[a:b])
            if got != b - a or x.read(1):
                raise errors.DatasetError(f"{x.name}: the file changed while it was read "
                                                f"({b - a} bytes at open, {got} read)")
    if offsets[-1] >= 2**31:
        raise errors.BadArgumentError(
            f"bad argument audio: expected under 2 GiB of audio per {BATCH_ROWS} rows, got "
            f"{offsets[-1]} bytes")
    blobs = pa.BinaryArray.from_buffers(pa.binary(), len(parts), [
        None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)])
    return pa.StructArray.from_arrays([blobs, pa.array(stored, pa.string())],
                                      names=["bytes", "path"])


def _schema(src: Source, sample_rate: int | None = None) -> pa.Schema:
    s = src.tables[0].schema
    i = s.get_field_index(src.audio_column)
    audio = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    s = s.set(i, pa.field(src.audio_column, audio))
    meta = dict(s.metadata or {})
    hf = json.loads(meta.get(b"huggingface", b"{}"))
    feats = hf.get("info", {}).get("features")
    if feats is not None:
        feats[src.audio_column] = {**(feats.get(src.audio_column) or {}), "_type": "Audio",
                                   "decode": False}
        if sample_rate is not None:
            feats[src.audio_column]["sampling_rate"] = sample_rate
        meta[b"huggingface"] = json.dumps(hf).encode()
    return s.with_metadata(meta)


class Stopped(Exception):
    """Another shard's write failed: this one stops too."""


def write_shard(src: Source, schema: pa.Schema, start: int, end: int, path: str,
                progress=None, manifest: pack_dst.Manifest | None = None,
                stop: threading.Event | None = None,
                max_audio_mb: float = paths.MAX_AUDIO_MB,
                recode: "birdjepa.data.audio.Recoder | None" = None) -> int:
    """Rows [start, end) of `src` into `path` (via a temporary file, recorded in `manifest`,
    then renamed); raises Stopped once `stop` is set."""
    sources = src.stamp(start, end)  # stamped before it is read
    with outputs.replacing(path) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            for a in range(start, end, BATCH_ROWS):
                if stop is not None and stop.is_set():
                    raise Stopped(path)
                b = min(a + BATCH_ROWS, end)
                cols = []
                for name in schema.names:
                    if name == src.audio_column:
                        cols.append(_audio_array(src, a, b, max_audio_mb, recode))
                        continue
                    cols.append(src.take(name, a, b))
                w.write_batch(pa.RecordBatch.from_arrays(cols, schema=schema))
                if progress is not None:
                    progress(b - a)
        if manifest is not None:  # with the rows of this shard whose data stopped early
            damaged = sorted([k - start, f"{where}: {message}"] for k, where, message in
                             (recode.damaged if recode is not None else []) if start <= k < end)
            manifest.add(os.path.basename(path), str(tmp), sources, damaged=damaged)
    return end - start


def _write_all(src, schema, ranges, names, todo, dst, workers, bar, manifest,
               max_audio_mb: float = paths.MAX_AUDIO_MB,
               recode: "birdjepa.data.audio.Recoder | None" = None) -> None:
    """Write the `todo` shards; the first failure cancels the queued ones, waits for the
    running ones, removes every temporary file, and is raised."""
    stop = threading.Event()

    def one(i: int) -> int:
        try:
            return write_shard(src, schema, *ranges[i], os.path.join(dst, names[i]),
                               bar.update, manifest, stop, max_audio_mb, recode)
        except BaseException:
            stop.set()
            raise

    ex = concurrent.futures.ThreadPoolExecutor(max(1, workers))
    futs = [ex.submit(one, i) for i in todo]
    try:
        for fut in concurrent.futures.as_completed(futs):
            fut.result()
    except BaseException as e:
        stop.set()
        ex.shutdown(wait=True, cancel_futures=True)
        first = next((x for f in futs if not f.cancelled() and (x := f.exception()) is not None
                      and not isinstance(x, Stopped)), e)
        raise first from None
    ex.shutdown(wait=True)


def _finish(dst: str, names: list[str], schema: pa.Schema, n_rows: int) -> None:
    got = sum(birdjepa.data.ipc.n_rows(os.path.join(dst, n)) for n in names)
    if got != n_rows:
        raise errors.DatasetError(f"{dst}: expected {n_rows} rows in the packed shards, "
                                        f"got {got}")
    hf = json.loads((schema.metadata or {}).get(b"huggingface", b"{}"))
    info = hf.get("info", {})
    outputs.write_json(os.path.join(dst, "dataset_info.json"), info, indent=2)
    state = {"_data_files": [{"filename": n} for n in names],
             "_fingerprint": hashlib.sha256(json.dumps(names).encode()).hexdigest()[:16],
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
             "_output_all_columns": False, "_split": None}
    outputs.write_json(os.path.join(dst, "state.json"), state, indent=2)


def pack(files: list[str], dst: str, *, shard_mb: float = 500.0, workers: int = 4,
         audio_column: str = "audio", audio_root: str = "", path_map: dict | None = None,
         progress: bool = True, max_audio_mb: float = paths.MAX_AUDIO_MB,
         codec: str = "copy", sample_rate: int | None = None,
         resampler: str | None = None) -> dict:
    """Pack the Arrow `files` (`birdjepa.data.resolve_shards(...)`) into `dst`, the audio as it
    is (`codec` "copy") or re-encoded as "wav" or "flac" (16-bit) at `sample_rate` (None: each
    recording's own) with the filter `resampler` (None: a pack being resumed keeps its own, a
    plan saved before the setting existed meaning birdjepa.data.loader_config.LEGACY_RESAMPLER; a new
    pack the default); returns {"dst", "shards", "n_rows", "bytes", "seconds", "skipped" (shards
    already done), "kept" ((where, error) of recordings that could not be re-encoded),
    "damaged" ((where, message) of recordings whose data stopped early: re-encoded with what
    they held, and marked in the manifest beside their shard)}."""
    t0 = time.perf_counter()
    if codec not in ("copy", *birdjepa.data.audio.ENCODINGS) or (sample_rate is not None and (
            codec == "copy" or not 1000 <= sample_rate <= 384000)):
        raise errors.BadArgumentError(
            f"bad argument codec, sample_rate: expected copy (no rate: the bytes are kept as "
            f"they are) or wav/flac with no rate or one in [1000, 384000] Hz, got {codec!r}, "
            f"{sample_rate}")
    if resampler is not None and resampler not in loader_config.RESAMPLERS:
        raise errors.BadArgumentError(
            f"bad argument resampler: expected one of {', '.join(loader_config.RESAMPLERS)}, got "
            f"{resampler!r}")
    recode = None if codec == "copy" else birdjepa.data.audio.Recoder(codec, sample_rate)
    src = Source(files, audio_column, audio_root, path_map)
    src.check(max_audio_mb)
    ranges = plan(src, int(shard_mb * 1e6))
    n = len(ranges)
    names = [f"data-{i:05d}-of-{n:05d}.arrow" for i in range(n)]
    want = {"sources": [os.path.abspath(f) for f in files], "n_rows": len(src.rows),
            "audio_column": audio_column, "audio_root": audio_root, "path_map": path_map or {},
            "ranges": [list(r) for r in ranges], "names": names}
    want |= {"codec": codec, "sample_rate": sample_rate} if recode else {}  # old plans: copies
    pack_dst.check_dst(files, dst, names)
    os.makedirs(dst, exist_ok=True)
    fd = pack_dst.lock(dst)
    try:
        pack_dst.check_dst(files, dst, names)  # again, now that no other pack writes here
        for left in os.listdir(dst):  # a killed pack's half-written shards (none runs now)
            if outputs.original(left) in names:
                os.remove(os.path.join(dst, left))
        if recode is not None and sample_rate is not None:
            recode.resampler = pack_dst.plan_resampler(dst, resampler)
            if recode.resampler != loader_config.LEGACY_RESAMPLER:  # old plans: the legacy one
                want["resampler"] = recode.resampler
        pack_dst.check_plan(dst, want)
        outputs.write_json(os.path.join(dst, pack_dst.PLAN), want)
        schema = _schema(src, sample_rate)
        manifest = pack_dst.Manifest(dst)
        todo = [i for i, nm in enumerate(names)
                if not manifest.holds(dst, nm, src.stamp(*ranges[i]))]
        bar = _Progress(sum(ranges[i][1] - ranges[i][0] for i in todo), progress)
        try:
            _write_all(src, schema, ranges, names, todo, dst, workers, bar, manifest,
                       max_audio_mb, recode)
        finally:
            bar.close()
        _finish(dst, names, schema, len(src.rows))
    finally:
        os.close(fd)
    total = sum(os.path.getsize(os.path.join(dst, nm)) for nm in names)
    return {"dst": dst, "shards": names, "n_rows": len(src.rows), "bytes": total,
            "seconds": time.perf_counter() - t0, "skipped": n - len(todo),
            "kept": [] if recode is None else sorted(recode.kept),
            "damaged": [] if recode is None else sorted((w, m) for _, w, m in recode.damaged)}


class _Progress:
    """A one-line progress bar on stderr (rows, rate), redrawn at most every 0.5 s."""

    def __init__(self, total: int, show: bool):
        self.total, self.show, self.done = total, show and total > 0, 0
        self.t0 = self.last = time.perf_counter()
        self.lock = threading.Lock()

    def update(self, n: int) -> None:
        with self.lock:
            self.done += n
            now = time.perf_counter()
            if self.show and (now - self.last > 0.5 or self.done == self.total):
                self.last = now
                frac = self.done / self.total
                bar = "#" * int(30 * frac)
                print(f"\rpack [{bar:<30}] {self.done}/{self.total} rows "
                      f"({self.done / max(now - self.t0, 1e-9):.0f} rows/s)", end="",
                      file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.show:
            print(file=sys.stderr)


def add_options(p: cli_args.Parser) -> cli_args.Parser:
    """Every option of `python -m birdjepa.sources pack`, in one place."""
    p.add_argument("src", metavar="SRC",
                   help="the dataset: a save_to_disk directory (DIR:SPLIT for one split), Arrow shards or a glob")
    p.add_argument("--out_dir", required=True,
                   help="directory to write: a save_to_disk layout (DST above)")
    p.add_argument("--shard_mb", type=cli_args.converter(float), default=500.0,
                   help="target audio megabytes per shard")
    p.add_argument("--workers", type=cli_args.converter(int), default=4,
                   help="shards written at once")
    p.add_argument("--audio_column", default="audio", help="the audio column of SRC")
    p.add_argument("--audio_root", default="",
                   help="directory relative audio paths start from")
    p.add_path_map()
    p.add_argument("--max_audio_mb", type=cli_args.converter(float),
                   default=paths.MAX_AUDIO_MB, help="a path-only audio file "
                   "larger than this many MB is an error (only regular files are read at all)")
    p.add_argument("--split", default=None, help="the split of SRC to read, if it has several")
    p.add_argument("--codec", default="copy", choices=["copy", *birdjepa.data.audio.ENCODINGS],
                   help="copy the audio bytes, or re-encode each recording as 16-bit mono")
    p.add_argument("--sample_rate", type=cli_args.converter(int), default=None, help="with "
                   "--codec wav/flac: resample each recording to this rate (the model's) once")
    p.add_argument("--resampler", default=None, choices=list(loader_config.RESAMPLERS),
                   help="with --sample_rate: the filter (default: a resumed pack's own, else "
                   f"{loader_config.DEFAULT_RESAMPLER}, soxr HQ's response)")
    return p


def run(a, resolve) -> int:
    """Pack as the command line `a` says; `resolve(spec, split)` gives the Arrow files of SRC."""
    try:
        s = pack(resolve(a.src, a.split), a.out_dir, shard_mb=a.shard_mb, workers=a.workers,
                 audio_column=a.audio_column, audio_root=a.audio_root,
                 path_map=a.path_map or {}, max_audio_mb=a.max_audio_mb, codec=a.codec,
                 sample_rate=a.sample_rate, resampler=a.resampler)
    except (errors.Error, OSError) as e:
        return cli_args.fail(e)
    if s["damaged"]:
        names = "; ".join(f"{w} ({m})" for w, m in s["damaged"])
        print(f"warning: {len(s['damaged'])} recording(s) damaged, packed with what they hold: "
              f"{names} (marked in {pack_dst.MANIFEST})", file=sys.stderr)
    if s["kept"]:
        print(f"warning: {len(s['kept'])} recording(s) could not be decoded and were kept as "
              f"they were (first: {': '.join(s['kept'][0])})", file=sys.stderr)
    print(f"packed {s['n_rows']} rows into {len(s['shards'])} shards ({s['bytes'] / 1e6:.1f} MB, "
          f"{s['skipped']} already done) in {s['seconds']:.1f} s -> {s['dst']}")
    return 0
