"""Labels: types with a hint, ranges checked at open, n_classes checked in make_loaders and in
`launch --dry-run` (which opens every entry's shards)."""

import dataclasses
import pathlib

import loader_shards
import pyarrow as pa
import pytest

import birdjepa
import birdjepa.config
import birdjepa.data
import birdjepa.launch.__main__
import birdjepa.train.loaders

pytestmark = pytest.mark.timeout(120)

SMALL = dict(transform="debug", n_frames=16, n_mels=8, clip_s=0.1, batch_size=8, mode="eval")
DEMO = pathlib.Path(__file__).resolve().parents[1] / "configs" / "demo.toml"


def _write(path, labels, label_type=loader_shards.INT64):
    tbl = loader_shards.table(range(len(labels)), labels=lambda i: labels[i],
                              label_type=label_type)
    return loader_shards.write(path, tbl)


def test_string_labels_suggest_class_encode_column(tmp_path):
    p = _write(tmp_path / "s.arrow", ["owl", "tit", "owl"], pa.string())
    with pytest.raises(birdjepa.DatasetError,
                       match=r"s\.arrow: column 'label': expected an integer label type \(int64\) "
                             r"or a list of them \(list<int64>, multilabel\), got Utf8 "
                             r".*class_encode_column\('label'\)"):
        birdjepa.data._DebugLoader([p], **SMALL)


def test_labels_below_minus_one_fail_at_open_naming_file_and_row(tmp_path):
    p = _write(tmp_path / "n.arrow", [0, 3, -5, 2])
    with pytest.raises(birdjepa.DatasetError,
                       match=r"n\.arrow: row 2, column 'label': expected class ids >= 0 .*got -5"):
        birdjepa.data._DebugLoader([p], **SMALL)


def test_uint64_past_int64_fails_at_open_naming_the_row(tmp_path):
    p = _write(tmp_path / "u.arrow", [1, 2**63 + 5, 3], pa.uint64())
    with pytest.raises(birdjepa.DatasetError,
                       match=r"u\.arrow: row 1, column 'label': label 9223372036854775813 does "
                             r"not fit in int64"):
        birdjepa.data._DebugLoader([p], **SMALL)
    ok = _write(tmp_path / "ok.arrow", [1, 7, 3], pa.uint64())
    with birdjepa.data._DebugLoader([ok], **SMALL) as ev:
        assert ev.label_range["max"] == (7, ok, 1)


def test_label_range_reports_extremes_nulls_and_n_classes_problems(tmp_path):
    a = _write(tmp_path / "a.arrow", [0, 4, None, 2])
    b = _write(tmp_path / "b.arrow", [1, 10**12, 3])
    with birdjepa.data._DebugLoader([a, b], **SMALL) as ev:
        r = ev.label_range
        assert r == {"min": (0, a, 0), "max": (10**12, b, 1), "nulls": 1}
        assert (next(iter(ev))["target"][:4] == [0, 4, -1, 2]).all()  # nulls stay -1
    msg = birdjepa.data.label_problem(r, 10)
    assert msg == (f"n_classes=10: expected labels in [0, 10), got 1000000000000 at {b} row 1 "
                   "(labels span 0..1000000000000)")
    assert birdjepa.data.label_problem(r, 10**12 + 1) is None
    with birdjepa.data._DebugLoader([a], label_column=None, **SMALL) as ev:
        assert ev.label_range is None


def _cfg(train, evals, n_classes):
    cfg = birdjepa.config.load(DEMO)
    data = dataclasses.replace(cfg.data, train_shards=str(train), eval_shards=str(evals),
                               n_workers=1)
    return dataclasses.replace(cfg, data=data, n_classes=n_classes)


def test_make_loaders_refuses_labels_past_n_classes(tmp_path):
    (tmp_path / "tr").mkdir()
    (tmp_path / "ev").mkdir()
    loader_shards.corpus(tmp_path / "tr", sizes=(30,))
    _write(tmp_path / "ev" / "e.arrow", [0, 1, 12, 2])
    with pytest.raises(birdjepa.config.ConfigError,
                       match=r"data\.train_shards: n_classes=5: expected labels in \[0, 5\), got 9 "
                             r"at .*shard-000\.arrow row 9"):
        birdjepa.train.loaders.make_loaders(_cfg(tmp_path / "tr", tmp_path / "ev", 5))
    with pytest.raises(birdjepa.config.ConfigError,
                       match=r"data\.eval_shards: n_classes=12: .*got 12 at .*e\.arrow row 2"):
        birdjepa.train.loaders.make_loaders(_cfg(tmp_path / "tr", tmp_path / "ev", 12))
    train, evals = birdjepa.train.loaders.make_loaders(_cfg(tmp_path / "tr", tmp_path / "ev", 13))
    train.close()
    evals.close()


def test_dry_run_opens_every_entrys_shards_and_reports_per_entry(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    n = 16000  # 1 s of 16-bit mono at 16 kHz: real audio, as the dry run decodes samples
    wav = (b"RIFF" + (36 + 2 * n).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
           + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (16000).to_bytes(4, "little")
           + (32000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
           + b"data" + (2 * n).to_bytes(4, "little") + bytes(2 * n))
    t = loader_shards.table(range(20))
    t = t.set_column(0, "audio", pa.array([{"bytes": wav, "path": f"{i}.wav"} for i in range(20)],
                                          type=loader_shards.AUDIO))
    for split in ("train", "eval"):
        (tmp_path / split).mkdir()
        loader_shards.write(tmp_path / split / "shard-000.arrow", t)
    sweep = tmp_path / "sw.py"
    sweep.write_text(
        f"BASE = {str(DEMO)!r}\n\ndef make_cfgs():\n    return ["
        "{'data.train_shards': 'train', 'data.eval_shards': 'eval'},"
        "{'data.train_shards': 'train', 'data.eval_shards': 'eval', 'n_classes': 4},"
        "{'data.train_shards': 'train', 'data.eval_shards': 'eval', "
        "'data.label_column': 'ebird_code'}]\n")
    assert birdjepa.launch.__main__.main(["--sweep", str(sweep), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    lines = [ln for ln in out.splitlines() if ln.startswith("entry ")]
    assert len(lines) == 6, out
    assert "entry 0" in lines[0] and "data.train_shards: 20 rows in 1 file(s), labels 0..9 of " \
        "n_classes=12, " in lines[0] and lines[0].endswith(" (0 failed): ok")
    assert "entry 1" in lines[2] and "n_classes=4: expected labels in [0, 4), got 9" in lines[2]
    assert "entry 2" in lines[4] and "column 'ebird_code': no such column" in lines[4]
    assert "3 shard check(s) failed" not in err and "shard check(s) failed" in err
