"""Issue 29 item 9: path-only data with today's `datasets` (5.x embeds the audio on
save_to_disk): `python -m birdjepa.sources from_files` writes path-only shards the loader reads,
labels from species folders, and with --relative they move with the audio."""

import shutil

import numpy as np
import pytest
import soundfile

import birdjepa.data
import birdjepa.data.table as table
import birdjepa.sources

SR = 32000


def _tree(root):
    """Two species folders of tone recordings; returns {path: (species, frequency)}."""
    out = {}
    for i, (sp, f) in enumerate([("amerob", 500), ("amerob", 700), ("norcar", 2000),
                                 ("norcar", 3000), ("norcar", 4000)]):
        p = root / sp / f"r{i}.{'flac' if i % 2 else 'wav'}"
        p.parent.mkdir(parents=True, exist_ok=True)
        t = np.arange(int(1.5 * SR)) / SR
        soundfile.write(p, (0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32), SR)
        out[p] = (sp, f)
    return out


def test_from_files_writes_path_only_shards_the_loader_reads(tmp_path, capsys):
    files = _tree(tmp_path / "audio")
    (tmp_path / "audio" / "norcar" / "folder.wav").mkdir()  # not a file: not a row
    assert birdjepa.sources.main(["from_files", str(tmp_path / "audio"), "--out_dir", str(tmp_path / "ds"),
                                  "--label_from", "parent", "--relative"]) == 0
    t = table.read(tmp_path / "ds", ["audio", "label", "file"])
    assert t.num_rows == 5
    audio = t.column("audio").combine_chunks()
    assert audio.field("bytes").null_count == 5  # path-only: no bytes embedded
    assert table.class_names(tmp_path / "ds", "label") == ["amerob", "norcar"]
    want = [["amerob", "norcar"].index(files[p][0]) for p in sorted(files)]
    assert t.column("label").to_pylist() == want
    # Moved together (audio and shards), the relative paths still resolve: the loader decodes
    # each row's own file (its tone's frequency is the loudest fbank bin's).
    shutil.move(tmp_path / "audio", tmp_path / "moved" / "audio")
    shutil.move(tmp_path / "ds", tmp_path / "moved" / "ds")
    with birdjepa.data.Loader(tmp_path / "moved" / "ds", batch_size=5, mode="eval",
                              clip_s=1.0, n_frames=98, n_workers=1) as ev:
        b = next(iter(ev))
    assert b["valid"].all() and list(b["target"]) == want
    peak = b["data"].mean(1).argmax(1)
    assert (np.diff(peak[:2]) > 0).all() and (np.diff(peak[2:]) > 0).all()  # 500<700, 2k<3k<4k


def test_from_files_errors_are_one_line(tmp_path, capsys):
    assert birdjepa.sources.main(["from_files", str(tmp_path / "none"), "--out_dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: SRC: expected an audio file or a directory")


def test_from_files_skips_what_is_not_audio_and_counts_each_class(tmp_path, capsys):
    """Issue 36 item 6.5: a text file named fake.wav and an empty .flac became rows (the loader
    then failed on them mid-run), nothing was counted, and the output did not open with
    `datasets.load_from_disk`. Now every file's header is read first: bad files are skipped,
    named and counted in one line; rows per class are printed; the directory is a
    save_to_disk directory."""
    datasets = pytest.importorskip("datasets")
    _tree(tmp_path / "audio")
    (tmp_path / "audio" / "norcar" / "fake.wav").write_text("not audio at all\n" * 40)
    (tmp_path / "audio" / "amerob" / "empty.flac").write_bytes(b"")
    assert birdjepa.sources.main(["from_files", str(tmp_path / "audio"), "--out_dir",
                                  str(tmp_path / "ds"), "--label_from", "parent"]) == 0
    out, err = capsys.readouterr()
    warn = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "skipped 2 of 7 files" in warn[0]
    assert "fake.wav" in warn[0] and "empty.flac" in warn[0]
    assert "5 recordings" in out and "amerob 2, norcar 3" in out
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert ds.num_rows == 5 and ds.features["label"].names == ["amerob", "norcar"]
    paths = [a["path"] for a in ds.cast_column("audio", datasets.Audio(decode=False))["audio"]]
    assert not any(p.endswith(("fake.wav", "empty.flac")) for p in paths)
    assert table.read(tmp_path / "ds", ["label"]).num_rows == 5  # and the loader's reader


def test_from_files_without_one_readable_recording_is_an_error(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "fake.wav").write_text("RIFF? no\n")
    (tmp_path / "a" / "empty.flac").write_bytes(b"")
    assert birdjepa.sources.main(["from_files", str(tmp_path / "a"), "--out_dir",
                                  str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: SRC: none of the 2 audio files")
    assert "empty.flac" in err[0] and not (tmp_path / "ds").exists()


def test_a_file_name_that_is_not_utf8_is_skipped_by_name_and_the_rest_written(tmp_path, capsys):
    """Issue 47 item 18: a recording named `caf\\xe9.wav` (Latin-1, as old recorder cards write
    names) made embed, predict and from_files exit 2 on a codec error before doing anything.
    It is skipped, named (its bytes), and everything else is read and written."""
    import os
    import shutil

    import birdjepa.models.recordings as recordings

    files = _tree(tmp_path / "audio")
    latin1 = os.fsencode(str(tmp_path / "audio" / "norcar")) + b"/caf\xe9.wav"
    shutil.copyfile(os.fsencode(str(next(iter(files)))), latin1)
    assert birdjepa.sources.main(["from_files", str(tmp_path / "audio"), "--out_dir",
                                  str(tmp_path / "ds"), "--label_from", "parent"]) == 0
    err = capsys.readouterr().err
    assert "caf\\xe9.wav" in err and "not UTF-8" in err, err
    assert table.read(tmp_path / "ds", ["label"]).num_rows == 5
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        src = recordings.resolve([str(tmp_path / "audio")])
    assert len(src.files) == 5 and all("caf" not in f for f in src.files)
    said = [str(w.message) for w in caught]
    assert any("caf\\xe9.wav" in m and "not UTF-8" in m for m in said), said
