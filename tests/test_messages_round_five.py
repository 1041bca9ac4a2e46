"""Issue 47 items 21a and 21: errors and warnings that said the wrong thing, or nothing, or a
traceback. Each now names the file or the value, what was expected and what was found."""

import os
import pathlib

import numpy as np
import pytest
import soundfile

import birdjepa
import birdjepa.audio
import birdjepa.data.annotation_tables as annotation_tables
import birdjepa.launch.__main__
import birdjepa.predict
import birdjepa.sources

SR = 16000


def test_resample_with_a_negative_rate_names_the_rate():
    """`resample()` with a negative rate was a bare OverflowError."""
    x = np.zeros(1600, np.float32)
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument src_sr: expected a rate "
                       r"in \[1000, 768000\] Hz, got -5$"):
        birdjepa.audio.resample(x, -5, 32000)
    with pytest.raises(birdjepa.BadArgumentError, match=r"dst_sr: expected .* got 1e\+12"):
        birdjepa.audio.resample(x, 16000, 1e12)


def test_make_cfgs_returning_a_non_list_and_a_missing_base_are_one_line(tmp_path, capsys):
    """`make_cfgs()` returning a non-list was a TypeError traceback; a sweep's missing BASE was
    reported as `--cfg`."""
    odd = tmp_path / "odd.py"
    odd.write_text("def make_cfgs():\n    return 5\n")
    assert birdjepa.launch.__main__.main(["--sweep", str(odd), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"sweep {odd}: make_cfgs(): expected a list of configs or dicts, got int" in err, err
    nobase = tmp_path / "nobase.py"
    nobase.write_text("BASE = 'no/such.toml'\n\ndef make_cfgs():\n    return [{}]\n")
    assert birdjepa.launch.__main__.main(["--sweep", str(nobase), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"sweep {nobase}: BASE: expected a TOML config, got 'no/such.toml'" in err, err
    assert "--cfg" not in err


def test_a_utf16_raven_table_is_read(tmp_path):
    """Raven on Windows writes UTF-16: its table was read as mojibake (no column found)."""
    (tmp_path / "dawn.wav").write_bytes(b"")
    text = ("Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\tSpecies\n"
            "1\tSpectrogram 1\t1\t1.0\t2.0\tmésange\n")
    table = tmp_path / "dawn.selections.txt"
    table.write_bytes(text.encode("utf-16"))
    found = annotation_tables.read([str(table)], audio_dir=str(tmp_path))
    assert found.problems == [] and [(e.start, e.end, e.label) for e in found.events] == [
        (1.0, 2.0, "mésange")]


def test_a_raven_table_given_as_a_predict_source_is_named(tmp_path, capsys):
    """`predict MODEL DET.txt` said only `error: Not an Arrow file`."""
    table = tmp_path / "DET.txt"
    table.write_text("Selection\tView\tBegin Time (s)\n")
    assert birdjepa.predict.main(["MODEL", str(table), "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"SOURCE {str(table)!r}: expected an audio file" in err[0] \
        and "a directory of audio, Arrow shards or a dataset directory" in err[0] \
        and "a text file" in err[0], err


def test_from_files_names_what_it_skips_because_it_is_not_a_regular_file(tmp_path, capsys):
    """`from_files` skipped FIFOs, dangling links and directories named `*.wav` without a word."""
    (tmp_path / "a").mkdir()
    t = np.arange(SR) / SR
    soundfile.write(tmp_path / "a" / "ok.wav", (0.2 * np.sin(2 * np.pi * 500 * t)), SR)
    os.mkfifo(tmp_path / "a" / "pipe.wav")
    (tmp_path / "a" / "gone.wav").symlink_to(tmp_path / "nowhere.wav")
    (tmp_path / "a" / "dir.wav").mkdir()
    assert birdjepa.sources.main(["from_files", str(tmp_path / "a"), "--out_dir",
                                  str(tmp_path / "ds")]) == 0
    err = capsys.readouterr().err
    line = next((x for x in err.splitlines() if "not regular files" in x), "")
    assert "3 entries" in line and "pipe.wav" in line, err
    assert pathlib.Path(tmp_path / "ds").is_dir()


def _windows_table(tmp_path, begin_path: str) -> pathlib.Path:
    """A combined Raven table, as Raven on Windows saves it, whose one selection names
    `begin_path`."""
    table = tmp_path / "win.txt"
    table.write_text("Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\tSpecies\t"
                     f"Begin Path\tFile Offset (s)\n1\tSpectrogram 1\t1\t0.2\t0.8\tamerob\t"
                     f"{begin_path}\t0.2\n")
    return table


@pytest.mark.parametrize("key", [r"C:\Users\ana\Recordings", "C:/Users/ana/Recordings",
                                 "c:\\users\\ana\\recordings\\"])
def test_a_windows_begin_path_is_mapped_by_path_map(tmp_path, capsys, key):
    """A Windows `Begin Path` (`C:\\Users\\...`) could not be mapped by any --path_map spelling
    and the suggested --audio_dir could not work: it is an absolute path, mapped component by
    component whatever the separators (and the drive's case: Windows ignores it)."""
    (tmp_path / "here").mkdir()
    soundfile.write(tmp_path / "here" / "dawn.wav", np.zeros(SR, np.float32), SR)
    table = _windows_table(tmp_path, r"C:\Users\ana\Recordings\dawn.wav")
    assert birdjepa.sources.main(["from_annotations", str(table), "--out_dir",
                                  str(tmp_path / "ds"), "--path_map",
                                  f"{key}={tmp_path / 'here'}"]) == 0, capsys.readouterr().err
    import datasets
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert ds["filepath"] == [str(tmp_path / "here" / "dawn.wav")]


def test_an_unmapped_windows_begin_path_suggests_the_path_map_that_would_work(tmp_path, capsys):
    table = _windows_table(tmp_path, r"C:\Users\ana\Recordings\dawn.wav")
    assert birdjepa.sources.main(["from_annotations", str(table), "--out_dir",
                                  str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err
    assert "a Windows path" in err and "--path_map 'C:\\Users\\ana\\Recordings=DIR'" in err, err
    assert "--audio_dir" not in err, err


def _one_table(tmp_path) -> pathlib.Path:
    soundfile.write(tmp_path / "dawn.wav", np.zeros(SR, np.float32), SR)
    table = tmp_path / "dawn.selections.txt"
    table.write_text("Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\tSpecies\n"
                     "1\tSpectrogram 1\t1\t0.2\t0.8\tamerob\n")
    return table


def test_from_annotations_writes_into_an_empty_out_dir_given_as_a_symlink_or_dot(
        tmp_path, capsys, monkeypatch):
    """An out_dir that is a symlink said "[Errno 20] Not a directory", `--out_dir .` said
    "[Errno 22] Invalid argument": an empty directory however named is written into (the link
    kept, the current directory still the one the shell is in)."""
    import datasets
    table = _one_table(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    assert birdjepa.sources.main(["from_annotations", str(table), "--out_dir",
                                  str(tmp_path / "link")]) == 0, capsys.readouterr().err
    assert (tmp_path / "link").is_symlink()
    assert len(datasets.load_from_disk(str(tmp_path / "real"))) == 1
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    before = os.stat(".")
    assert birdjepa.sources.main(["from_annotations", str(table), "--out_dir", "."]) == 0, \
        capsys.readouterr().err
    assert os.path.samestat(before, os.stat(tmp_path / "cwd"))  # the same directory, filled
    assert len(datasets.load_from_disk(str(tmp_path / "cwd"))) == 1
    assert sorted(os.listdir(tmp_path / "cwd")) == sorted(os.listdir(tmp_path / "real"))


def test_a_fifo_table_or_recording_is_named_as_what_it_is(tmp_path, capsys):
    """A FIFO table or FIFO audio was reported as "does not exist"."""
    os.mkfifo(tmp_path / "pipe.selections.txt")
    assert birdjepa.sources.main(["from_annotations", str(tmp_path / "pipe.selections.txt"),
                                  "--out_dir", str(tmp_path / "ds")]) != 0
    err = capsys.readouterr().err
    assert "FIFO" in err and "does not exist" not in err, err
    table = _one_table(tmp_path)
    (tmp_path / "dawn.wav").unlink()
    os.mkfifo(tmp_path / "dawn.wav")
    assert birdjepa.sources.main(["from_annotations", str(table), "--out_dir",
                                  str(tmp_path / "ds")]) != 0
    err = capsys.readouterr().err
    assert "dawn.wav" in err and "FIFO" in err and "does not exist" not in err, err
