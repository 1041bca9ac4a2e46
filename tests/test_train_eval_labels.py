"""Issue 29 items 8 and 10: training with eval shards whose label column holds no label is a
one-line error naming the column that does (and data.eval_label_column reads it); n_classes
against the class names blames n_classes; evaluate's nested messages are never cut."""

import dataclasses

import pyarrow as pa
import pyarrow.compute
import pytest
import tiny

import birdjepa
import birdjepa.config
import birdjepa.data.loader
import birdjepa.data.table as table
import birdjepa.demo_data
import birdjepa.evaluate.runner as runner
import birdjepa.train.loaders


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Train shards, and eval shards as BirdSet's test_5s: `label` every row None, the labels
    in `label_multi` (list<int>) and `label2` (int)."""
    root = tmp_path_factory.mktemp("eval-labels")
    birdjepa.demo_data.write(root / "train", n_recordings=8, n_shards=1, min_s=1.0, max_s=1.5,
                             workers=1, seed=0)
    t = table.read(root / "train", table.column_names(root / "train"))
    label = t.column("label")
    t = t.set_column(t.column_names.index("label"), "label", pa.nulls(len(t), label.type))
    t = t.append_column("label2", label).append_column("label_multi", pa.array(
        [[v] for v in label.to_pylist()], pa.list_(pa.int64())))
    (root / "eval").mkdir()
    with pa.OSFile(str(root / "eval" / "data-00000-of-00001.arrow"), "wb") as f, \
            pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    return root


def _cfg(shards, **data):
    cfg = tiny.tiny_config("supervised", n_classes=12)
    return dataclasses.replace(cfg, data=dataclasses.replace(
        cfg.data, train_shards=str(shards / "train"), eval_shards=str(shards / "eval"), **data))


def test_eval_shards_without_labels_is_one_line_naming_the_right_column(shards):
    with pytest.raises(birdjepa.config.ConfigError) as e:
        birdjepa.train.loaders.make_loaders(_cfg(shards))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("data.eval_shards: expected labels in column 'label', got none (8 "
                          "rows, every one null); labels are in ['label2', 'label_multi']: "
                          "set data.eval_label_column = 'label2'"), msg
    train, evals = birdjepa.train.loaders.make_loaders(_cfg(shards, eval_label_column="label2"))
    with train, evals:
        assert evals.label_range["max"] is not None and evals.config["label_column"] == "label2"
        assert train.config["label_column"] == "label"


def test_n_classes_against_class_names_names_n_classes(shards):
    with pytest.raises(birdjepa.BadArgumentError) as caught:  # the loader's own check
        birdjepa.data.loader.class_count(12, ["a", "b", "c", "d", "e"], "label")
    e = caught.value
    line = birdjepa.train.loaders.data_error_line(_cfg(shards).data, e)
    assert line.startswith("n_classes: expected 5 (the ClassLabel names of column 'label'), "
                           "got 12"), line  # not "data.label_column: ..."


def test_nested_messages_are_never_cut():
    tail = "name one as '/path/to/run' or 'bird-mae-base:/w.safetensors'"
    e = ValueError("x. " * 120 + tail)
    assert runner._one_line(e).endswith(tail)
