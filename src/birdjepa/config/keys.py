"""Unknown config keys and CLI flags, in one line with the close matches (difflib). Plain data,
no JAX; birdjepa.config raises the lines as ConfigError."""

import dataclasses
import difflib
import typing


def _line(what: str, close: list[str], names: list[str]) -> str:
    hint = (f"did you mean {' or '.join(close)}?" if close else
            f"expected one of {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}")
    return f"unknown {what}; {hint}"


def unknown_key(prefix: str, key: str, names: list[str]) -> str:
    """The line for TOML key `prefix + key`, not among a table's field `names`."""
    close = [repr(prefix + c) for c in difflib.get_close_matches(key, names, n=3)]
    return _line(f"config key {prefix + key!r}", close, names)


def leaf_names(cls, prefix: str = "") -> list[str]:
    """Dotted names of every leaf field of dataclass `cls` ("optim.lr", ...)."""
    out = []
    for f in dataclasses.fields(cls):
        t = typing.get_type_hints(cls)[f.name]
        out += leaf_names(t, f"{prefix}{f.name}.") if dataclasses.is_dataclass(t) else [
            prefix + f.name]
    return out


def unknown_flag(argv: list[str], cls) -> str | None:
    """The line for the first --flag of `argv` that names no field of `cls` (nor --cfg or
    --help), or None."""
    names = leaf_names(cls)
    known = {n.replace("-", "_") for n in names} | {"help", "h", "cfg"}
    known |= {"no_" + n for n in known}  # booleans: --flag / --no_flag
    for a in argv:
        if not a.startswith("--") or a == "--":
            continue
        name = a[2:].split("=", 1)[0].replace("-", "_")
        if name not in known:
            close = ["--" + c for c in difflib.get_close_matches(name, names, n=3, cutoff=0.6)]
            return _line(f"option --{a[2:].split('=', 1)[0]}", close, ["--" + n for n in names])
    return None
