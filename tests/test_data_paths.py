"""One rule for where a stored audio path points (issue 26 item 3, issue 30 item 6): the Python
resolver (birdjepa.data.paths.resolve, used by pack and the evaluation readers) and the Rust
loader's (ReadOptions::resolve) give the same file on the same cases, and `path_map` matches
whole path components: {"/old/run1": NEW} never maps /old/run10/x.wav."""

import os

import pyarrow as pa
import pytest

import birdjepa._rs
import birdjepa.data.paths as paths
import birdjepa.data.table as table

SHARD = "/data/ds"
CASES = [
    # (stored, audio_root, path_map, expected)
    ("/abs/a.ogg", "", {}, "/abs/a.ogg"),
    ("x/a.ogg", "", {}, "/data/ds/x/a.ogg"),
    ("x/a.ogg", "/root", {}, "/root/x/a.ogg"),
    ("/old/run1/x.wav", "", {"/old/run1": "/new"}, "/new/x.wav"),
    ("/old/run10/x.wav", "", {"/old/run1": "/new"}, "/old/run10/x.wav"),
    ("/old/run1", "", {"/old/run1": "/new"}, "/new"),
    ("/old/run1/x.wav", "", {"/old/run1/": "/new/"}, "/new/x.wav"),
    ("/old/run10/x.wav", "", {"/old/run1/": "/new"}, "/old/run10/x.wav"),
    ("/home/u/.cache/z.ogg", "/root", {"/home/u/.cache": "/scratch",
                                       "/home/u/.cache/hf/ex": "rel"}, "/scratch/z.ogg"),
    ("/home/u/.cache/hf/ex/z.ogg", "/root", {"/home/u/.cache": "/scratch",
                                             "/home/u/.cache/hf/ex": "rel"}, "/root/rel/z.ogg"),
    ("/a/b.wav", "", {"/": "/mnt"}, "/mnt/a/b.wav"),
    ("b.wav", "", {"/": "/mnt"}, "/data/ds/b.wav"),
    ("/a/b/c.wav", "", {"/a": "/x", "/a/": "/y"}, "/y/b/c.wav"),  # a tie: the greater key
    ("/ab/c.wav", "", {"/a": "/x"}, "/ab/c.wav"),
    ("rel/x.wav", "", {"rel": "/abs"}, "/abs/x.wav"),
    ("relx/y.wav", "", {"rel": "/abs"}, "/data/ds/relx/y.wav"),
]


@pytest.mark.parametrize("stored,root,path_map,want", CASES)
def test_python_and_rust_resolve_a_stored_path_alike(stored, root, path_map, want):
    assert paths.resolve(stored, SHARD, root, path_map) == want
    assert birdjepa._rs._resolve_audio_path(stored, SHARD, root, path_map) == want


def test_the_evaluation_reader_takes_audio_root_and_path_map(tmp_path):
    """data.table.read_audio resolves path-only rows as the loader does with the same settings
    (it used to ignore both, so evaluate could not read moved data)."""
    (tmp_path / "new").mkdir()
    shard = tmp_path / "shards" / "data-00000-of-00001.arrow"
    shard.parent.mkdir()
    t = pa.table({"audio": ["/old/run1/a.wav", "/old/run10/b.wav", "c.wav"], "label": [0, 1, 2]})
    with pa.OSFile(str(shard), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    got = table.read_audio(str(shard.parent), "audio", audio_root=str(tmp_path / "root"),
                           path_map={"/old/run1": str(tmp_path / "new")})
    assert got == [str(tmp_path / "new" / "a.wav"), "/old/run10/b.wav",
                   os.path.join(tmp_path / "root", "c.wav")]
    assert table.read_audio(str(shard.parent), "audio")[2] == str(shard.parent / "c.wav")


def test_which_files_are_read_is_one_rule_in_rust(tmp_path):
    """Issue 39 item 2: "only a regular file is read" (a FIFO, a device or a directory is
    refused before anything opens it) and its words were written three times (paths.kind_of,
    ipc.open_ipc, rust/src/shards/audio_file.rs); Python's readers now ask Rust."""
    import inspect

    import birdjepa.data.ipc as ipc

    fifo = tmp_path / "a.wav"
    os.mkfifo(fifo)
    big = tmp_path / "big.wav"
    big.write_bytes(b"x" * 2_500_000)
    kinds = {fifo: "a FIFO (named pipe)", "/dev/zero": "a character device",
             tmp_path: "a directory"}
    for path, kind in kinds.items():
        st = os.stat(path)
        assert birdjepa._rs.file_kind(st.st_mode) == paths.kind_of(st) == kind
        with pytest.raises(birdjepa._rs.DatasetError) as e:
            paths.check_file(path)
        assert str(e.value) == f"{path}: expected a regular audio file, got {kind}"
        with pytest.raises(birdjepa._rs.DatasetError) as e:
            ipc.schema(str(path))
        assert str(e.value) == (f"{path}: expected a regular file (an Arrow IPC stream or file), "
                                f"got {kind}")
    assert birdjepa._rs.file_kind(os.stat(big).st_mode) is None
    assert paths.check_file(big) == 2_500_000
    with pytest.raises(birdjepa._rs.DatasetError) as e:
        paths.read_file(big, max_audio_mb=1.0)
    assert str(e.value) == (f"{big}: expected at most max_audio_mb=1 MB, got 2.5 MB (raise "
                            "max_audio_mb to read it)")
    for module in (paths, ipc):
        source = inspect.getsource(module)
        assert "S_ISREG" not in source and "a character device" not in source, module.__name__
