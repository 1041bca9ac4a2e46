"""`python -m birdjepa.export MODEL --out_dir DIR [--step N] [--format F]`: a run's encoder as
safetensors + JSON + a model card, or an ONNX graph. The Python functions are
`birdjepa.models.artifact.export` and `export_onnx`; `birdjepa.load_encoder` reads an export."""

import sys

import birdjepa.common.cli_args as cli_args
import birdjepa.models.artifact as artifact
import birdjepa.runtime.checkpoint

export = artifact.export


def main(argv: list[str] | None = None) -> int:
    """Its options, in one place."""
    p = cli_args.Parser(
        "python -m birdjepa.export",
        "Write a run's encoder for use without this package's checkpoints: "
        "encoder.safetensors (arrays by path), head.safetensors (the supervised head, else the "
        "online probe), config.json (model, audio settings, class names, the run's config) and "
        "a README.md model card. Load it with birdjepa.load_encoder(DIR), or give DIR as "
        "MODEL to python -m birdjepa.embed / birdjepa.predict. With --format onnx: model.onnx "
        "(normalised fbank in; pooled embedding and, with a head, class probabilities out), "
        "config.json and a card saying how to compute the input.")
    p.add_argument("run_dir", metavar="MODEL", help="a training run directory; with --format "
                   "onnx also an export directory or NAME:WEIGHTS (bird-mae-base:PATH)")
    p.add_argument("--out_dir", required=True, help="directory to write (created)")
    p.add_argument("--step", type=cli_args.converter(int), default=None,
                   help="checkpoint step to export (default: the latest complete one)")
    p.add_flag("force", "export a run that is not COMPLETE or has non-finite parameters (the "
               "model card says so at the top); refused without it")
    p.add_flag("overwrite", "replace the files of an earlier export in OUT_DIR (refused "
               "without it; never MODEL's own directory)")
    p.add_argument("--format", choices=("safetensors", "onnx"), default="safetensors",
                   help="safetensors arrays for JAX, or an ONNX graph for onnxruntime and other "
                   "languages (needs the optional onnx extra: pip install 'birdjepa[onnx]')")
    args = p.parse_args(argv)
    try:
        if args.format == "onnx":  # jax2onnx (the optional onnx extra) is imported there
            out = artifact.export_onnx(args.run_dir, args.out_dir, step=args.step,
                                         force=args.force, overwrite=args.overwrite)
        else:
            out = artifact.export(args.run_dir, args.out_dir, step=args.step,
                                  force=args.force, overwrite=args.overwrite)
    except (OSError, KeyError, ValueError, ImportError,
            birdjepa.runtime.checkpoint.CorruptCheckpointError) as e:
        return cli_args.fail(e)
    print(f"exported {args.run_dir} -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
