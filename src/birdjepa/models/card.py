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


def resampler_words(a: dict) -> str:
    """How to resample as the encoder's input was resampled (its `resampler`), in words a user
    of another framework can follow: the call that matches it, and what birdjepa names it."""
    sr = a["sample_rate"]
    if a.get("resampler") == "soxr-hq":
        return (f"with soxr HQ (libsoxr's 'HQ' quality, as Hugging Face `datasets` and librosa "
                f">= 0.10 resample: `soxr.resample(x, sr, {sr}, quality=\"HQ\")`; birdjepa "
                "computes that response itself, `resampler = \"soxr-hq\"`, to < 1e-3 relative "
                "L2 of its log-mel)")
    return ("with the filter birdjepa resampled with before issue 36 (`resampler = "
            "\"rubato-bh2-1024\"`: rubato's FFT resampler, a Blackman-Harris^2 windowed sinc of "
            "about 1024 taps; `birdjepa.audio.resample(x, sr, "
            f"{sr}, resampler=\"rubato-bh2-1024\")`. soxr HQ's log-mel is 2-6e-2 relative L2 "
            "away from it, above 14 kHz)")


ACTIVATION_WORDS = {
    "softmax": "softmax over the classes (trained on class ids: one class per window; it "
               "cannot say \"nothing here\")",
    "sigmoid": "a sigmoid per class (trained on a list<int> label column with binary "
               "cross-entropy, an empty list meaning nothing here: a window with every class "
               "below the threshold, 0.5 by default in our measurements, holds no detection; "
               "docs/issues/024-soundscape-abstain)"}
"""How the head's logits become probabilities, by `head.activation` (Model.activation)."""


def input_words(a: dict) -> str:
    """The encoder's input (birdjepa.models.artifact.INPUT_KEYS) in words a user of another
    framework can follow."""
    f = a.get("fbank") or {}
    fb = ", ".join(f"{k}={v}" for k, v in f.items())
    where = {"start": "the first", "centre": "the centre"}.get(a.get("window"), "a")
    pad = {"min": "the clip's minimum log-mel value, before normalising",
           "repeat": "the clip's own frames again from its first"}.get(a.get("pad"),
                                                                     "0.0 after normalising")
    short = ("a shorter one (a last window, a short recording) not padded" if
             a.get("pad") == "repeat" else f"zero-padded to {a['window_s']} s when shorter")
    return (f"mono audio resampled to {a['sample_rate']} Hz {resampler_words(a)}; {where} "
            f"{a['window_s']} s of a "
            f"recording, {short}; a Kaldi log-mel fbank "
            f"with {a['n_mels']} mel bins ({fb}); cut or padded to {a['n_frames']} frames, the "
            f"padding being {pad}; normalised as (x - ({a['mean']})) / (2 * {a['std']}). "
            f"Input shape (batch, {a['n_frames']}, {a['n_mels']}).")


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
        f"- input: {input_words(a)}",
        f"- head: {head.get('kind')} over {len(classes)} classes: {shown}",
        f"- probabilities: {ACTIVATION_WORDS[head.get('activation') or 'softmax']}",
        *([f"- decision thresholds: one per class, calibrated "
           f"({head.get('thresholds_rule') or 'rule not recorded'}) on a labelled split, in "
           "config.json `head.thresholds` (class order); predict uses them by default "
           "(`--thresholds auto`)"] if head.get("thresholds") is not None else []),
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
        "emb = birdjepa.embeddings(\"THIS_DIR\", \"recording.ogg\")  # the training transform",
        "```",
        "",
        "From the command line: `python -m birdjepa.embed THIS_DIR AUDIO_DIR --out emb.parquet`,",
        "`python -m birdjepa.predict THIS_DIR AUDIO_DIR --out detections.csv`.",
        "",
        "Files: `encoder.safetensors` (arrays by path, float32), `head.safetensors`, "
        "`config.json` (model, audio settings, class names, the run's config).",
        "",
    ])


def onnx_lines(meta: dict) -> list[str]:
    """The ONNX contract and how to compute its input without this package."""
    a, o = meta["audio"], meta["onnx"]
    (name, shape), = o["input"].items()
    outs = [f"- `{k}` float32 ({', '.join(map(str, v))})" for k, v in o["outputs"].items()]
    sigmoid = ("`probabilities` is the sigmoid of each of `logits` (independent classes, as "
               "the head was trained: binary cross-entropy, an empty label set meaning nothing "
               "here; a window with every class below the threshold holds no detection); ")
    softmax = ("`probabilities` is the softmax of `logits` over the classes (one class per "
               "window, as the head was trained: it cannot say \"nothing here\"); ")
    head = ((sigmoid if o.get("activation") == "sigmoid" else softmax)
            + "the classes in index order are `head.classes` in config.json. "
            if "logits" in o["outputs"] else "")
    return [
        "## ONNX",
        "",
        f"`{o['file']}`: input `{name}` float32 ({', '.join(map(str, shape))}) (the batch is "
        "dynamic, the "
        f"time axis is fixed at {a['n_frames']} frames); outputs:",
        "",
        *outs,
        "",
        f"`embedding` is the encoder's pooled embedding (pool `{o['pool']}`). {head}The graph "
        f"is {o['exported_dtype_note']}; it equals `birdjepa.embeddings` to "
        f"{o.get('embed_rel_bound', 1e-4):.0e}".replace("e-0", "e-") + f" relative{_bf16_words(o)} "
        "(tests/test_export_onnx.py).",
        "",
        "### The input, without birdjepa",
        "",
        f"1. Decode, average the channels to mono, resample to {a['sample_rate']} Hz "
        f"{resampler_words(a)}.",
        f"2. Cut windows of {a['window_s']} s ({round(a['window_s'] * a['sample_rate'])} "
        f"samples); {_window_end(a)}",
        "3. Kaldi log-mel fbank of each window (kaldi-native-fbank or "
        "torchaudio.compliance.kaldi.fbank): frame length 25 ms, shift 10 ms, hanning window, "
        "pre-emphasis 0.97, remove DC offset, dither 0, snip edges, round the FFT size up to a "
        f"power of two, {a['n_mels']} mel bins from 20 Hz to Nyquist, power spectrum, log, no "
        f"energy. {a['window_s']} s gives {_frames(a)} frames.",
        *_pad_steps(a),
        "",
        "```python",
        "import kaldi_native_fbank as knf, numpy as np, onnxruntime as ort",
        "o = knf.FbankOptions(); f = o.frame_opts",
        f"f.samp_freq, f.dither, f.window_type, f.snip_edges = {a['sample_rate']}, 0.0, "
        "\"hanning\", True",
        f"o.mel_opts.num_bins, o.mel_opts.low_freq, o.mel_opts.high_freq = {a['n_mels']}, 20, 0",
        "o.use_energy, o.use_log_fbank, o.use_power = False, True, True",
        "# window: float32 mono samples at full scale 1.0, " + (
            "only those the recording has (a last or short window is not padded)"
            if a.get("pad") == "repeat" else "zero-padded to the window length"),
        "fb = knf.OnlineFbank(o); fb.accept_waveform("
        f"{a['sample_rate']}, window.tolist()); fb.input_finished()",
        "x = np.stack([fb.get_frame(i) for i in range(fb.num_frames_ready)])",
        *_pad_code(a),
        f"out = ort.InferenceSession(\"{o['file']}\").run(None, "
        f"{{\"{name}\": x[None].astype(np.float32)}})",
        "```",
        "",
    ]


def _window_end(a: dict) -> str:
    """Step 2's last words: what a window past the recording's end holds. With pad "repeat"
    the clip is its own frames only (the loader's `clip_frames`: the fbank of the zero-padded
    samples is digital silence, which repeat replaces by the clip again)."""
    if a.get("pad") == "repeat":
        return ("a window that runs past the end of the recording is cut at the end of the "
                "recording (its own samples only, not padded: its frames are repeated instead, "
                "step 5).")
    return "a window that runs past the end of the recording is zero-padded (samples)."


def _frames(a: dict) -> int:
    n, shift, length = round(a["window_s"] * a["sample_rate"]), a["sample_rate"] // 100, \
        a["sample_rate"] * 25 // 1000
    return 1 + (n - length) // shift


def render_onnx(meta: dict, run_dir=None) -> str:
    """The card of an ONNX export: the run's card (or the imported model's line), then ONNX."""
    if meta.get("config"):
        head = render(meta, run_dir).rsplit("## Load", 1)[0].rstrip().split("\n")
    else:
        m = meta["model"]
        head = ["# birdjepa encoder (ONNX)", "",
                f"Imported `{meta.get('imported') or meta.get('source')}`: a ViT ({m['width']} "
                f"wide, {m['depth']} blocks, {m['n_heads']} heads, pool {m['pool']}); no class "
                "head."]
    return "\n".join([*head, "", *onnx_lines(meta)])


def _pad_steps(a: dict) -> list[str]:
    """Steps 4-5 of the input recipe: normalise and pad to n_frames, in the model's order."""
    norm = f"x = (fbank - ({a['mean']})) / (2 * {a['std']})"
    if a.get("pad") == "min":
        return [f"4. Keep the first {a['n_frames']} frames; pad missing frames with the window's "
                "minimum log-mel value (before normalising, as Bird-MAE's extractor does).",
                f"5. Normalise: {norm}, giving (n_frames, n_mels) per window; stack windows on "
                "the batch axis."]
    if a.get("pad") == "repeat":
        return [f"4. Normalise: {norm}.",
                f"5. Keep the first {a['n_frames']} frames; fill missing frames by repeating "
                "the window's frames from its first (np.resize), giving (n_frames, n_mels) per "
                "window; stack windows on the batch axis."]
    return [f"4. Normalise: {norm}.",
            f"5. Keep the first {a['n_frames']} frames; pad missing frames with 0.0 (after "
            "normalising), giving (n_frames, n_mels) per window; stack windows on the batch axis."]


def _pad_code(a: dict) -> list[str]:
    n = a["n_frames"]
    norm = f"x = (x - ({a['mean']})) / (2 * {a['std']})"
    if a.get("pad") == "min":
        return [f"x = np.pad(x[:{n}], ((0, max(0, {n} - len(x))), (0, 0)), "
                "constant_values=x.min())", norm]
    if a.get("pad") == "repeat":
        return [norm, f"x = np.resize(x[:{n}], ({n}, x.shape[1]))"]
    return [norm, f"x = np.pad(x[:{n}], ((0, max(0, {n} - len(x))), (0, 0)))"]


def _bf16_words(o: dict) -> str:
    """Why a bfloat16 model's bound is looser (an export made before the bound was recorded
    claims the float32 one)."""
    if o.get("embed_rel_bound", 1e-4) <= 1e-4:
        return ""
    return (" (embed computes this model in bfloat16, as it trained; the graph's float32 "
            "forward is the same weights without bfloat16 round-off)")
