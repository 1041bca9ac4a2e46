"""The one place the package opens Arrow IPC files: a shard is either kind (the stream format
`datasets.save_to_disk` and pack write, or the random-access file format), and every reader
here takes both. Writing stays with its writer (pack, demo_data)."""

import contextlib
import os
from collections.abc import Iterator

import pyarrow as pa

import birdjepa._rs


@contextlib.contextmanager
def open_ipc(path: str) -> Iterator:
    """A reader of the Arrow IPC file at `path`, memory-mapped, stream or file format alike (both
    have `.schema` and `.read_all()`). A path that is not a regular file is a DatasetError
    before anything opens it (opening a FIFO blocks until a writer comes)."""
    birdjepa._rs.check_shard_file(path, os.stat(path).st_mode)  # the loader's rule and words
    with pa.memory_map(str(path)) as f:
        try:
            reader = pa.ipc.open_stream(f)
        except pa.ArrowInvalid:
            f.seek(0)
            reader = pa.ipc.open_file(f)
        yield reader


def read_table(path: str) -> pa.Table:
    """Every row of the Arrow IPC file at `path`."""
    with open_ipc(path) as reader:
        return reader.read_all()


def schema(path: str) -> pa.Schema:
    """The schema of the Arrow IPC file at `path`, without reading rows."""
    with open_ipc(path) as reader:
        return reader.schema


def n_rows(path: str) -> int:
    """The number of rows of the Arrow IPC file at `path` (record batch by record batch)."""
    with open_ipc(path) as reader:
        if isinstance(reader, pa.ipc.RecordBatchFileReader):
            return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
        return sum(b.num_rows for b in reader)
