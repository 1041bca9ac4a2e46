"""Output files of embed and predict (issue 38 items 4 and 5): the suffix check and the writer
agree in any case, and a write that fails leaves the file that was there."""

import errno
import os
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet
import pytest

import birdjepa.common.outputs as outputs
import birdjepa.models.outfile as outfile
import birdjepa.models.recordings as recordings
from birdjepa.common.outputs import LEDGER

WAV = (b"RIFF" + (36 + 3200).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
       + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (16000).to_bytes(4, "little")
       + (32000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
       + b"data" + (3200).to_bytes(4, "little") + bytes(3200))
"""0.1 s of silence, 16-bit mono 16 kHz."""
COLS = {"file": pa.array(["a.wav", "b.wav"]), "start_s": pa.array([0.0, 5.0]),
        "embedding": outfile.vectors(np.arange(6, dtype=np.float32).reshape(2, 3))}


@pytest.mark.parametrize("name", ["x.PARQUET", "x.Csv", "x.NPZ"])
def test_upper_case_suffix_is_written_as_checked(tmp_path, name):
    out = tmp_path / name
    outfile.check_out(out, (".parquet", ".csv", ".npz"))
    outfile.write(COLS, out)
    kind = name.rsplit(".", 1)[1].lower()
    if kind == "parquet":
        assert pyarrow.parquet.read_table(out).column("start_s").to_pylist() == [0.0, 5.0]
    elif kind == "csv":
        assert pyarrow.csv.read_csv(out).column("file").to_pylist() == ["a.wav", "b.wav"]
    else:
        np.testing.assert_array_equal(np.load(out)["embedding"], [[0, 1, 2], [3, 4, 5]])
    # no temporary file left; the ledger that says the file is ours
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, LEDGER])


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "emb.parquet"
    outfile.write(COLS, out)
    before = out.read_bytes()

    def full_disk(table, where):
        with open(where, "wb") as f:
            f.write(b"PAR1 partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(where))

    monkeypatch.setattr(pyarrow.parquet, "write_table", full_disk)
    with pytest.raises(OSError, match="No space left"):
        outfile.write(COLS, out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEDGER, "emb.parquet"]


def test_ctrl_c_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """Issue 38 item 24: Ctrl-C in embed printed a KeyboardInterrupt traceback."""
    import birdjepa.embed

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(birdjepa.embed, "run", interrupted)
    out = tmp_path / "e.parquet"
    assert birdjepa.embed.main(["MODEL", "SRC", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["interrupted: no windows written"]
    assert not out.exists()


OURS = {**COLS, "end_s": pa.array([5.0, 10.0]), "duration_s": pa.array([10.0, 10.0]),
        "padded_s": pa.array([0.0, 0.0])}


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".npz"])
def test_a_users_file_is_never_replaced_unasked(tmp_path, capsys, suffix):
    """Issue 38, acceptance: an output never overwrites a file the command did not write (refused
    in one line before any compute, or --overwrite); one of its own outputs is replaced."""
    import birdjepa.embed
    import birdjepa.predict

    main = birdjepa.predict.main if suffix == ".csv" else birdjepa.embed.main  # predict: CSV
    theirs = tmp_path / f"mine{suffix}"  # written by the user's own code, not recorded
    outfile._write_as(suffix, {"species": pa.array(["a", "b"]),
                                  "start_s": pa.array([1.0, 2.0])}, theirs)
    before = theirs.read_bytes()
    assert main(["MODEL", "SRC", "--out", str(theirs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --out: expected a new file or one embed/predict wrote, got "
                   f"'{theirs}', which holds something else; --overwrite replaces it"], err
    assert theirs.read_bytes() == before
    ours = tmp_path / f"ours{suffix}"
    outfile.write(OURS, ours)
    for out, extra in ((ours, []), (theirs, ["--overwrite"])):  # past the check: SOURCE fails
        assert main(["MODEL", "SRC", "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert "--out" not in err and ("MODEL: expected" in err or "SOURCE: expected" in err)


def test_a_users_raven_table_is_never_replaced_unasked(tmp_path, capsys):
    import birdjepa.predict

    audio = tmp_path / "dawn.wav"
    audio.write_bytes(WAV)
    out = tmp_path / "tables"
    out.mkdir()
    mine = "Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\n1\tSpectrogram 1\t1\t0\t1\n"
    (out / "dawn.selections.txt").write_text(mine)  # annotated by hand in Raven
    rc = birdjepa.predict.main(["MODEL", str(audio), "--format", "raven", "--out_dir", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "dawn.selections.txt', which holds something else; --overwrite" in err
    assert (out / "dawn.selections.txt").read_text() == mine
    rc = birdjepa.predict.main(["MODEL", str(audio), "--format", "raven", "--out_dir", str(out),
                      "--overwrite"])
    assert rc == 2 and "MODEL: expected a run directory" in capsys.readouterr().err


def test_an_output_changed_since_it_was_written_is_not_replaced(tmp_path):
    """Issue 47 item 6a: a predict table the user reviewed (a `verified` column added, a species
    corrected) still looked like predict's own by its columns and was replaced on the next run.
    Ours is what the command wrote, unchanged since (a ledger beside it: name, size, sha256);
    a copy under another name, or an edited one, is not."""
    ours = tmp_path / "det.csv"
    outfile.write(OURS, ours)
    assert outfile.is_output(ours)
    (tmp_path / "copy.csv").write_bytes(ours.read_bytes())
    assert not outfile.is_output(tmp_path / "copy.csv")
    lines = ours.read_text().splitlines()
    ours.write_text("\n".join([lines[0] + ",verified"] + [x + ",yes" for x in lines[1:]]) + "\n")
    assert not outfile.is_output(ours)
    outfile.write(OURS, ours)
    assert outfile.is_output(ours)
    ours.write_text(ours.read_text().replace("a.wav", "A.wav"))  # one cell corrected
    assert not outfile.is_output(ours)


def test_a_users_file_list_beside_a_combined_raven_table_is_never_replaced(tmp_path, capsys):
    """Item 2: `--format raven --out DET.txt` wrote DET.list.txt beside it unchecked."""
    import birdjepa.predict

    audio = tmp_path / "dawn.wav"
    audio.write_bytes(WAV)
    mine = tmp_path / "DET.list.txt"
    mine.write_text("my own list\n")
    rc = birdjepa.predict.main(["MODEL", str(audio), "--format", "raven", "--out", str(tmp_path / "DET.txt")])
    err = capsys.readouterr().err
    assert rc == 2 and f"'{mine}', which holds something else; --overwrite" in err, err
    assert mine.read_text() == "my own list\n"


def test_per_recording_tables_are_named_as_checked_when_a_recording_fails(tmp_path):
    """Item 3: names were checked from every SOURCE recording (two x.wav: `a_x`, `b_x`) but
    written from those that decoded: with one failing, the other became x.selections.txt, never
    checked, replacing a user's file of that name."""
    import birdjepa.models.raven as raven

    out = tmp_path / "tables"
    out.mkdir()
    (out / "x.selections.txt").write_text("a user's table\n")
    files = [str(tmp_path / "a" / "x.wav"), str(tmp_path / "b" / "x.wav")]
    det = {"file": pa.array([files[1]]), "start_s": pa.array([0.0]), "end_s": pa.array([5.0]),
           "class": pa.array(["amerob"]), "confidence": pa.array([0.9]),
           "class_index": pa.array([0]), "padded_s": pa.array([0.0])}
    names = raven.names(sorted(files))
    written = raven.write_per_recording(det, out, [files[1]], {files[1]: 16000.0}, names)
    assert [p.name for p in written] == [f"{names[files[1]]}.selections.txt"]
    assert written[0].name != "x.selections.txt"
    assert (out / "x.selections.txt").read_text() == "a user's table\n"


def test_one_recording_named_two_ways_is_read_once(tmp_path):
    """Issue 47 item 20b: `predict --format raven --out_dir D recs ./recs/a.wav` (one file
    named two ways) was an AssertionError in raven.names, and embed and a combined predict
    processed the file twice. SOURCE names each file once (the first spelling, by its real
    path), with a warning that says so."""
    recs = tmp_path / "recs"
    recs.mkdir()
    (recs / "a.wav").write_bytes(WAV)
    (recs / "b.wav").write_bytes(WAV)
    (tmp_path / "link.wav").symlink_to(recs / "b.wav")
    import warnings

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        src = recordings.resolve([str(recs), str(recs / "." / "a.wav"), str(tmp_path / "link.wav")])
    assert src.files == [str(recs / "a.wav"), str(recs / "b.wav")]
    said = [str(x.message) for x in w]
    assert any("named 2 recordings again" in m for m in said), said


def test_a_full_disk_under_out_is_one_line_and_keeps_the_old_file(tmp_path, capsys,
                                                                  monkeypatch):
    """Issue 47 item 20a: a full disk under `embed`/`predict --out` was an OSError traceback
    (the old file was kept: good). One line naming the file and why, exit 1."""
    import birdjepa.embed

    out = tmp_path / "e.parquet"
    outfile.write(OURS, out)
    before = out.read_bytes()

    def full(args):
        outfile.write(OURS, out)

    def no_space(table, where):
        raise OSError(errno.ENOSPC, "No space left on device", str(where))

    monkeypatch.setattr(birdjepa.embed, "run", full)
    monkeypatch.setattr(pyarrow.parquet, "write_table", no_space)
    assert birdjepa.embed.main(["MODEL", "SRC", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: could not write {out}: No space left on device (the file there "
                   "before is kept)"], err
    assert out.read_bytes() == before


def test_an_evaluate_out_dir_that_is_a_file_is_refused_before_anything(tmp_path):
    """Item 20a: an evaluate out_dir that is a file failed only after embedding."""
    import birdjepa.config
    import birdjepa.evaluate.runner

    f = tmp_path / "out"
    f.write_text("a file")
    with pytest.raises(birdjepa.config.ConfigError, match=r"out_dir: expected a directory \(or "
                       r"none\), got .*out', a file"):
        birdjepa.evaluate.runner.check_out_dir(f)


def test_a_directory_is_written_beside_or_inside_and_renamed_whole(tmp_path, monkeypatch):
    """Issue 50 item 5: `outputs.replacing_dir`, the one directory writer (pack, the demo corpus
    and soundscapes, from_annotations): a new directory appears whole; an empty one (a link to
    one) keeps its identity and gets the files, the reader's file last; an old one is replaced
    whole; a failed write leaves what was there and no temporary, which `original` names."""
    def files(d):
        return sorted(p.name for p in d.iterdir())

    new = tmp_path / "new"
    with outputs.replacing_dir(new, last="state.json") as tmp:
        assert tmp.parent == tmp_path and outputs.original(tmp.name) == "new"
        (tmp / "a").write_text("1")
        (tmp / "state.json").write_text("{}")
        assert not new.exists()  # a reader never sees it half-written
    assert files(new) == ["a", "state.json"]

    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    moved, real_rename = [], os.rename
    with monkeypatch.context() as m, outputs.replacing_dir(link, last="state.json") as tmp:
        assert tmp.parent == link and outputs.original(tmp.name) == "link"
        for name in ("state.json", "b", "c"):
            (tmp / name).write_text(name)
        m.setattr(os, "rename", lambda a, b: (moved.append(pathlib.Path(b).name),
                                              real_rename(a, b)))
    assert link.is_symlink() and files(target) == ["b", "c", "state.json"]
    assert moved[-1] == "state.json"

    with outputs.replacing_dir(new) as tmp:
        (tmp / "z").write_text("2")
    assert files(new) == ["z"] and files(tmp_path) == ["link", "new", "target"]

    with pytest.raises(OSError), outputs.replacing_dir(new) as tmp:
        (tmp / "half").write_text("x")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert files(new) == ["z"] and files(tmp_path) == ["link", "new", "target"]


def test_a_directory_set_aside_by_a_killed_writer_comes_back(tmp_path):
    """A process killed between `replacing_dir`'s two renames left the old output aside
    (`.NAME.PID.old`) and nothing at NAME: `original` names it, and the next writer puts it
    back before it starts (so a write that then fails still leaves it), or removes it once NAME
    is there again. A live process's is left alone."""
    dead = 2**22 + 12345  # above pid_max's default: no such process
    out = tmp_path / "out"
    kept = tmp_path / f".out.{dead}.old"
    kept.mkdir()
    (kept / "state.json").write_text("old")
    assert outputs.original(kept.name) == "out"
    with pytest.raises(OSError), outputs.replacing_dir(out) as tmp:
        raise OSError(errno.ENOSPC, "No space left on device")
    assert (out / "state.json").read_text() == "old" and not kept.exists()

    stale, live = tmp_path / f".out.{dead}.old", tmp_path / f".out.{os.getppid()}.old"
    stale.mkdir()
    live.mkdir()
    with outputs.replacing_dir(out) as tmp:
        (tmp / "state.json").write_text("new")
    assert (out / "state.json").read_text() == "new"
    assert not stale.exists() and live.is_dir()
