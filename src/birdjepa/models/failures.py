"""Recordings embed and predict could not use, and those they used only in part: one summary at
the end of a pass (birdjepa.models.inference)."""

import warnings

import birdjepa.common.errors as errors

SKIPPED = (errors.AudioError, errors.DatasetError, OSError)
"""What makes a recording a counted skip: undecodable audio, a path-only file that is missing
(OSError) or not a regular file within max_audio_mb (DatasetError)."""


class Failures:
    """Recordings that could not be embedded, by kind (the exception's type), each named by
    file or row; `summary` counts them and names the first few."""

    def __init__(self, what: str = "embed"):
        self.what, self.by_kind, self.n_items = what, {}, 0
        self.damaged: dict[str, str] = {}
        """Recordings whose data stops early, by name: what was read and why it stopped
        (their windows up to the damage are kept; those after it are dropped)."""

    def add(self, name: str, e: BaseException) -> None:
        msg = " ".join(str(e).split())
        kind = type(e).__name__
        self.by_kind.setdefault(kind, []).append(f"{name}: {kind}: {msg}")

    def __len__(self) -> int:
        return sum(map(len, self.by_kind.values()))

    def summary(self, first: int = 3) -> str:
        kinds = ", ".join(f"{len(v)} {k}" for k, v in self.by_kind.items())
        names = [n for v in self.by_kind.values() for n in v][:first]
        more = f" (+{len(self) - first} more)" if len(self) > first else ""
        return (f"{self.what}: skipped {len(self)} of {self.n_items} recording(s) that failed "
                f"to decode ({kinds}): " + "; ".join(names) + more)

    def report(self) -> None:
        """Nothing, one warning, or (every recording failed) an error; and one warning naming
        the damaged recordings (where their data stops, and why)."""
        if self.damaged:
            (name, why), n = next(iter(self.damaged.items())), len(self.damaged)
            warnings.warn(f"{self.what}: {n} recording(s) damaged, their windows up to the damage "
                          f"kept, those after it dropped: {name}: {why}"
                          + (f" (+{n - 1} more)" if n > 1 else ""), RuntimeWarning, stacklevel=4)
        if not self:
            return
        if len(self) == self.n_items:
            raise errors.CorruptAudioError(self.summary().replace(
                "skipped", "every recording failed:", 1))
        warnings.warn(self.summary(), RuntimeWarning, stacklevel=4)
