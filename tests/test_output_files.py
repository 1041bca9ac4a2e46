"""Output files of embed and predict (issue 38 items 4 and 5): the suffix check and the writer
agree in any case, and a write that fails leaves the file that was there."""

import errno

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet
import pytest

import birdjepa.models.recordings as recordings

COLS = {"file": pa.array(["a.wav", "b.wav"]), "start_s": pa.array([0.0, 5.0]),
        "embedding": recordings.vectors(np.arange(6, dtype=np.float32).reshape(2, 3))}


@pytest.mark.parametrize("name", ["x.PARQUET", "x.Csv", "x.NPZ"])
def test_upper_case_suffix_is_written_as_checked(tmp_path, name):
    out = tmp_path / name
    recordings.check_out(out, (".parquet", ".csv", ".npz"))
    recordings.write(COLS, out)
    kind = name.rsplit(".", 1)[1].lower()
    if kind == "parquet":
        assert pyarrow.parquet.read_table(out).column("start_s").to_pylist() == [0.0, 5.0]
    elif kind == "csv":
        assert pyarrow.csv.read_csv(out).column("file").to_pylist() == ["a.wav", "b.wav"]
    else:
        np.testing.assert_array_equal(np.load(out)["embedding"], [[0, 1, 2], [3, 4, 5]])
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "emb.parquet"
    recordings.write(COLS, out)
    before = out.read_bytes()

    def full_disk(table, where):
        with open(where, "wb") as f:
            f.write(b"PAR1 partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(where))

    monkeypatch.setattr(pyarrow.parquet, "write_table", full_disk)
    with pytest.raises(OSError, match="No space left"):
        recordings.write(COLS, out)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["emb.parquet"]


def test_ctrl_c_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """Issue 38 item 24: Ctrl-C in embed printed a KeyboardInterrupt traceback."""
    import birdjepa.models.embed_cli as embed_cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(embed_cli, "run", interrupted)
    out = tmp_path / "e.parquet"
    assert embed_cli.main(["MODEL", "SRC", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["interrupted: no windows written"]
    assert not out.exists()
