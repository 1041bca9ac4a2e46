"""Output files of embed and predict (issue 38 items 4 and 5): the suffix check and the writer
agree in any case, and a write that fails leaves the file that was there."""

import errno

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet
import pytest

import birdjepa.models.recordings as recordings

WAV = (b"RIFF" + (36 + 3200).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
       + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (16000).to_bytes(4, "little")
       + (32000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
       + b"data" + (3200).to_bytes(4, "little") + bytes(3200))
"""0.1 s of silence, 16-bit mono 16 kHz."""
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


OURS = {**COLS, "end_s": pa.array([5.0, 10.0]), "duration_s": pa.array([10.0, 10.0]),
        "padded_s": pa.array([0.0, 0.0])}


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".npz"])
def test_a_users_file_is_never_replaced_unasked(tmp_path, capsys, suffix):
    """Issue 38, acceptance: an output never overwrites a file the command did not write (refused
    in one line before any compute, or --overwrite); one of its own outputs is replaced."""
    import birdjepa.models.detect as detect
    import birdjepa.models.embed_cli as embed_cli

    main = detect.main if suffix == ".csv" else embed_cli.main  # predict writes CSV tables
    theirs = tmp_path / f"mine{suffix}"
    recordings.write({"species": pa.array(["a", "b"]), "start_s": pa.array([1.0, 2.0])}, theirs)
    before = theirs.read_bytes()
    assert main(["MODEL", "SRC", "--out", str(theirs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --out: expected a new file or one embed/predict wrote, got "
                   f"'{theirs}', which holds something else; --overwrite replaces it"], err
    assert theirs.read_bytes() == before
    ours = tmp_path / f"ours{suffix}"
    recordings.write(OURS, ours)
    for out, extra in ((ours, []), (theirs, ["--overwrite"])):  # past the check: SOURCE fails
        assert main(["MODEL", "SRC", "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert "--out" not in err and ("MODEL: expected" in err or "SOURCE: expected" in err)


def test_a_users_raven_table_is_never_replaced_unasked(tmp_path, capsys):
    import birdjepa.models.detect as detect

    audio = tmp_path / "dawn.wav"
    audio.write_bytes(WAV)
    out = tmp_path / "tables"
    out.mkdir()
    mine = "Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\n1\tSpectrogram 1\t1\t0\t1\n"
    (out / "dawn.selections.txt").write_text(mine)  # annotated by hand in Raven
    rc = detect.main(["MODEL", str(audio), "--format", "raven", "--out_dir", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "dawn.selections.txt', which holds something else; --overwrite" in err
    assert (out / "dawn.selections.txt").read_text() == mine
    rc = detect.main(["MODEL", str(audio), "--format", "raven", "--out_dir", str(out),
                      "--overwrite"])
    assert rc == 2 and "MODEL: expected a run directory" in capsys.readouterr().err
