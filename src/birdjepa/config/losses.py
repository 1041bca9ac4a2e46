"""The objectives' configs as plain data (no JAX): `ObjectiveConfig` picks one objective and
holds each one's sub-config; the loss code lives in birdjepa.objectives."""

import dataclasses
import math
import typing


def require(ok: bool, key: str, expected: str, got) -> None:
    """ValueError "key: expected ..., got ..." unless `ok` (birdjepa.config.validate makes it a
    ConfigError)."""
    if not ok:
        raise ValueError(f"{key}: expected {expected}, got {got!r}")


def _in(v, lo, hi, *, lo_open=False, hi_open=False) -> bool:
    """Whether the number `v` is finite and within the interval."""
    return (isinstance(v, int | float) and math.isfinite(v) and (v > lo if lo_open else v >= lo)
            and (v < hi if hi_open else v <= hi))


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    gain: float = 0.0
    """Half-width of the uniform level offset (normalised log-mel units; 0.1 ~ 4 dB)."""
    tilt: float = 0.0
    """Half-width of the uniform spectral tilt (total change from the lowest to highest bin)."""
    contrast: float = 0.0
    """Half-width of the uniform contrast factor around 1."""
    lowpass_p: float = 0.0
    """Probability of a random low-pass cutoff per view."""
    lowpass_min: float = 0.5
    """Lowest cutoff as a fraction of the mel bins."""
    lowpass_max: float = 1.0
    """Highest cutoff as a fraction of the mel bins. Below the band edge of the lowest sample
    rate in the data (0.9 for 22.05 kHz sources at the loader's 32 kHz), with lowpass_p = 1 every
    view is band-limited below it and the sources' sample rate is no longer visible."""
    mix: float = 0.0
    """Mix in another clip of the batch (rolled by a random shift, drawn per view) in the power
    domain with a weight uniform in [0, mix] (BYOL-A's mixup): every view gets another
    background, so noise colour and level stop being shared by the views of a recording."""
    floor: float = -0.99
    """Floor value of the normalised log-mel (the loader's value for an empty bin)."""
    time_mask: float = 0.0
    """SpecAugment's time mask: one run of frames per clip, of a width uniform in [0, time_mask
    x frames], set to the clip's mean. 0: off."""
    freq_mask: float = 0.0
    """SpecAugment's frequency mask: one run of mel bins per clip, of a width uniform in [0,
    freq_mask x bins], set to the clip's mean. 0: off."""

    @property
    def enabled(self) -> bool:
        return bool(self.gain or self.tilt or self.contrast or self.lowpass_p or self.mix
                    or self.time_mask or self.freq_mask)

    def check(self, prefix: str) -> None:
        for key in ("gain", "tilt"):
            require(_in(getattr(self, key), 0, math.inf), prefix + key, "a finite number >= 0",
                    getattr(self, key))
        require(_in(self.contrast, 0, 1, hi_open=True), prefix + "contrast",
                "a number in [0, 1) (the factor 1 +- contrast stays positive)", self.contrast)
        require(_in(self.lowpass_p, 0, 1), prefix + "lowpass_p", "a probability in [0, 1]",
                self.lowpass_p)
        require(_in(self.lowpass_min, 0, 1, lo_open=True), prefix + "lowpass_min",
                "a fraction in (0, 1]", self.lowpass_min)
        require(_in(self.lowpass_max, self.lowpass_min, 1), prefix + "lowpass_max",
                f"a fraction in [lowpass_min={self.lowpass_min}, 1]", self.lowpass_max)
        require(_in(self.mix, 0, 1), prefix + "mix",
                "a weight in [0, 1] (the other clip's share of the power)", self.mix)
        require(_in(self.floor, -math.inf, math.inf), prefix + "floor", "a finite number",
                self.floor)
        for key in ("time_mask", "freq_mask"):
            require(_in(getattr(self, key), 0, 1, hi_open=True), prefix + key,
                    "a fraction in [0, 1) (the longest masked run)", getattr(self, key))


@dataclasses.dataclass(frozen=True)
class SupervisedConfig:
    label_smoothing: float = 0.0
    """Label smoothing for the cross-entropy (0 = none), in [0, 1): at 1 the target is uniform
    whatever the label."""
    mix: float = 0.0
    """Multilabel mixup, for a list<int> label column (sigmoid targets) only: every clip gets
    another clip of the batch added in the power domain, with a weight uniform in [0, mix], and
    that clip's labels joined to its own (BirdSet's multilabel mixup). A noise recording (an
    empty label set) then becomes background under a bird: soundscape conditions. 0: off."""
    augment: AugmentConfig = AugmentConfig()
    """The training views' spectrogram augmentations, the settings objective.lejepa.augment
    takes (gain, tilt, contrast, low-pass, mixing, time and frequency masks; default: none),
    each drawn per clip; evaluation and the online probe's metrics at eval see clean clips."""

    def check(self, prefix: str) -> None:
        require(_in(self.label_smoothing, 0, 1, hi_open=True), prefix + "label_smoothing",
                "a number in [0, 1)", self.label_smoothing)
        require(_in(self.mix, 0, 1), prefix + "mix",
                "a weight in [0, 1] (the other clip's share of the power)", self.mix)
        self.augment.check(prefix + "augment.")


@dataclasses.dataclass(frozen=True)
class LeJEPAConfig:
    lambd: float = 0.05
    """Weight of SIGReg; invariance gets 1 - lambd."""
    n_slices: int = 256
    """Random projection directions M for SIGReg, resampled every step."""
    n_points: int = 17
    """Quadrature points t, evenly spaced on [-t_max, t_max]."""
    t_max: float = 5.0
    """Half-width of the quadrature interval."""
    proj_hidden: int = 512
    """Hidden width of the projector MLP (encoder pooled -> hidden -> proj_dim)."""
    proj_dim: int = 64
    """Output dimension of the projector: the space where both terms act. 0: no projector, both
    terms act on the encoder's pooled embedding itself (which SIGReg then makes isotropic)."""
    augment: AugmentConfig = AugmentConfig()
    """Per-view spectrogram augmentations (default: none); the probe sees the clean views."""
    supervised_weight: float = 0.0
    """Semi-supervised LeJEPA (Perch 2.0's lesson: use the labels where there are some): this
    weight times the cross-entropy of a linear head on the pooled embedding of the global views,
    over the rows that have a label, is added to the LeJEPA loss, and its gradient reaches the
    encoder. Rows without one (a null label, -1: `python -m birdjepa.sources fewshot --keep
    all` writes k labelled recordings per class among the others unlabelled) add nothing to it.
    0: label-free (the online probe still only reports)."""

    def check(self, prefix: str) -> None:
        require(_in(self.supervised_weight, 0, math.inf), prefix + "supervised_weight",
                "a finite weight >= 0", self.supervised_weight)
        require(_in(self.lambd, 0, 1), prefix + "lambd",
                "a weight in [0, 1] (invariance gets 1 - lambd)", self.lambd)
        for key, least in (("n_slices", 1), ("n_points", 2), ("proj_hidden", 1)):
            v = getattr(self, key)
            require(v >= least, prefix + key, f"an int >= {least}", v)
        require(_in(self.t_max, 0, math.inf, lo_open=True), prefix + "t_max",
                "a finite number > 0 (the quadrature interval's half-width)", self.t_max)
        require(self.proj_dim >= 0, prefix + "proj_dim", "an int >= 0 (0: no projector)",
                self.proj_dim)
        self.augment.check(prefix + "augment.")


@dataclasses.dataclass(frozen=True)
class MAEConfig:
    mask_ratio: float = 0.75
    """Fraction of patches hidden from the encoder."""
    block: tuple[int, int] = (2, 2)
    """Masking cell size in patches (time, mel); (1, 1) is unstructured random masking."""
    dec_width: int = 128
    """Decoder token dimension."""
    dec_depth: int = 2
    """Decoder transformer blocks."""
    dec_heads: int = 4
    """Decoder attention heads."""
    norm_pix: bool = True
    """Normalise each target patch to zero mean, unit variance."""

    def check(self, prefix: str) -> None:
        require(_in(self.mask_ratio, 0, 1, lo_open=True, hi_open=True), prefix + "mask_ratio",
                "a fraction in (0, 1) (some patches hidden, some seen)", self.mask_ratio)
        require(all(b >= 1 for b in self.block), prefix + "block", "two ints >= 1", self.block)
        for key in ("dec_width", "dec_depth", "dec_heads"):
            require(getattr(self, key) >= 1, prefix + key, "an int >= 1", getattr(self, key))
        require(self.dec_width % self.dec_heads == 0, prefix + "dec_width",
                f"a multiple of dec_heads={self.dec_heads}", self.dec_width)


@dataclasses.dataclass(frozen=True)
class ProbeOnlyConfig:
    """No options: the probe trains on the clean views, as in every objective."""


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
    name: typing.Literal["supervised", "lejepa", "mae", "probe_only"] = "supervised"
    """Which objective trains the encoder; only its sub-config below is used. "probe_only" trains
    nothing but the online probe (the random-encoder baseline; use optim.weight_decay = 0)."""
    supervised: SupervisedConfig = SupervisedConfig()
    lejepa: LeJEPAConfig = LeJEPAConfig()
    mae: MAEConfig = MAEConfig()
    probe_only: ProbeOnlyConfig = ProbeOnlyConfig()

    def check(self) -> None:
        """ValueError naming the key, expected and actual value of the chosen objective's first
        bad setting."""
        sub = getattr(self, self.name)
        if hasattr(sub, "check"):
            sub.check(f"objective.{self.name}.")


TERMS: dict[str, dict[str, str]] = {
    "supervised": {"ce": "cross-entropy"},
    "lejepa": {"sigreg": "SIGReg statistic", "inv": "invariance"},
    "mae": {"mse": "reconstruction error"},
    "probe_only": {},
}
"""The loss terms each objective logs beside `loss` (its weighted total; for one term, the term
itself), with what they measure: the curves `curves.png` plots (birdjepa.train.log.plot).
LeJEPA runs are judged by theirs (SIGReg falling, the invariance not collapsing to 0)."""
