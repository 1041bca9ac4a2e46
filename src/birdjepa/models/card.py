"""The README.md model card of an exported encoder (birdjepa.models.artifact)."""

import json
import os


def _eval_lines(summary: dict | None, run_dir) -> list[str]:
    lines = []
    for k, v in sorted((summary or {}).items()):
        if isinstance(v, int | float) and not isinstance(v, bool) and k.startswith(
                ("eval", "train", "final")):
            lines.append(f"| {k} | {v:.4g} |")
    report = os.path.join(str(run_dir), "eval", "results.json") if run_dir else ""
    if report and os.path.isfile(report):
        try:
            for k, v in sorted(json.load(open(report)).items()):
                if isinstance(v, int | float):
                    lines.append(f"| eval/{k} | {v:.4g} |")
        except (OSError, ValueError):
            pass
    return (["| metric | value |", "|---|---|", *lines] if lines
            else ["No evaluation results were recorded with this run."])


def input_words(a: dict) -> str:
    """The encoder's input (birdjepa.models.artifact.INPUT_KEYS) in words a user of another
    framework can follow."""
    f = a.get("fbank") or {}
    fb = ", ".join(f"{k}={v}" for k, v in f.items())
    where = {"start": "the first", "centre": "the centre"}.get(a.get("window"), "a")
    pad = ("the clip's minimum log-mel value, before normalising" if a.get("pad") == "min"
           else "0.0 after normalising")
    return (f"mono audio resampled to {a['sample_rate']} Hz; {where} {a['window_s']} s of a "
            f"recording, zero-padded to {a['window_s']} s when shorter; a Kaldi log-mel fbank "
            f"with {a['n_mels']} mel bins ({fb}); cut or padded to {a['n_frames']} frames, the "
            f"padding being {pad}; normalised as (x - ({a['mean']})) / (2 * {a['std']}). "
            f"Input shape (batch, {a['n_frames']}, {a['n_mels']}).")


def render(meta: dict, run_dir=None) -> str:
    """Markdown: objective, data, steps, evaluation results (when present), how to load."""
    cfg = meta.get("config") or {}
    m, a, head = meta["model"], meta["audio"], meta["head"]
    data = cfg.get("data", {})
    objective = (cfg.get("objective") or {}).get("name", "unknown")
    classes = head.get("classes") or []
    shown = ", ".join(classes[:20]) + (" ..." if len(classes) > 20 else "")
    return "\n".join([
        "# birdjepa encoder",
        "",
        f"A ViT ({m['width']} wide, {m['depth']} blocks, {m['n_heads']} heads, patches "
        f"{m['patch'][0]} x {m['patch'][1]}, {m['pos']} positions, pool {m['pool']}) trained "
        f"with birdjepa's `{objective}` objective for {meta.get('step')} steps "
        f"(batch {cfg.get('batch_size')}, seed {cfg.get('seed')}).",
        "",
        "## Data",
        "",
        f"- training shards: `{data.get('train_shards')}`, evaluation: "
        f"`{data.get('eval_shards')}`, label column `{data.get('label_column')}`",
        f"- input: {input_words(a)}",
        f"- head: {head.get('kind')} over {len(classes)} classes: {shown}",
        "",
        "## Evaluation",
        "",
        *_eval_lines(meta.get("summary"), run_dir),
        "",
        "## Load",
        "",
        "```python",
        "import birdjepa",
        "encoder, cfg = birdjepa.load_encoder(\"THIS_DIR\")  # no Orbax, no run directory",
        "out = encoder(x_btm)  # (B, T, M) normalised log-mel -> out.pooled_bd, out.patches_bnd",
        "emb = birdjepa.embed(\"THIS_DIR\", \"recording.ogg\")  # the training transform",
        "```",
        "",
        "From the command line: `python -m birdjepa.embed THIS_DIR AUDIO_DIR --out emb.parquet`,",
        "`python -m birdjepa.predict THIS_DIR AUDIO_DIR --out detections.csv`.",
        "",
        "Files: `encoder.safetensors` (arrays by path, float32), `head.safetensors`, "
        "`config.json` (model, audio settings, class names, the run's config).",
        "",
    ])
