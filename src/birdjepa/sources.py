"""`python -m birdjepa.sources COMMAND`: the dataset tools (pack, from_files,
from_annotations, fewshot), and the public name of `birdjepa.data.sources` (how shard arguments
resolve: `resolve`, `class_names`)."""

import sys

import birdjepa.common.cli_args as cli_args
import birdjepa.data.fewshot as fewshot
import birdjepa.data.from_annotations as from_annotations
import birdjepa.data.from_files as from_files
import birdjepa.data.pack as pack
from birdjepa.data.sources import class_names, resolve

__all__ = ["class_names", "resolve"]  # re-exported; main is this command's own


def main(argv: list[str] | None = None) -> int:
    """`python -m birdjepa.sources pack SRC --out_dir DST ...` (birdjepa.data.pack),
    `python -m birdjepa.sources from_files SRC... --out_dir DST` (birdjepa.data.from_files) and
    `python -m birdjepa.sources from_annotations TABLE... --out_dir DST`
    (birdjepa.data.from_annotations) and `python -m birdjepa.sources fewshot SRC --out_dir DST
    --k K` (birdjepa.data.fewshot)."""
    p = cli_args.Parser("python -m birdjepa.sources", "Dataset tools of birdjepa.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           parser_class=cli_args.Parser,
                           help="the tool to run; `COMMAND --help` explains its options")
    pack.add_options(sub.add_parser(
        "pack", prog="python -m birdjepa.sources pack", description=pack.__doc__,
        help="write any readable dataset (path-only audio included) as embedded-bytes Arrow "
        "shards"))
    from_files.add_options(sub.add_parser(
        "from_files", prog="python -m birdjepa.sources from_files",
        description=from_files.__doc__,
        help="path-only Arrow shards from audio files (what datasets 5.x no longer writes)"))
    from_annotations.add_options(sub.add_parser(
        "from_annotations", prog="python -m birdjepa.sources from_annotations",
        description=from_annotations.__doc__,
        help="a test split (events, or labelled fixed windows) from Raven selection tables or "
        "CSV annotations"))
    fewshot.add_options(sub.add_parser(
        "fewshot", prog="python -m birdjepa.sources fewshot", description=fewshot.__doc__,
        help="k labelled recordings per class of a training split (evaluate's few-shot rows), "
        "alone or among the other rows unlabelled"))
    a = p.parse_args(argv)
    if a.command == "fewshot":
        return fewshot.run(a, resolve)
    if a.command == "from_annotations":
        return from_annotations.run(a, resolve, class_names)
    return from_files.run(a) if a.command == "from_files" else pack.run(a, resolve)


if __name__ == "__main__":
    sys.exit(main())
