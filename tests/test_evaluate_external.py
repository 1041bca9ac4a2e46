"""Issue 29 item 6: precomputed embeddings as an encoder (`emb:DIR`, parquet in
`python -m birdjepa.embed`'s schema). Our own encoder evaluated through its written embeddings
gives the results of evaluating it directly; missing rows and token probes are up-front errors."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_evaluate_run import FAST, corpus  # noqa: F401 (the shared module fixture)

import birdjepa
import birdjepa.config
import birdjepa.evaluate
import birdjepa.evaluate.config as config
import birdjepa.evaluate.runner as runner
import birdjepa.models.recordings as recordings


def _cfg(corpus, out, **kw):  # noqa: F811
    return config.EvalConfig(train_shards=str(corpus / "train"),
                             test_sets=(config.TestSet("A", str(corpus / "test")),),
                             shots=(0, 1), seeds=(0, 1, 2), probes=("linear", "knn"), probe=FAST,
                             n_boot=100, out_dir=str(out), **kw)


def _write(enc, source, path, batch_size):
    """What `python -m birdjepa.embed ... --centre --out PATH` writes for a table source, with
    the encoder's own pooling (the one a direct evaluation uses)."""
    pool = enc.cfg.pool
    e = birdjepa.embed(enc, source, window_s=5.0, centre=True, pool=pool,
                       batch_size=batch_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"row": e["row"], "start_s": e["start_s"],
                             "end_s": e["start_s"] + 5.0,
                             f"emb_{pool}": recordings.vectors(e[f"emb_{pool}"])}), path)


@pytest.fixture(scope="module")
def emb_dir(corpus, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("external") / "my-vectors"
    enc, _ = runner.random_encoder(str(corpus / "tiny.toml"))
    bs = config.EvalConfig().batch_size
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
    cfg = config.EvalConfig(**{**cfg.__dict__, "probes": ("linear", "attentive")})
    with pytest.raises(birdjepa.config.ConfigError, match=r"got \['attentive'\]"):
        birdjepa.evaluate.run(cfg, verbose=False)
    assert embed_calls == {"features": 0, "encode": 0}  # nothing was embedded
