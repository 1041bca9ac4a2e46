"""Issue 29 item 6: precomputed embeddings as an encoder (`emb:DIR`, parquet in
`python -m birdjepa.embed`'s schema). Our own encoder evaluated through its written embeddings
gives the results of evaluating it directly; missing rows and token probes are up-front errors."""

import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_evaluate_run import FAST, corpus  # noqa: F401 (the shared module fixture)

import birdjepa
import birdjepa.config
import birdjepa.evaluate
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.runner as runner
import birdjepa.models.outfile as outfile


def _cfg(corpus, out, **kw):  # noqa: F811
    return eval_config.EvalConfig(train_shards=str(corpus / "train"),
                             test_sets=(eval_config.TestSet("A", str(corpus / "test")),),
                             shots=(0, 1), seeds=(0, 1, 2), probes=("linear", "knn"), probe=FAST,
                             n_boot=100, out_dir=str(out), **kw)


def _write(enc, source, path, batch_size):
    """What `python -m birdjepa.embed ... --centre --out PATH` writes for a table source, with
    the encoder's own pooling (the one a direct evaluation uses)."""
    pool = enc.cfg.pool
    e = birdjepa.embeddings(enc, source, window_s=5.0, centre=True, pool=pool,
                       batch_size=batch_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"row": e["row"], "start_s": e["start_s"],
                             "end_s": e["start_s"] + 5.0,
                             f"emb_{pool}": outfile.vectors(e[f"emb_{pool}"])}), path)


@pytest.fixture(scope="module")
def emb_dir(corpus, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("external") / "my-vectors"
    enc, _ = runner.random_encoder(str(corpus / "tiny.toml"))
    bs = eval_config.EvalConfig().batch_size
    _write(enc, str(corpus / "train"), d / "train.parquet", bs)
    _write(enc, str(corpus / "test"), d / "test.parquet", bs)
    return d


@pytest.mark.slow  # ~60 CPU-s: two evaluations of 2 probes x 2 k x 3 seeds
def test_written_embeddings_evaluate_like_the_encoder(corpus, emb_dir, tmp_path):  # noqa: F811
    direct = birdjepa.evaluate.run(_cfg(corpus, tmp_path / "direct",
                                        random=(str(corpus / "tiny.toml"),)), verbose=False)
    ext = birdjepa.evaluate.run(_cfg(corpus, tmp_path / "ext", encoders=(f"emb:{emb_dir}",)),
                                verbose=False)
    key = lambda r: (r["probe"], r["k"], r["seed"], r["metric"])  # noqa: E731
    want = {key(r): r["value"] for r in direct["rows"]}
    got = {key(r): r["value"] for r in ext["rows"]}
    assert set(got) == set(want) and len(got) == 2 * 2 * 3 * len({k[3] for k in got})
    # The same windows through the same weights; the evaluation's jitted call also returns the
    # patch tokens, so XLA may fuse the pooled output differently: float32 rounding apart.
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-5, nan_ok=True), k
    assert {r["encoder"] for r in ext["rows"]} == {"my-vectors"}
    assert {r["encoder_run_dir"] for r in ext["rows"]} == {f"emb:{emb_dir.resolve()}"}


def test_missing_rows_and_token_probes_are_up_front_errors(corpus, emb_dir, tmp_path,  # noqa: F811
                                                           embed_calls):
    bad = tmp_path / "bad"
    bad.mkdir()
    t = pq.read_table(emb_dir / "train.parquet")
    keep = np.flatnonzero(t.column("row").to_numpy() != 3)
    pq.write_table(t.take(pa.array(keep)), bad / "train.parquet")
    (bad / "test.parquet").write_bytes((emb_dir / "test.parquet").read_bytes())
    with pytest.raises(birdjepa.config.ConfigError,
                       match=r"expected rows 0\.\.23 of the train split in .*train.parquet, got "
                             r"1 missing \(first \[3\]\)"):
        birdjepa.evaluate.run(_cfg(corpus, tmp_path / "o", encoders=(f"emb:{bad}",)),
                              verbose=False)
    (bad / "train.parquet").unlink()
    with pytest.raises(birdjepa.config.ConfigError, match="for the train split of test set 'A'"):
        birdjepa.evaluate.run(_cfg(corpus, tmp_path / "o", encoders=(f"emb:{bad}",)),
                              verbose=False)
    cfg = _cfg(corpus, tmp_path / "o", encoders=(f"emb:{emb_dir}",))
    cfg = eval_config.EvalConfig(**{**cfg.__dict__, "probes": ("linear", "attentive")})
    with pytest.raises(birdjepa.config.ConfigError, match=r"got \['attentive'\]"):
        birdjepa.evaluate.run(cfg, verbose=False)
    assert embed_calls == {"features": 0, "encode": 0}  # nothing was embedded


# Issue 38 items 17 and 20: a malformed file is a one-line ConfigError from the checks, before
# anything is embedded or probed. Each case: (train, test, vector column) -> (train, test, match);
# a `bytes` train is written as it is.
def _set(t: pa.Table, name: str, values: list, type_=None) -> pa.Table:
    return t.set_column(t.schema.get_field_index(name), name, pa.array(values, type_))


def _at(t: pa.Table, i: int) -> str:
    return re.escape(f"row {t['row'][i].as_py()} start_s {float(t['start_s'][i].as_py())}")


def _duplicate(train, test, col):
    i = int(np.flatnonzero(train["row"].to_numpy() == 3)[0])
    return (pa.concat_tables([train, train.slice(i, 1)]), test,
            r"expected each \(row, start_s\) window once, got .*train\.parquet: "
            + _at(train, i) + " appears 2 times")


def _string_elements(train, test, col):
    vecs = [[str(x) for x in v] for v in train[col].to_pylist()]
    return (_set(train, col, vecs), test, rf"expected column {col} of lists of numbers \(float "
            r"or int\) in .*train\.parquet, got list<(item|element): string>$")


def _ragged(train, test, col):
    vecs = train[col].to_pylist()
    vecs[5] = vecs[5][:-1]
    w = len(vecs[0])
    return (_set(train, col, vecs), test, rf"expected every vector in column {col} of "
            rf".*train\.parquet to have width {w} \(that of the first\), got width {w - 1} at "
            + _at(train, 5) + rf" \(1 of {len(vecs)} windows\)$")


def _null_vector(train, test, col):
    vecs = train[col].to_pylist()
    vecs[2] = None
    return (_set(train, col, vecs, train.schema.field(col).type), test,
            rf"expected a vector in every window of column {col} in .*train\.parquet, got 1 "
            r"null \(first at " + _at(train, 2) + r"\)$")


def _null_element(train, test, col):
    vecs = train[col].to_pylist()
    vecs[4][0] = None
    return (_set(train, col, vecs), test, rf"expected vectors of numbers in column {col} of "
            r".*train\.parquet, got 1 null elements \(first at " + _at(train, 4) + r"\)$")


def _zero_width(train, test, col):
    vecs = [[] for _ in range(len(train))]
    return (_set(train, col, vecs, pa.list_(pa.float32())), test,
            rf"expected every vector in column {col} of .*train\.parquet to have width at least "
            rf"1, got width 0 at " + _at(train, 0) + rf" \({len(vecs)} of {len(vecs)} windows\)$")


def _string_rows(train, test, col):
    return (_set(train, "row", [str(r) for r in train["row"].to_pylist()]), test,
            r"expected column row of integers in .*train\.parquet, got string$")


def _null_row(train, test, col):  # a second window of row 7 whose row is null
    extra = pa.concat_tables([train, train.slice(7, 1)])
    rows = extra["row"].to_pylist()
    rows[-1] = None
    return (_set(extra, "row", rows, pa.int64()), test, r"expected no null in column row of "
            rf".*train\.parquet, got 1 \(first in window {len(train)}, counting from 0\)$")


def _narrow_test(train, test, col):
    vecs = test[col].to_pylist()
    w = len(vecs[0])
    return (train, _set(test, col, [v[:w // 2] for v in vecs]),
            r"expected the vectors in .*test\.parquet to have the width of those in "
            rf".*train\.parquet \({w}\), got width {w // 2}$")


def _truncated(train, test, col):
    sink = pa.BufferOutputStream()
    pq.write_table(train, sink)
    data = sink.getvalue().to_pybytes()
    return (data[:len(data) // 2], test,
            r"expected a parquet file pyarrow can read at .*train\.parquet, got ArrowInvalid: ")


MALFORMED = {f.__name__[1:]: f for f in (_duplicate, _string_elements, _ragged, _null_vector,
                                         _null_element, _zero_width, _string_rows, _null_row,
                                         _narrow_test, _truncated)}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_embeddings_are_one_line_errors_before_embedding(
        case, corpus, emb_dir, tmp_path, embed_calls):  # noqa: F811
    train, test = (pq.read_table(emb_dir / f"{role}.parquet") for role in ("train", "test"))
    col = next(c for c in train.column_names if c.startswith("emb_"))
    train, test, match = MALFORMED[case](train, test, col)
    bad = tmp_path / "bad"
    bad.mkdir()
    for role, t in (("train", train), ("test", test)):
        if isinstance(t, bytes):
            (bad / f"{role}.parquet").write_bytes(t)
        else:
            pq.write_table(t, bad / f"{role}.parquet")
    # Widths with an encoder of ours beside it: checked before it is embedded or probed.
    ours = (str(corpus / "tiny.toml"),) if case == "narrow_test" else ()
    cfg = _cfg(corpus, tmp_path / "o", encoders=(f"emb:{bad}",), random=ours)
    with pytest.raises(birdjepa.config.ConfigError, match=match) as err:
        birdjepa.evaluate.run(cfg, verbose=False)
    assert "\n" not in str(err.value)
    assert embed_calls == {"features": 0, "encode": 0}
