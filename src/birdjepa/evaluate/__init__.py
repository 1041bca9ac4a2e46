"""Judging a frozen encoder the way the field does (BirdSet): probes trained on focal
recordings, tested on multilabel 5 s soundscape segments; cmAP, cmAP5, AUROC (BirdSet's and over
present classes), top-1, with intervals.

* `birdjepa.embeddings` (`birdjepa.models.inference.embeddings`): embeddings through the training transform.
* `birdjepa.evaluate.run(cfg)` / `python -m birdjepa.evaluate`: encoders x probes (linear,
  attentive, prototypical, kNN) x few-shot k x seeds on one or more test sets, into
  results.parquet / results.csv, BirdSet-style tables (results.md) and a plot.
* `python -m birdjepa.evaluate.report RESULTS...`: re-render and merge results files.
* Modules: `runner` (defines `run`; loads encoders), `checks` (checks before embedding),
  `cache` (embeddings per split), `protocol` (probes x k x seeds), `probes`, `metrics`, `intervals`,
  `results`, `report`, `progress`, `config` (splits are read by `birdjepa.data.table`).

`run` and `EvalConfig` are loaded on first access, so importing the package does not import JAX.
"""

__all__ = ["EvalConfig", "run"]


def __getattr__(name: str):
    if name == "run":
        import birdjepa.evaluate.runner

        return birdjepa.evaluate.runner.run
    if name == "EvalConfig":
        import birdjepa.evaluate.eval_config

        return birdjepa.evaluate.eval_config.EvalConfig
    raise AttributeError(f"module 'birdjepa.evaluate' has no attribute {name!r}")
