"""`birdjepa.audio`: the public name of the audio transforms (decode, resample, fbank, clip),
defined in `birdjepa.data.audio`. A plain re-export of the same functions: to patch one, patch it
in `birdjepa.data.audio`, where the package's own code looks it up."""

from birdjepa.data.audio import as_mono, clip, decode, fbank, info, resample

__all__ = ["as_mono", "clip", "decode", "fbank", "info", "resample"]
