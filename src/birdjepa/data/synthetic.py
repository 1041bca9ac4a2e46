"""A synthetic stand-in for `birdjepa.data.Loader` (same interface): a run without audio data
(tests, benchmarks, checking a config end to end in seconds).

Each class is a fixed random pattern of a few mel bands switched on and off in time; a clip is
its class pattern, randomly shifted in time, scaled, plus Gaussian noise. Views of one clip
differ in shift, scale and noise. Train mode is infinite and deterministic in (seed, batch
number); eval mode is a fixed finite set, re-iterable, whose last batch is padded to the batch
size with `valid` False on the padding rows.
"""

import numpy as np


class SyntheticLoader:
    multilabel = False
    """Targets are class ids (as `birdjepa.data.Loader.multilabel` says of an int column)."""

    def __init__(
        self,
        shards=None,
        *,
        mode: str = "train",
        batch_size: int,
        seed: int = 0,
        n_classes: int = 4,
        n_views: int = 1,
        n_frames: int = 64,
        n_mels: int = 128,
        n_eval: int = 50,
        noise: float = 1.0,
        state: dict | None = None,
        **_ignored,
    ):
        if mode not in ("train", "eval"):
            raise ValueError(f"mode: expected 'train' or 'eval', got {mode!r}")
        self.mode, self.batch_size, self.seed = mode, batch_size, seed
        self.n_classes, self.n_views, self.n_frames, self.n_mels = (
            n_classes, n_views, n_frames, n_mels
        )
        self.n_eval, self.noise = n_eval, noise
        self.n_batches = int((state or {}).get("n_batches", 0))
        self.n_clips = 0
        rng = np.random.default_rng(1234)  # class patterns are shared by train and eval
        bands = rng.random((n_classes, n_mels)) < 0.08
        rhythm = rng.random((n_classes, n_frames)) < 0.5
        self.patterns = 2.0 * (rhythm[:, :, None] & bands[:, None, :]).astype(np.float32)

    def _clips(self, rng: np.random.Generator, target: np.ndarray, n_views: int) -> np.ndarray:
        b = len(target)
        out = np.empty((n_views, b, self.n_frames, self.n_mels), np.float32)
        for v in range(n_views):
            shift = rng.integers(0, self.n_frames, b)
            scale = rng.uniform(0.7, 1.3, (b, 1, 1)).astype(np.float32)
            for i in range(b):
                out[v, i] = np.roll(self.patterns[target[i]], shift[i], axis=0)
            out[v] = out[v] * scale + self.noise * rng.standard_normal(out[v].shape, np.float32)
        return out

    def _batch(self, rng, target, index, n_views) -> dict:
        data = self._clips(rng, target, n_views)
        self.n_clips += len(target)
        return {
            "data": data if n_views > 1 else data[0],
            "target": target.astype(np.int64),
            "index": index.astype(np.int64),
            "shard": np.zeros(len(target), np.int32),
        }

    def __iter__(self):
        if self.mode == "eval":
            return self._eval_iter()
        return self._train_iter()

    def _train_iter(self):
        while True:
            rng = np.random.default_rng([self.seed, self.n_batches])
            target = rng.integers(0, self.n_classes, self.batch_size)
            index = self.n_batches * self.batch_size + np.arange(self.batch_size)
            self.n_batches += 1
            yield self._batch(rng, target, index, self.n_views)

    def _eval_iter(self):
        rng = np.random.default_rng([self.seed, 10**6])
        targets = np.arange(self.n_eval) % self.n_classes
        for start in range(0, self.n_eval, self.batch_size):
            idx = np.arange(start, min(start + self.batch_size, self.n_eval))
            pad = self.batch_size - len(idx)
            target = np.concatenate([targets[idx], np.zeros(pad, np.int64)])
            batch = self._batch(rng, target, np.concatenate([idx, np.zeros(pad, np.int64)]), 1)
            batch["valid"] = np.arange(self.batch_size) < len(idx)
            yield batch

    def state_dict(self) -> dict:
        return {"n_batches": self.n_batches}

    def stats(self) -> dict:
        return {"clips": self.n_clips, "batches": self.n_batches}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def loaders(cfg, *, n_eval: int = 12, train_state: dict | None = None):
    """(train, eval) SyntheticLoaders matching a `birdjepa.config.Config` (eval's last batch is
    padded); `train_state` resumes the train stream."""
    kw = dict(batch_size=cfg.batch_size, seed=cfg.seed, n_classes=cfg.n_classes,
              n_frames=cfg.data.n_frames, n_mels=cfg.data.n_mels)
    return (SyntheticLoader(mode="train", n_views=cfg.data.n_views, state=train_state, **kw),
            SyntheticLoader(mode="eval", n_eval=n_eval, **kw))
