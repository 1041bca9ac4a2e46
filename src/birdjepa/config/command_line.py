"""`--cfg FILE.toml` then `--key=value` overrides of a config dataclass: the command line of
`python -m birdjepa.pretrain`, `birdjepa.evaluate` and `birdjepa.launch`, in the one
voice of birdjepa.common.cli_args."""

import sys

import birdjepa.common.cli_args as cli_args
import birdjepa.config
import birdjepa.config.keys as keys


def cli(argv: list[str] | None = None, cls=None, *,
        prog: str = "python -m birdjepa.pretrain",
        description: str = "Pretrain a birdjepa encoder.", toml: bool = True,
        toml_paths=None):
    """`--cfg FILE.toml` (optional, loaded first) then `--key=value` overrides of a `cls`
    (default birdjepa.config.Config); `--help` lists --cfg and every field; `prog` is the
    command users type. An unknown key raises ConfigError (with close matches); a bad value
    prints one `error:` line and exits 2. `toml_paths(tables, path, overridden=keys)`, when given, rewrites the
    TOML's tables before the overrides apply (evaluate: its paths against the TOML's
    directory); without it, paths in the TOML are the current directory's, as on the
    command line."""
    config = birdjepa.config
    cls = cls or config.Config
    argv = cli_args.flags(list(sys.argv[1:] if argv is None else argv))
    bad = keys.unknown_flag(argv, cls)
    if bad:
        raise config.ConfigError(bad)
    p = cli_args.Parser(prog, description)
    if toml:
        p.add_argument("--cfg", metavar="FILE.toml", default="",
                       help="TOML file loaded first; every option below overrides it")
    p.config(cls)
    required = "".join(f" {a.option_strings[0]} {a.metavar}" for a in p._actions if a.required)
    p.usage = f"%(prog)s [-h]{' [--cfg FILE.toml]' if toml else ''}{required} [--KEY VALUE ...]"
    ns = p.parse_args(argv)
    base = config.load_dict(ns.cfg) if toml and ns.cfg else {}
    over = cli_args.overrides(p, ns)
    if toml_paths is not None and base:
        base = toml_paths(base, ns.cfg, overridden=set(over))
    return config.from_dict(cls, merge(base, over))


def merge(base: dict, over: dict) -> dict:
    """`base` updated by `over`, nested tables merged key by key (a path_map is replaced
    whole); a None in `over` removes the key (the field's default)."""
    out = dict(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict) and k != "path_map":
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out
