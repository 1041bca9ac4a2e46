"""BirdSet's data as published: path-only audio, event crops, segments from columns, class names
as the truth. Fixtures are written with `datasets` using exactly BirdSet's features
(birdjepa.demo_data.birdset)."""

import dataclasses
import os
import shutil
import warnings

import numpy as np
import pyarrow as pa
import pytest

import birdjepa
import birdjepa.audio
import birdjepa.config
import birdjepa.data
import birdjepa.data.pack
import birdjepa.demo_data.birdset as birdset
import birdjepa.demo_data.catalogue as catalogue
import birdjepa.launch.sweep
import birdjepa.models.features as features
import birdjepa.sources

NAMES = [s.code for s in catalogue.SPECIES]


@pytest.fixture(scope="module")
def bs(tmp_path_factory):
    root = tmp_path_factory.mktemp("birdset")
    return birdset.write(root, n_recordings=8, n_soundscapes=1, n_segments=4, max_s=20.0)


def rows_of(split_spec: str) -> list[dict]:
    (path,) = birdjepa.data.resolve_shards(split_spec)
    with pa.memory_map(path) as f:
        return pa.ipc.open_stream(f).read_all().to_pylist()


def take(spec, n, **kw):
    kw = {"batch_size": 4, "label_column": "ebird_code", "n_workers": 2, "seed": 3, **kw}
    with birdjepa.data.Loader(spec, **kw) as loader:
        return [next(loader) for _ in range(n)], loader.stats()


def same(a, b):
    for x, y in zip(a, b, strict=True):
        for k in ("data", "target", "index", "valid", "start_s"):
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def write_rows(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    birdset.write_split(path, rows, birdset.features(NAMES))
    return str(path)


def test_path_only_train_and_eval_equal_embedded_bytes_and_pack_round_trips(bs, tmp_path):
    rows = rows_of(bs["train"])
    assert all(r["audio"]["bytes"] is None and os.path.isabs(r["audio"]["path"]) for r in rows)
    packed = str(tmp_path / "packed")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a valid path-only dataset: no warning at all
        assert birdjepa.sources.main(["pack", bs["train"], "--out_dir", packed, "--shard_mb", "0.3",
                                           "--workers", "2"]) == 0
        out = [r for f in birdjepa.data.resolve_shards(packed) for r in
               pa.ipc.open_stream(pa.memory_map(f)).read_all().to_pylist()]
        assert len(out) == len(rows) and len(birdjepa.data.resolve_shards(packed)) > 1
        for r, o in zip(rows, out, strict=True):
            with open(r["audio"]["path"], "rb") as f:
                assert o["audio"]["bytes"] == f.read()  # byte-identical
            assert {k: v for k, v in o.items() if k != "audio"} == \
                {k: v for k, v in r.items() if k != "audio"}  # every other column kept
        for mode, n in (("train", 5), ("eval", 2)):
            path_only, stats = take(bs["train"], n, mode=mode)
            same(path_only, take(packed, n, mode=mode)[0])
            same(path_only, take(bs["train"], n, mode=mode, audio_column="filepath")[0])
            assert stats["failures"] == 0 and all(b["valid"].all() for b in path_only)


def test_relative_paths_audio_root_and_path_map(bs, tmp_path):
    rows = rows_of(bs["train"])
    ref, _ = take(bs["train"], 2, mode="eval")
    audio = tmp_path / "rel" / "audio"
    audio.mkdir(parents=True)
    for r in rows:
        shutil.copy(r["audio"]["path"], audio)

    def moved(prefix):
        return [{**r, "audio": {"bytes": None, "path": prefix + os.path.basename(r["filepath"])},
                 "filepath": prefix + os.path.basename(r["filepath"])} for r in rows]

    relative = write_rows(tmp_path / "rel" / "data.arrow", moved("audio/"))
    same(ref, take(relative, 2, mode="eval")[0])  # against the shard's directory
    elsewhere = write_rows(tmp_path / "other" / "data.arrow", moved(""))
    same(ref, take(elsewhere, 2, mode="eval", audio_root=str(audio))[0])
    stale = write_rows(tmp_path / "stale" / "data.arrow", moved("/nonexistent/cache/"))
    same(ref, take(stale, 2, mode="eval", path_map={"/nonexistent": "/nowhere",
                                                    "/nonexistent/cache/": f"{audio}/"})[0])
    # None of the files exists: one error naming a missing path and the settings that fix it.
    with pytest.raises(birdjepa.DatasetError, match=r"none of the 8 audio files checked exists "
                       r"\(row 0 stores '/nonexistent/cache/XC100000.ogg'\).*audio_root.*"
                       r"path_map"):
        birdjepa.data.Loader(stale, batch_size=4, label_column="ebird_code")


def test_a_missing_file_is_one_warning_and_a_counted_skip(bs, tmp_path):
    rows = rows_of(bs["train"])
    audio = tmp_path / "audio"
    audio.mkdir()
    for r in rows:
        shutil.copy(r["audio"]["path"], audio)
    spec = write_rows(tmp_path / "ds" / "data.arrow", [
        {**r, "audio": {"bytes": None, "path": str(audio / os.path.basename(r["filepath"]))}}
        for r in rows])
    gone = audio / os.path.basename(rows[5]["filepath"])
    gone.unlink()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        batches, stats = take(spec, 6)  # three epochs of 8 rows
    lines = [str(x.message) for x in w]
    assert sum("1 of 8 audio files checked do not exist" in m for m in lines) == 1, lines
    skips = [m for m in lines if "missing audio file" in m]
    assert len(skips) == 1 and str(gone) in skips[0], lines  # one line, naming the path
    assert stats["failures_by_kind"] == {"missing audio file": 3}
    assert all(b["valid"].all() for b in batches) and 5 not in np.concatenate(
        [b["index"] for b in batches])
    # Deleted mid-run: train skips it, eval marks it invalid.
    (audio / os.path.basename(rows[2]["filepath"])).unlink()
    with birdjepa.data.Loader(spec, batch_size=4, label_column="ebird_code", mode="eval",
                              max_failure_fraction=1.0) as ev:
        valid = np.concatenate([b["valid"] for b in ev])
    assert valid.tolist() == [True, True, False, True, True, False, True, True]


def test_a_file_rewritten_mid_run_is_a_counted_skip(bs, tmp_path):
    """Issue 30 item 16: a content change is one warning and a skipped row, never a stop."""
    rows = rows_of(bs["train"])
    audio = tmp_path / "audio"
    audio.mkdir()
    for r in rows:
        shutil.copy(r["audio"]["path"], audio)
    spec = write_rows(tmp_path / "ds" / "data.arrow", [
        {**r, "audio": {"bytes": None, "path": str(audio / os.path.basename(r["filepath"]))}}
        for r in rows])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with birdjepa.data.Loader(spec, batch_size=8, label_column="ebird_code", n_workers=1,
                                  prefetch=1) as loader:
            next(loader)  # every file read once
            victim = audio / os.path.basename(rows[1]["filepath"])
            victim.write_bytes(victim.read_bytes() + b"\0" * 64)
            later = [next(loader) for _ in range(5)]
            stats = loader.stats()
    changed = [str(x.message) for x in w if "audio file changed" in str(x.message)]
    assert len(changed) == 1 and "XC100001.ogg: its content changed" in changed[0], changed
    assert set(stats["failures_by_kind"]) == {"audio file changed"}
    assert 1 not in np.concatenate([b["index"] for b in later[3:]])


def overlaps(start, clip, events):
    return any(a < start + clip and b > start for a, b in events)


def test_event_crops_cover_events_deterministic_and_resumable(bs):
    events = {i: r["detected_events"] for i, r in enumerate(rows_of(bs["train"]))}
    assert all(events.values())
    kw = {"crop": "events", "n_views": 2}
    run, _ = take(bs["train"], 6, **kw)
    hits = [overlaps(s, 5.0, events[i]) for b in run for v in range(2)
            for s, i in zip(b["start_s"][v], b["index"], strict=True)]
    # Every crop covers a whole event no longer than 5 s; events are at most ~2 s here.
    covered = [any(s <= a and b <= s + 5.0 + 1e-6 for a, b in events[i])
               for b_ in run for v in range(2)
               for s, i in zip(b_["start_s"][v], b_["index"], strict=True)]
    assert all(hits) and all(covered)
    same(run, take(bs["train"], 6, **kw)[0])
    with birdjepa.data.Loader(bs["train"], batch_size=4, label_column="ebird_code", seed=3,
                              **kw) as loader:
        for _ in range(2):
            next(loader)
        state = loader.state_dict()
    with birdjepa.data.Loader(bs["train"], batch_size=4, label_column="ebird_code", seed=3,
                              state=state, n_workers=1, **kw) as loader:
        same(run[2:], [next(loader) for _ in range(4)])
    # Composes with a view window and local crops: the window covers the event.
    win, _ = take(bs["train"], 2, crop="events", n_views=2, view_window_s=8.0, n_local=2,
                  local_s=2.0, local_frames=192)
    assert win[0]["local"].shape == (2, 4, 192, 128)
    assert all(min(a for a, _ in events[i]) < s + 8 for b in win for s, i in
               zip(b["start_s"][0], b["index"], strict=True))
    # A row without events falls back to a random crop; the old streams are unchanged.
    plain, _ = take(bs["train"], 2)
    assert take(bs["train"], 2, crop="random")[0][0]["start_s"].tolist() == \
        plain[0]["start_s"].tolist()


def test_columns_segments_are_cut_exactly_and_pre_cut_files_taken_whole(bs, tmp_path):
    rows = rows_of(bs["train"])
    seg = [{**r, "start_time": 1.5 + i, "end_time": 6.5 + i} for i, r in enumerate(rows)]
    spec = write_rows(tmp_path / "seg" / "data.arrow", seg)
    with birdjepa.data.Loader(spec, batch_size=4, mode="eval", segment="columns",
                              label_column="ebird_code", n_frames=498) as ev:
        batches = list(ev)
    for b in batches:
        for j, i in enumerate(b["index"]):
            want = birdjepa.audio.clip(rows[i]["audio"]["path"], start_s=seg[i]["start_time"])
            np.testing.assert_allclose(b["data"][j], (want + 7.2) / (2 * 4.43), atol=1e-5)
            assert b["start_s"][j] == pytest.approx(seg[i]["start_time"], abs=1e-4)
    # Soundscape-relative times on pre-cut 5 s files: a start past a file's end is an error.
    test = rows_of(bs["test_5s"])
    assert all(r["ebird_code"] is None for r in test)
    with pytest.raises(birdjepa.DatasetError, match=r"test_5s.arrow: row 1, column 'start_time': "
                       r"segment start 5 s lies past the end of its audio.*segment = \"centre\""):
        for _ in birdjepa.data.Loader(bs["test_5s"], batch_size=4, mode="eval", n_workers=1,
                                      segment="columns", label_column="ebird_code_multilabel"):
            pass
    # The centre rule takes each pre-cut file whole.
    with birdjepa.data.Loader(bs["test_5s"], batch_size=4, mode="eval", n_frames=498,
                              label_column="ebird_code_multilabel") as ev:
        b = next(iter(ev))
    for j, r in enumerate(test):
        want = birdjepa.audio.clip(r["audio"]["path"])
        np.testing.assert_allclose(b["data"][j], (want + 7.2) / (2 * 4.43), atol=1e-5)
        assert b["target"][j].nonzero()[0].tolist() == r["ebird_code_multilabel"]


def test_class_names_are_the_truth(bs):
    for column in ("ebird_code", "ebird_code_multilabel", "genus"):
        with birdjepa.data.Loader(bs["train"], batch_size=4, label_column=column) as loader:
            assert loader.n_classes == len(NAMES) and loader.class_names == NAMES
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument n_classes: expected 12 "
                       r"\(the ClassLabel names of column 'ebird_code'\), got 10;"):
        birdjepa.data.Loader(bs["train"], batch_size=4, label_column="ebird_code", n_classes=10)


def test_launch_dry_run_checks_path_only_shards(bs, tmp_path):
    base = birdjepa.config.Config()
    data = dataclasses.replace(base.data, train_shards=bs["train"], eval_shards=bs["test_5s"],
                               label_column="ebird_code_multilabel", crop="events")
    lines = birdjepa.launch.check_shards(dataclasses.replace(base, data=data))
    assert [ok for _, ok in lines] == [True, True], lines
    labels = sorted({c for r in rows_of(bs["train"]) for c in r["ebird_code_multilabel"]})
    assert (f"8 rows in 1 file(s), labels {labels[0]}..{labels[-1]} of n_classes=12, 8/8 audio "
            "files found, ") in lines[0][0] and lines[0][0].endswith(" (0 failed): ok")
    rows = rows_of(bs["train"])
    stale = write_rows(tmp_path / "stale" / "data.arrow", [
        {**r, "audio": {"bytes": None, "path": "/gone/" + os.path.basename(r["filepath"])}}
        for r in rows])
    data = dataclasses.replace(data, train_shards=stale)
    (line, ok), _ = birdjepa.launch.check_shards(dataclasses.replace(base, data=data))
    assert not ok and "none of the 8 audio files checked exists" in line
    data = dataclasses.replace(data, path_map={"/gone": os.path.dirname(rows[0]["filepath"])})
    (line, ok), _ = birdjepa.launch.check_shards(dataclasses.replace(base, data=data))
    assert ok, line


def test_embed_features_take_the_segment_rule(bs, tmp_path):
    rows = rows_of(bs["train"])
    seg = [{**r, "start_time": 0.5 * i, "end_time": 0.5 * i + 5.0} for i, r in enumerate(rows)]
    spec = write_rows(tmp_path / "seg" / "data.arrow", seg)
    w = features.Windows(centre=True, segment="columns", n_frames=498)
    got = {int(i): x for xs, ids, _ in features.features(spec, w, batch_size=4, n_workers=1)
           for x, i in zip(xs, ids, strict=True)}
    assert sorted(got) == list(range(8))
    for i, r in enumerate(seg):
        want = w.normalise(birdjepa.audio.clip(r["audio"]["path"], start_s=r["start_time"]))
        np.testing.assert_allclose(got[i], want, atol=1e-5)
    # Every window of path-only rows (the clip engine) reads the files too.
    w_all = features.Windows(hop_s=5.0, n_frames=498)
    n = sum(len(ids) for _, ids, _ in features.features(bs["train"], w_all, batch_size=4,
                                                     n_workers=1))
    assert n >= 8
