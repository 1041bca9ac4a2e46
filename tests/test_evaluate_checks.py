"""`evaluate` checks everything it can before embedding anything: each bad setting, split, class
list or label column is one line on stderr and exit status 2, with no traceback and no call to
the embedding functions (counted, not timed). Class lists are matched by name."""

import json

import numpy as np
import pyarrow as pa
import pytest

import birdjepa.evaluate.__main__
import birdjepa.evaluate.checks
import birdjepa.evaluate.eval_config as eval_config

NAMES = ["a", "b", "c"]


def write_split(path, column, labels, names=NAMES, *, multilabel=False, audio="audio"):
    """A one-shard split with an HF ClassLabel column (names in the schema metadata) and a
    placeholder audio column: enough for every check, which reads no audio."""
    path.mkdir(parents=True)
    typ = pa.list_(pa.int64()) if multilabel else pa.int64()
    feat = {"names": names, "_type": "ClassLabel"}
    feats = {column: {"feature": feat, "_type": "Sequence"} if multilabel else feat}
    meta = {b"huggingface": json.dumps({"info": {"features": feats}}).encode()}
    schema = pa.schema([(audio, pa.binary()), (column, typ)], metadata=meta)
    t = pa.table({audio: pa.array([b"\0"] * len(labels), pa.binary()),
                  column: pa.array(labels, typ)}, schema=schema)
    with pa.OSFile(str(path / "data-00000.arrow"), "wb") as f, pa.ipc.new_stream(f, schema) as w:
        w.write_table(t)
    return path


@pytest.fixture
def splits(tmp_path):
    """train: 2 recordings per class; test: multilabel segments (one without a bird)."""
    write_split(tmp_path / "train", "label", [0, 0, 1, 1, 2, 2])
    write_split(tmp_path / "test", "ebird_code_multilabel", [[0], [1, 2], [], [2]],
                multilabel=True)
    (tmp_path / "tiny.toml").write_text("n_classes = 3\n[model]\npreset = \"debug\"\n")
    return tmp_path


def base_args(root, extra: list[str] = ()) -> list[str]:
    """The case's options after the common ones; a list option (one value per flag, repeated)
    is given by the case or else by these defaults."""
    shots = [] if "--shots" in extra else ["--shots", "1", "--shots", "0"]
    return ["--random", str(root / "tiny.toml"), "--train_shards", str(root / "train"),
            "--test_shards", str(root / "test"), *shots, "--seeds", "0",
            "--out_dir", str(root / "out"), *extra]


CASES = {
    "knn_k": (["--probe.knn_k=0"], "config key 'probe.knn_k': expected an int >= 1, got 0"),
    "epochs": (["--probe.epochs=0"], "config key 'probe.epochs': expected an int >= 1, got 0"),
    "lr": (["--probe.lr=nan"], "config key 'probe.lr': expected a finite number > 0, got nan"),
    "shots": (["--shots", "1", "--shots", "3"], "config key 'shots': few-shot k=3: expected >= 3 training "
              "rows per class, class 0 ('a') has 2"),
    "label column": (["--test_label_column", "species"], "config key 'test_label_column': "
                     "expected a column of"),
    "audio column": (["--audio_column", "wav"], "config key 'audio_column': expected a column"),
    "test split": (["--test_shards", "/nonexistent/split"], "config key 'test_shards': "
                   "expected a readable split"),
    "encoder": (["--encoders", "/nonexistent/run"], "config key 'encoders': expected a run "
                "directory"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_inputs_fail_in_one_line_before_any_embedding(case, splits, embed_calls, capsys):
    extra, message = CASES[case]
    assert birdjepa.evaluate.__main__.main(base_args(splits, extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err and "Traceback" not in err
    assert embed_calls == {"features": 0, "encode": 0}
    assert not (splits / "out").exists()


def test_class_lists_and_empty_labels_fail_before_any_embedding(splits, embed_calls, capsys):
    write_split(splits / "train2", "label", [0, 0, 1, 1], names=["a", "b"])
    write_split(splits / "empty", "ebird_code_multilabel", [[], [], []], multilabel=True)
    for extra, message in (
            (["--train_shards", str(splits / "train2")], "expected a training split naming "
             "every class of the test list, got "),
            (["--test_shards", str(splits / "empty")], "config key 'test_label_column': "
             "expected at least one positive label (every metric would be NaN), got 3 rows")):
        assert birdjepa.evaluate.__main__.main(base_args(splits, extra)) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
        assert "test set " in err
    assert embed_calls == {"features": 0, "encode": 0}


def test_class_names_are_matched_by_name_not_position(splits):
    """A test split listing the classes in another order (and a training split with one more
    class) gives the same labels, in the test split's class order."""
    order = ["c", "a", "b"]
    recode = {old: order.index(name) for old, name in enumerate(NAMES)}
    write_split(splits / "test2", "ebird_code_multilabel",
                [[recode[c] for c in seg] for seg in ([0], [1, 2], [], [2])], names=order,
                multilabel=True)
    write_split(splits / "train2", "label", [3, 0, 0, 1, 1, 2, 2], names=NAMES + ["d"])
    base = eval_config.EvalConfig(random=("x",), train_shards=str(splits / "train"),
                             test_shards=str(splits / "test"), shots=(1, 0), seeds=(0, 1))
    (ref,) = birdjepa.evaluate.checks.build(base)
    (got,) = birdjepa.evaluate.checks.build(eval_config.EvalConfig(
        random=("x",), train_shards=str(splits / "train2"), test_shards=str(splits / "test2"),
        shots=(1, 0), seeds=(0, 1)))
    perm = [NAMES.index(c) for c in order]
    assert got.classes == tuple(order) and ref.classes == tuple(NAMES)
    np.testing.assert_array_equal(got.y_test, ref.y_test[:, perm])
    np.testing.assert_array_equal(got.y_train[1:], ref.y_train[:, perm])
    assert not got.y_train[0].any()  # class "d" is not in the test list: no label here
    assert set(got.recordings) == {(1, 0), (1, 1), (0, 0), (0, 1)}
    np.testing.assert_array_equal(got.y_train[got.recordings[(1, 0)]].sum(0), 1)


def test_several_test_sets_resolve_their_own_splits(splits):
    toml = splits / "e.toml"
    toml.write_text(f'random = ["e.toml"]\nshots = [1, 0]\ntrain_shards = "{splits / "train"}"\n'
                    f'[[test_sets]]\nname = "HSN"\ntest_shards = "{splits / "test"}"\n'
                    f'[[test_sets]]\ntest_shards = "{splits / "test"}"\n'
                    f'train_shards = "{splits / "train"}"\n')
    cfg = eval_config.load(str(toml))
    sets = eval_config.test_sets(cfg)
    assert [t.name for t in sets] == ["HSN", "test"]
    assert all(t.test_label_column == "ebird_code_multilabel" for t in sets)
    assert [p.spec.name for p in birdjepa.evaluate.checks.build(cfg)] == ["HSN", "test"]
    dup = eval_config.EvalConfig(random=("x",), test_sets=(eval_config.TestSet("A", "x"),) * 2)
    with pytest.raises(eval_config.birdjepa.config.ConfigError, match="distinct names"):
        eval_config.validate(dup)


def test_paths_in_a_toml_resolve_against_its_directory(splits, tmp_path, monkeypatch):
    """Issue 36 item 6.4: `random`, the shards and audio_root of an evaluation TOML resolved
    against the current directory. They now resolve against the TOML's directory, wherever
    the command runs; a command-line value still resolves against the current directory, and
    out_dir (what evaluate writes) too."""
    cfgdir = splits / "cfg"
    cfgdir.mkdir()
    (cfgdir / "e.toml").write_text(
        'random = ["../tiny.toml"]\ntrain_shards = "../train"\nout_dir = "out"\n'
        '[[test_sets]]\nname = "A"\ntest_shards = "../test"\n'
        '[[test_sets]]\nname = "B"\ntest_shards = "../test:x"\naudio_root = "."\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = eval_config.cli(["--cfg", str(cfgdir / "e.toml")])
    assert cfg.random == (str(splits / "tiny.toml"),)
    assert cfg.train_shards == str(splits / "train") and cfg.out_dir == "out"
    a, b = eval_config.test_sets(cfg)
    assert a.test_shards == str(splits / "test") and b.test_shards == str(splits / "test") + ":x"
    assert b.audio_root == str(cfgdir) and a.audio_root == ""
    assert eval_config.load(str(cfgdir / "e.toml")) == cfg  # the Python entry resolves alike
    monkeypatch.chdir(splits)  # a relative --cfg: paths stay relative to the current directory
    cfg = eval_config.cli(["--cfg", "cfg/e.toml", "--train_shards", "train"])
    assert cfg.random == ("tiny.toml",) and cfg.train_shards == "train"


@pytest.mark.parametrize("toml, key", [
    ('random = ["nope.toml"]', "random[0]"),
    ('encoders = ["runs/none"]', "encoders[0]"),
    ('encoders = ["emb:none"]', "encoders[0]"),
    ('train_shards = "none"', "train_shards"),
    ('random = ["../tiny.toml"]\n[[test_sets]]\ntest_shards = "../test"\n[[test_sets]]\n'
     'test_shards = "x"', "test_sets[1].test_shards"),
])
def test_a_missing_path_in_a_toml_names_its_key(toml, key, splits, capsys):
    (splits / "cfg").mkdir()
    (splits / "cfg" / "e.toml").write_text(toml + "\n")
    assert birdjepa.evaluate.__main__.main(["--cfg", str(splits / "cfg" / "e.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    value = toml.rsplit("= ", 1)[1].strip('[]"')
    assert err == [f"error: config key {key!r} in {splits / 'cfg' / 'e.toml'}: expected an "
                   f"existing path, got {value!r} (relative to {splits / 'cfg'})"]
    assert "--cfg" not in err[0]


def test_a_missing_random_config_on_the_command_line_names_its_key(splits, capsys):
    argv = base_args(splits)
    argv[argv.index("--random") + 1] = "nope.toml"
    assert birdjepa.evaluate.__main__.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: config key 'random[0]': expected an "
                                               "existing training config TOML, got 'nope.toml'")
