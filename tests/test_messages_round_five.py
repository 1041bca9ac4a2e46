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
import birdjepa.launch as launch
import birdjepa.models.detect as detect
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
    assert launch.main(["--sweep", str(odd), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"sweep {odd}: make_cfgs(): expected a list of configs or dicts, got int" in err, err
    nobase = tmp_path / "nobase.py"
    nobase.write_text("BASE = 'no/such.toml'\n\ndef make_cfgs():\n    return [{}]\n")
    assert launch.main(["--sweep", str(nobase), "--dry-run"]) == 2
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
    assert detect.main(["MODEL", str(table), "--out", str(tmp_path / "o.csv")]) == 2
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
