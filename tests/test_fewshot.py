"""Issue 49: the few-shot rows (`birdjepa.data.fewshot`): Bird-MAE's lenient sampling (at most
20 s, no secondary label, at most k per class, seeds), and the split written with only them
(`python -m birdjepa.sources fewshot`): a supervised baseline's label budget is exactly the
probe's k recordings per class, and a semi-supervised split keeps every other row unlabelled."""

import io
import json

import numpy as np
import pyarrow as pa
import pytest
import soundfile

import birdjepa.data.fewshot as fewshot
import birdjepa.data.ipc
import birdjepa.data.table as table
import birdjepa.sources

SR = 8000


def _wav(seconds: float, f: float) -> bytes:
    t = np.arange(int(seconds * SR)) / SR
    buf = io.BytesIO()
    soundfile.write(buf, (0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32), SR, format="WAV")
    return buf.getvalue()


def _split(path, rows):
    """A save_to_disk-like split of (seconds, class, secondary names) rows, embedded audio."""
    path.mkdir(parents=True)
    names = ["amerob", "norcar", "blujay"]
    audio = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    t = pa.table({
        "audio": pa.array([{"bytes": _wav(s, 300 + 100 * i), "path": f"r{i}.wav"}
                           for i, (s, _, _) in enumerate(rows)], audio),
        "label": pa.array([c for _, c, _ in rows], pa.int64()),
        "ebird_code_secondary": pa.array([sec for _, _, sec in rows], pa.list_(pa.string())),
    }).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": {
        "audio": {"_type": "Audio", "decode": False},
        "label": {"names": names, "_type": "ClassLabel"},
        "ebird_code_secondary": {"feature": {"dtype": "string", "_type": "Value"},
                                 "_type": "Sequence"}}}})})
    with pa.OSFile(str(path / "data-00000-of-00001.arrow"), "wb") as f, \
            pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    return names


def test_lenient_sampling_draws_short_recordings_without_secondary_labels():
    rng = np.random.default_rng(0)
    y = np.eye(4, dtype=bool)[rng.integers(0, 4, 200)]
    eligible = rng.random(200) < 0.5
    eligible[y[:, 3]] = False
    eligible[np.flatnonzero(y[:, 3])[:2]] = True  # class 3: only 2 eligible rows
    for k in (1, 5, 10):
        a = fewshot.sample(y, k, seed=1, eligible=eligible)
        assert eligible[a].all()
        np.testing.assert_array_equal(y[a].sum(0), [k, k, k, min(k, 2)])  # no fill-up
        assert np.array_equal(a, fewshot.sample(y, k, seed=1, eligible=eligible))
        assert not np.array_equal(a, fewshot.sample(y, k, seed=2, eligible=eligible))
    # without a filter the old rule holds: exactly k, a short class is an error
    with pytest.raises(ValueError, match="class 3 has 2"):
        fewshot.sample(y[eligible], 5, seed=0)
    with pytest.raises(ValueError, match=r"eligible: expected shape \(200,\)"):
        fewshot.sample(y, 1, seed=0, eligible=eligible[:10])


def test_lenient_reads_lengths_and_secondary_labels(tmp_path):
    _split(tmp_path / "d", [(3, 0, []), (25, 0, []), (3, 1, ["norcar"]), (20, 2, []),
                            (21, 1, ["x"])])
    got = fewshot.lenient(tmp_path / "d")
    np.testing.assert_array_equal(got.eligible, [True, False, False, True, False])
    assert (got.too_long, got.secondary, got.unknown_length) == (2, 1, 0)
    assert got.has_secondary_column


def test_fewshot_split_holds_the_probes_k_labels_per_class(tmp_path, capsys):
    rows = [(2 + (i % 3), i % 3, []) for i in range(24)] + [(30, 0, []), (2, 1, ["blujay"])]
    names = _split(tmp_path / "d", rows)
    y = np.eye(3, dtype=bool)[[c for _, c, _ in rows]]
    elig = fewshot.lenient(tmp_path / "d").eligible
    want = fewshot.sample(y, 3, seed=2, eligible=elig)  # what evaluate's probe trains on
    assert birdjepa.sources.main(["fewshot", str(tmp_path / "d"), "--out_dir",
                                  str(tmp_path / "k3"), "--k", "3", "--seed", "2",
                                  "--lenient"]) == 0
    out = capsys.readouterr()
    assert "9 labelled rows" in out.out and "amerob 3, norcar 3, blujay 3" in out.out
    assert "1 longer than 20 s, 1 with secondary labels" in out.err
    sub = table.read(tmp_path / "k3", ["audio", "label"])
    src = table.read(tmp_path / "d", ["audio", "label"])
    assert sub.num_rows == 9
    np.testing.assert_array_equal(sub.column("label").to_numpy(),
                                  src.column("label").to_numpy()[want])
    assert sub.column("audio").combine_chunks().field("bytes").to_pylist() == \
        [src.column("audio").combine_chunks().field("bytes")[int(i)].as_py() for i in want]
    assert table.class_names(tmp_path / "k3", "label") == names

    # keep=all: every row, only those 9 labelled (null: the objectives mask the rest)
    assert birdjepa.sources.main(["fewshot", str(tmp_path / "d"), "--out_dir",
                                  str(tmp_path / "semi"), "--k", "3", "--seed", "2",
                                  "--lenient", "--keep", "all"]) == 0
    semi = table.read(tmp_path / "semi", ["label"]).column("label").to_pylist()
    assert len(semi) == len(rows)
    assert [i for i, v in enumerate(semi) if v is not None] == list(want)

    # labels=: those rows with the labels given (pseudo-labels), across the source's shards
    whole = birdjepa.data.ipc.read_table(str(tmp_path / "d" / "data-00000-of-00001.arrow"))
    (tmp_path / "two").mkdir()
    for i, part in enumerate((whole.slice(0, 13), whole.slice(13))):
        with pa.OSFile(str(tmp_path / "two" / f"data-0000{i}-of-00002.arrow"), "wb") as f, \
                pa.ipc.new_stream(f, whole.schema) as w:
            w.write_table(part)
    assert want.min() < 13 <= want.max()  # rows of both shards
    given = (src.column("label").to_numpy()[want] + 1) % 3
    fewshot.write(tmp_path / "two", tmp_path / "pseudo", want, label_column="label",
                  labels=given)
    assert table.read(tmp_path / "pseudo", ["label"]).column("label").to_pylist() == \
        given.tolist()
    with pytest.raises(ValueError, match=r"labels: expected shape \(9,\) \(one per row\), "
                       r"got \(2,\)"):
        fewshot.write(tmp_path / "two", tmp_path / "pseudo", want, label_column="label",
                      labels=given[:2])

    # a directory holding something else is refused, not mixed into the split; so is a
    # dataset of the user's with the very names this writes; an earlier subset is rewritten
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "other-00000.arrow").write_bytes(b"x")
    assert birdjepa.sources.main(["fewshot", str(tmp_path / "d"), "--out_dir",
                                  str(tmp_path / "busy"), "--k", "1"]) == 2
    assert "holding other-00000.arrow" in capsys.readouterr().err
    _split(tmp_path / "mine", rows[:3])
    (tmp_path / "mine" / "state.json").write_text("{}")
    before = (tmp_path / "mine" / "data-00000-of-00001.arrow").read_bytes()
    assert birdjepa.sources.main(["fewshot", str(tmp_path / "d"), "--out_dir",
                                  str(tmp_path / "mine"), "--k", "1"]) == 2
    assert "holding data-00000-of-00001.arrow, state.json" in capsys.readouterr().err
    assert (tmp_path / "mine" / "data-00000-of-00001.arrow").read_bytes() == before
    assert birdjepa.sources.main(["fewshot", str(tmp_path / "d"), "--out_dir",
                                  str(tmp_path / "k3"), "--k", "1", "--seed", "2"]) == 0
    assert table.read(tmp_path / "k3", ["label"]).num_rows == 3


def test_fewshot_split_of_relative_path_only_audio_still_finds_it(tmp_path):
    audio = tmp_path / "audio"
    for sp, f in (("amerob", 500), ("amerob", 700), ("norcar", 2000), ("norcar", 3000)):
        (audio / sp).mkdir(parents=True, exist_ok=True)
        (audio / sp / f"{f}.wav").write_bytes(_wav(1.0, f))
    assert birdjepa.sources.main(["from_files", str(audio), "--out_dir", str(tmp_path / "ds"),
                                  "--label_from", "parent", "--relative"]) == 0
    assert birdjepa.sources.main(["fewshot", str(tmp_path / "ds"), "--out_dir",
                                  str(tmp_path / "elsewhere" / "k1"), "--k", "1"]) == 0
    got = table.read_audio(tmp_path / "elsewhere" / "k1")
    assert len(got) == 2 and all(str(p).startswith(str(audio)) for p in got)


def test_bird_mae_protocol_fixes_its_settings_and_refuses_others():
    import birdjepa.config
    import birdjepa.evaluate.eval_config as eval_config

    cfg = eval_config.with_protocol(eval_config.EvalConfig(encoders=("x",), protocol="bird-mae"))
    assert (cfg.sampling, cfg.shots, cfg.seeds) == ("lenient", (1, 5, 10), (1, 2, 3))
    p = cfg.probe
    assert (p.lr, p.weight_decay, p.batch_size, p.epochs, p.min_steps, p.grad_clip, p.loss,
            p.n_prototypes) == (3e-4, 3e-4, 64, 50, 0, 2.0, "asl", 20)
    assert eval_config.with_protocol(eval_config.EvalConfig()) == eval_config.EvalConfig()  # none: as set
    one = eval_config.with_protocol(eval_config.EvalConfig(protocol="bird-mae", shots=(5,), seeds=(2,)))
    assert (one.shots, one.seeds, one.sampling) == ((5,), (2,), "lenient")
    with pytest.raises(birdjepa.config.ConfigError,
                       match=r"'shots': expected values of \(1, 5, 10\) \(protocol 'bird-mae' "
                       r"fixes them\) or unset, got \(1, 20\)"):
        eval_config.with_protocol(eval_config.EvalConfig(protocol="bird-mae", shots=(1, 20)))
    with pytest.raises(birdjepa.config.ConfigError, match="'probe.epochs': expected 50"):
        eval_config.with_protocol(eval_config.EvalConfig(
            protocol="bird-mae", probe=eval_config.birdjepa.evaluate.probes.ProbeConfig(epochs=7)))


def test_lenient_evaluate_draws_eligible_recordings_and_names_the_protocol(tmp_path, capsys):
    """checks.build under the protocol: the probe's rows are the lenient draw of
    birdjepa.data.fewshot (no recording over 20 s or with a secondary label), a class short of
    k keeps what it has and is named; every result row and table title names the protocol."""
    import birdjepa.evaluate.checks as checks
    import birdjepa.evaluate.eval_config as eval_config
    import birdjepa.evaluate.report as report

    rows = [(2, i % 3, []) for i in range(30)] + [(25, 0, []), (3, 1, ["x"])]
    rows[2] = (30, 2, [])  # blujay: 9 eligible of 10
    _split(tmp_path / "train", rows)
    test = tmp_path / "test"
    test.mkdir()
    t = pa.table({"audio": pa.array([_wav(1, 500)] * 3, pa.binary()),
                  "ebird_code_multilabel": pa.array([[0], [1], [2]], pa.list_(pa.int64()))})
    with pa.OSFile(str(test / "data-00000.arrow"), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    cfg = eval_config.with_protocol(eval_config.EvalConfig(
        encoders=("x",), protocol="bird-mae", train_shards=str(tmp_path / "train"),
        test_shards=str(test)))
    plan = checks.build(cfg)[0]
    elig = fewshot.lenient(tmp_path / "train").eligible
    assert not elig[[2, 30, 31]].any()
    for k in (1, 5, 10):
        for s in (1, 2, 3):
            got = plan.recordings[(k, s)]
            assert elig[got].all()
            np.testing.assert_array_equal(plan.y_train[got].sum(0), [k, k, min(k, 9)])
            np.testing.assert_array_equal(got, fewshot.sample(plan.y_train, k, seed=s,
                                                              eligible=elig))
    err = capsys.readouterr().err
    assert "lenient sampling: 29 of 32 training recordings eligible (2 longer than 20 s, 1 " \
           "with secondary labels" in err and "fewer than k=10: blujay 9" in err
    row = {"test_set": "t", "encoder": "e", "probe": "prototypical", "k": "5", "seed": 1,
           "metric": "cmap", "value": 0.5, "n_seeds": 3, "mean": 0.5, "sd": 0.0, "min": 0.5,
           "max": 0.5, "lo": 0.4, "hi": 0.6, "interval": "bootstrap-seeds+segments",
           "protocol": "bird-mae"}
    assert report.table([row], "cmap", "5").startswith(
        "Bird-MAE few-shot protocol (arXiv 2504.12880")
    assert not report.table([{**row, "protocol": ""}], "cmap", "5").startswith("Bird-MAE")
