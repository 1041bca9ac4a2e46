"""Issue 29 item 9: path-only data with today's `datasets` (5.x embeds the audio on
save_to_disk): `python -m birdjepa.sources from_files` writes path-only shards the loader reads,
labels from species folders, and with --relative they move with the audio."""

import shutil

import numpy as np
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
