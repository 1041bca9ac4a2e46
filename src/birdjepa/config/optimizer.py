"""`OptimConfig`: optimiser and schedule settings as plain data (the optax code is
birdjepa.optim)."""

import dataclasses
import typing


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    """Peak learning rate of AdamW."""
    schedule: typing.Literal["cosine", "wsd"] = "cosine"
    """Linear warmup then cosine decay, or warmup-stable-decay (linear decay at the end)."""
    warmup: int = 100
    """Warmup updates; the lr rises linearly from peak/warmup to peak."""
    final_lr_frac: float = 0.01
    """Floor of the decay as a fraction of the peak; > 0 so the lr is never 0."""
    decay_frac: float = 0.2
    """WSD only: fraction of n_steps spent in the final decay."""
    weight_decay: float = 0.05
    """Decoupled weight decay on Linear weight matrices only (not norms, biases, embeddings,
    position embeddings, CLS/register/mask tokens, LayerScale)."""
    b1: float = 0.9
    """Adam beta1."""
    b2: float = 0.95
    """Adam beta2."""
    clip: float = 1.0
    """Global-norm gradient clipping of encoder + heads; 0 disables."""
    muon: bool = False
    """Muon (Newton-Schulz orthogonalised momentum) on the transformer blocks' weight matrices;
    AdamW on everything else."""
    muon_lr: float = 0.02
    """Peak learning rate of the Muon leaves."""
    grad_accum: int = 1
    """Micro-batches per update; batch_size must be divisible by it."""
    probe_lr: float = 1e-3
    """Peak learning rate of the online linear probe (AdamW, no weight decay, no clipping)."""
