"""The README.md model card of an exported encoder (birdjepa.models.artifact)."""

import json
import os


def _eval_lines(summary: dict | None, run_dir, step, held_out: bool = True,
                eval_is_train: bool = False) -> list[str]:
    """Held-out figures (the run's eval_* on its eval shards, and eval/results.json), or with
    held_out=False the training-split ones (train_*, final_*, and eval_* when the eval shards
    are the training shards), as a Markdown table; only if they belong to the exported step
    (after a checkpoint fallback the exported step is older than the results)."""
    done = (summary or {}).get("steps")
    if done is not None and step is not None and done != step:
        return [f"No results for step {step}: the evaluation recorded with this run belongs to "
                f"step {done}, whose checkpoint was not exported."]
    prefixes = (() if eval_is_train else ("eval",)) if held_out else (
        ("train", "final") + (("eval",) if eval_is_train else ()))
    lines = []
    for k, v in sorted((summary or {}).items()):
        if isinstance(v, int | float) and not isinstance(v, bool) and k.startswith(prefixes):
            lines.append(f"| {k} | {v:.4g} |")
    report = os.path.join(str(run_dir), "eval", "results.json") if run_dir else ""
    if held_out and report and os.path.isfile(report):
        try:
            for k, v in sorted(json.load(open(report)).items()):
                if isinstance(v, int | float):
                    lines.append(f"| eval/{k} | {v:.4g} |")
        except (OSError, ValueError):
            pass
    if lines:
        return ["| metric | value |", "|---|---|", *lines]
    return ["No held-out evaluation was recorded with this run." if held_out else
            "No training-split figures were recorded."]


def render(meta: dict, run_dir=None) -> str:
    """Markdown: objective, data, steps, evaluation results (when present), how to load."""
    cfg = meta.get("config") or {}
    m, a, head = meta["model"], meta["audio"], meta["head"]
    data = cfg.get("data", {})
    same = data.get("eval_shards") in (None, "", data.get("train_shards"))
    objective = (cfg.get("objective") or {}).get("name", "unknown")
    classes = head.get("classes") or []
    shown = ", ".join(classes[:20]) + (" ..." if len(classes) > 20 else "")
    forced = ([f"**Forced export (--force): {meta['forced']}.** Do not trust this model.", ""]
              if meta.get("forced") else [])
    return "\n".join([
        *forced,
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
        f"- input: {a['n_frames']} frames x {a['n_mels']} mel bins of a Kaldi log-mel fbank at "
        f"{a['sample_rate']} Hz ({a['window_s']} s windows), normalised as "
        f"(x - ({a['mean']})) / (2 * {a['std']})",
        f"- head: {head.get('kind')} over {len(classes)} classes: {shown}",
        "",
        "## Evaluation",
        "",
        *_eval_lines(meta.get("summary"), run_dir, meta.get("step"), eval_is_train=same),
        "",
        "## Training-split figures (not held-out)",
        "",
        *_eval_lines(meta.get("summary"), run_dir, meta.get("step"), held_out=False,
                     eval_is_train=same),
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
