"""One command-line voice for every CLI of the package, over the standard library's argparse.

- Options are spelled with underscores (`--n_steps`, `--slurm.tasks_per_node`); dashes are an
  alias (`--n-steps`). Booleans are `--flag` / `--no_flag`; a list is a repeated flag
  (`--encoders A --encoders B`); a path map is `--path_map OLD=NEW`, repeated.
- Config dataclasses become options field by field (`Parser.config`): nested sections as
  `--optim.lr`, the field's docstring as its help sentence (birdjepa.config.command_line adds
  `--cfg FILE.toml`, loaded first).
- Every error is one line, `error: ...`, on stderr with exit status 2 (`Parser.error`, `fail`):
  a bad value, an unknown option (with its close matches), a missing argument.

A CLI lists its options in one function (`parser()` or `main`), one `add_*` call each. This
module imports nothing of the package, so every layer (data/ included) can use it.
"""

import argparse
import ast
import dataclasses
import difflib
import functools
import inspect
import operator
import pathlib
import re
import sys
import textwrap
import types
import typing

EXIT_USAGE = 2
"""Exit status of every usage or configuration error."""


def fail(message: object) -> int:
    """Print `error: message` on one line to stderr and return EXIT_USAGE."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    return EXIT_USAGE


class _Survives:
    """A text stream that swallows the error of a closed reader (a pipe whose `tee` Ctrl-C
    killed, a closed terminal): from the first such write on, the text goes nowhere and the
    program goes on (to save its checkpoint)."""

    def __init__(self, stream):
        self._stream, self.closed_reader = stream, False

    def write(self, text: str) -> int:
        if not self.closed_reader:
            try:
                return self._stream.write(text)
            except (BrokenPipeError, ConnectionResetError, ValueError):
                self.closed_reader = True  # ValueError: a stream closed in this process
        return len(text)

    def flush(self) -> None:
        if not self.closed_reader:
            try:
                self._stream.flush()
            except (BrokenPipeError, ConnectionResetError, ValueError):
                self.closed_reader = True

    def __getattr__(self, name):
        return getattr(self._stream, name)


def survive_closed_output() -> None:
    """From now on, a write to stdout or stderr whose reader is gone (`... | tee log` with tee
    killed by the same Ctrl-C) is dropped instead of raising: a long command's prints never
    stop what it is doing (a training run saving the checkpoint Ctrl-C promises)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Survives):
            setattr(sys, name, _Survives(stream))


def flags(argv: list[str]) -> list[str]:
    """`argv` with dashes in option names read as underscores (`--n-steps=3` -> `--n_steps=3`,
    `--no-dry-run` -> `--no_dry_run`); values are left alone."""
    out = []
    for a in argv:
        if a.startswith("--") and len(a) > 2:
            name, eq, value = a[2:].partition("=")
            a = "--" + name.replace("-", "_") + eq + value
        out.append(a)
    return out


class _Flag(argparse.Action):
    """`--name` sets True, `--no_name` sets False."""

    def __init__(self, option_strings, dest, **kw):
        name = option_strings[0][2:]
        super().__init__([f"--{name}", f"--no_{name}"], dest, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no_"))

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


class _PathMap(argparse.Action):
    """Repeated `OLD=NEW` pairs into one dict (stored prefix -> local prefix)."""

    def __call__(self, parser, namespace, values, option_string=None):
        old, eq, new = values.partition("=")
        if not eq or not old:
            parser.error(f"argument {option_string}: expected OLD=NEW (a stored path prefix = "
                         f"its local prefix), got {values!r}")
        current = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, {**(current or {}), old: new})


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help with each option's default appended, and wide enough for dotted names."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=32, width=100)

    def _get_help_string(self, action):
        text = action.help or ""
        shown = getattr(action, "shown_default", action.default)
        unset = shown is None or shown is False or shown is argparse.SUPPRESS
        if unset or shown in ("", [], (), {}) or "%(default)" in text:
            return text
        if isinstance(shown, dict):
            shown = " ".join(f"{k}={v}" for k, v in shown.items())
        elif isinstance(shown, list | tuple):
            shown = " ".join(map(str, shown))
        return f"{text} (default: {str(shown).replace('%', '%%')})"


def converter(t) -> typing.Callable[[str], typing.Any]:
    """A str -> value function for a field type: int, float, str, bool, a Literal, or a union of
    them; raises argparse.ArgumentTypeError naming the expected and the actual value."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Literal:
        parts = [converter(type(a)) for a in args]
        expected = "one of " + ", ".join(map(str, args))
    elif origin in (typing.Union, types.UnionType):
        parts = [converter(a) for a in args if a is not type(None)]
        expected = " or ".join(_name(a) for a in args if a is not type(None))
    else:
        parts, expected = None, _name(t)

    def convert(s: str):
        if parts is None:
            try:
                return _scalar(t, s)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected {expected}, got {s!r}") from None
        for p in parts:
            try:
                v = p(s)
            except argparse.ArgumentTypeError:
                continue
            if origin is not typing.Literal or v in args:
                return v
        raise argparse.ArgumentTypeError(f"expected {expected}, got {s!r}")

    convert.__name__ = expected
    convert.metavar = _metavar(t)
    return convert


def _name(t) -> str:
    if typing.get_origin(t) is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(t)))
    return {int: "an int", float: "a number", str: "a string", bool: "true or false"}.get(
        t, getattr(t, "__name__", str(t)))


def _scalar(t, s: str):
    if t is bool:
        low = s.lower()
        if low not in ("true", "false", "1", "0"):
            raise ValueError(s)
        return low in ("true", "1")
    if t in (int, float):
        return t(s)
    if t is str:
        return s
    raise ValueError(f"unsupported type {t}")


@functools.cache
def field_docs(cls) -> dict[str, str]:
    """The docstring under each field of dataclass `cls` (its bases' too), one line each."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, nxt in zip(body, body[1:] + [None], strict=True):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                    isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and \
                    isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


INTERNAL = re.compile(r"birdjepa\.[a-z_]+|docs/issues|\w+\.py\b|src/")
"""What a user's --help does not need: the package's module paths, investigations, source files."""


def summary(doc: str) -> str:
    """The --help line of a field's docstring: its first sentence, without the parenthetical
    remarks that name the package's modules or investigations (the docstring, in the source
    and the guides, keeps them)."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(doc):  # drop each outermost (...) that names something internal
        if c == "(":
            if depth == 0:
                out.append(doc[start:i])
                start = i
            depth += 1
        elif c == ")" and depth:
            depth -= 1
            if depth == 0:
                group = doc[start:i + 1]
                out.append("" if INTERNAL.search(group) else group)
                start = i + 1
    text = "".join(out) + doc[start:]
    text = re.sub(r"\s+([,.;:])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()
    first = re.split(r"(?<!e\.g)(?<!i\.e)(?<![A-Z]\.)\.\s+(?=[A-Z\"'`])", text, maxsplit=1)
    clauses = _clauses(first[0].rstrip("."))  # a clause naming a module is left out
    kept = [c for c in clauses if not INTERNAL.search(c)] or [INTERNAL.sub("it", clauses[0])]
    return "; ".join(kept) + "."


def _clauses(text: str) -> list[str]:
    """`text` split at each "; " outside parentheses."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0 and text.startswith("; ", i):
            out.append(text[start:i])
            start = i + 2
    return out + [text[start:]]


def _optional(t) -> tuple[typing.Any, bool]:
    """(t without None, whether None was allowed)."""
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if len(args) < len(typing.get_args(t)):
            return (args[0] if len(args) == 1 else functools.reduce(operator.or_, args)), True
    return t, False


def _as_run(prog: str) -> str:
    """`prog` ("python -m birdjepa.X [sub]") as the user ran it: an installed script
    (`birdjepa-x`, [project.scripts]) names itself, followed by the subcommand."""
    script = pathlib.Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    words = prog.split()
    if script.startswith("birdjepa-") and words[:2] == ["python", "-m"] and len(words) >= 3:
        return " ".join([script, *words[3:]])
    return prog


class Parser(argparse.ArgumentParser):
    """argparse with the package's voice: one-line `error:` messages and exit 2, unknown
    options answered with their close matches, dashes read as underscores, and `add_flag`,
    `add_list`, `add_path_map` and `config` for the option kinds every CLI shares."""

    def __init__(self, prog: str, description: str, **kw):
        if description and "\n" not in description.strip():
            description = textwrap.fill(description, 100)
        prog = _as_run(prog)
        super().__init__(prog=prog, description=description, formatter_class=_Formatter,
                         allow_abbrev=False, **kw)
        self.config_fields: dict[str, typing.Any] = {}

    def add_argument(self, *names, **kw):
        """argparse's, with the metavar of the value's type (INT, FLOAT, STR) by default."""
        if names and names[0].startswith("--") and "metavar" not in kw and "choices" not in kw \
                and kw.get("action") in (None, "store", "append"):
            kw["metavar"] = getattr(kw.get("type"), "metavar", "STR")
        return super().add_argument(*names, **kw)

    def error(self, message: str):
        sys.exit(fail(message))

    def add_flag(self, name: str, help: str, default: bool = False, **kw):
        """`--name` / `--no_name` (a boolean)."""
        return self.add_argument(f"--{name}", action=_Flag, default=default, help=help, **kw)

    def add_list(self, name: str, help: str, **kw):
        """A list option: one value per flag, the flag repeated (`--pool cls --pool mean`)."""
        return self.add_argument(f"--{name}", action="append", help=help, **kw)

    def add_path_map(self, name: str = "path_map", help: str | None = None, **kw):
        """`--path_map OLD=NEW`, repeatable: a stored audio path prefix and its local one."""
        help = help or ("rewrite a stored audio path prefix OLD to the local prefix NEW "
                        "(before the audio root); repeat for more prefixes")
        return self.add_argument(f"--{name}", action=_PathMap, metavar="OLD=NEW", help=help,
                                 **kw)

    def config(self, cls, prefix: str = "", *, title: str | None = None,
               doc: str | None = None) -> None:
        """One option per leaf field of dataclass `cls` (nested dataclasses as `prefix.`
        groups), unset unless given: `overrides(namespace)` returns what the user set."""
        group = self.add_argument_group(title, doc) if title else self
        hints, docs = typing.get_type_hints(cls), field_docs(cls)
        nested = []
        for f in dataclasses.fields(cls):
            t, key = hints[f.name], prefix + f.name
            if dataclasses.is_dataclass(t):
                nested.append((t, key))
                continue
            kw = _field_kw(t, f, docs.get(f.name, ""))
            if kw is None:
                continue  # a list of tables: TOML only
            self.config_fields[key] = t
            group.add_argument(f"--{key}", dest=key, **kw).shown_default = _default(f)
        for t, key in nested:
            doc = summary(" ".join(t.__doc__.split())) if t.__doc__ and not \
                t.__doc__.startswith(t.__name__ + "(") else ""
            self.config(t, key + ".", title=f"{key} options", doc=doc or None)

    def parse_args(self, args=None, namespace=None):
        argv = [self._bool(a) for a in flags(list(sys.argv[1:] if args is None else args))]
        ns, extra = self.parse_known_args(argv, namespace)
        if extra:
            self.error(self._unknown(extra[0]))
        return ns

    def _bool(self, arg: str) -> str:
        """`--flag=true` / `--flag=false` (older command lines) as `--flag` / `--no_flag`."""
        name, eq, value = arg.partition("=")
        action = self._option_string_actions.get(name)
        if not eq or not isinstance(action, _Flag) or name.startswith("--no_"):
            return arg
        if value.lower() not in ("true", "false", "1", "0"):
            self.error(f"argument {name}: expected true or false (or {name} / --no_{name[2:]} "
                       f"alone), got {value!r}")
        return name if value.lower() in ("true", "1") else f"--no_{name[2:]}"

    def _unknown(self, arg: str) -> str:
        if not arg.startswith("-"):
            return f"unexpected argument {arg!r}"
        name = arg.split("=", 1)[0]
        known = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else "; see --help"
        return f"unknown option {name}{hint}"


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _field_kw(t, f: dataclasses.Field, doc: str) -> dict | None:
    """add_argument keywords for a config field of type `t` (value unset unless given)."""
    kw: dict = {"default": argparse.SUPPRESS, "help": summary(doc).replace("%", "%%")}
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        kw["required"] = True
    base, optional = _optional(t)
    origin, args = typing.get_origin(base), typing.get_args(base)
    if base is bool:
        return {**kw, "action": _Flag}
    if origin is dict:
        return {**kw, "action": _PathMap, "metavar": "OLD=NEW"}
    if origin is tuple:
        if dataclasses.is_dataclass(args[0]):
            return None
        if args[-1] is Ellipsis:
            return {**kw, "action": "append", "type": converter(args[0]), "metavar": _metavar(args[0])}
        return {**kw, "nargs": len(args), "type": converter(args[0]), "metavar": _metavar(args[0])}
    convert = converter(base)
    if optional:  # "none", when not a value of the type, sets the field back to unset
        def convert_or_none(s: str, c=convert):
            try:
                return c(s)
            except argparse.ArgumentTypeError:
                if s.lower() == "none":
                    return None
                raise
        convert_or_none.__name__ = convert.__name__
        kw["type"] = convert_or_none
    else:
        kw["type"] = convert
    if origin is typing.Literal:
        kw["metavar"] = "{" + ",".join(map(str, args)) + "}"
    else:
        kw["metavar"] = _metavar(base)
    return kw


def _metavar(t) -> str:
    names = {int: "INT", float: "FLOAT", str: "STR", bool: "BOOL"}
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        parts = []
        for a in typing.get_args(t):
            parts += list(map(str, typing.get_args(a))) if typing.get_origin(
                a) is typing.Literal else [names.get(a, "VALUE")]
        return "{" + ",".join(parts) + "}"
    return names.get(t, "VALUE")


def overrides(parser: Parser, ns: argparse.Namespace) -> dict:
    """The config values the command line set, as a nested dict (`{"optim": {"lr": 1e-3}}`);
    an optional field set to `none` is left out (its default, unset)."""
    out: dict = {}
    for key in parser.config_fields:
        if key not in vars(ns):
            continue
        value = getattr(ns, key)
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = list(value) if isinstance(value, tuple) else value
    return out

