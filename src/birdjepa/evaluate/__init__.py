"""Judging a frozen encoder the way the field does (BirdSet): probes trained on focal
recordings, tested on multilabel 5 s soundscape segments; cmAP, AUROC, top-1.

* `birdjepa.embed` (`embed.embed`): embeddings through the training transform.
* `birdjepa.evaluate.run(cfg)` / `python -m birdjepa.evaluate`: encoders x probes (linear,
  attentive, prototypical, kNN) x few-shot k x seeds, with results JSON, a table and a plot.
* `runner` (which defines `run`), `metrics`, `probes`, `fewshot`, `table`, `report`, `config`.

`run` and `EvalConfig` are loaded on first access, so importing the package does not import JAX.
"""

__all__ = ["EvalConfig", "run"]


def __getattr__(name: str):
    if name == "run":
        import birdjepa.evaluate.runner

        return birdjepa.evaluate.runner.run
    if name == "EvalConfig":
        import birdjepa.evaluate.config

        return birdjepa.evaluate.config.EvalConfig
    raise AttributeError(f"module 'birdjepa.evaluate' has no attribute {name!r}")
