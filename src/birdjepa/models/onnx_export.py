"""ONNX export of an encoder and its class head (`python -m birdjepa.export MODEL --out_dir DIR
--format onnx`), for recorders, phones and other languages.

    out_dir/model.onnx    input  "fbank"          float32 (batch, n_frames, n_mels), normalised
                          output "embedding"      float32 (batch, width): the pooled embedding
                          with a head, also "logits" (batch, classes) and "probabilities"
                          (the head's activation as trained, softmax or sigmoid: what
                          `python -m birdjepa.predict` reports by default)
    out_dir/config.json   model, audio settings, class names, the ONNX input/output contract
    out_dir/README.md     a model card: how to compute "fbank" without this package

The graph is the same `ViT.__call__` that `birdjepa.embeddings` runs, traced and converted by
jax2onnx (the optional `onnx` extra); `lax.scan` over the blocks becomes an ONNX `Loop`. The
batch is dynamic, the time axis is not: inputs are cut or zero-padded to `n_frames`, as embed
does. Exported in float32 with the plain XLA attention: a `compute_dtype = "bfloat16"` model is
exported in float32 (onnxruntime's CPU kernels have no bfloat16 matmul), so its ONNX outputs
differ from embed's bfloat16 ones by bfloat16 round-off; "cudnn" attention is the same
mathematics as "xla"; rematerialisation only matters for gradients.
"""

import contextlib
import copy
import dataclasses
import json
import logging
import os
import pathlib

import jax

import birdjepa.common.outputs as outputs
import birdjepa.model
import birdjepa.models.card as card

FORMAT = "birdjepa-onnx"
VERSION = 1
FILE = "model.onnx"
INPUT = "fbank"
OUTPUTS = ("embedding", "logits", "probabilities")


def _import_jax2onnx():
    try:
        import jax2onnx
    except ImportError as e:
        raise ImportError("--format onnx needs the optional onnx extra: pip install "
                          "'birdjepa[onnx]' (jax2onnx and onnxruntime)") from e
    for name in ("onnx_ir", "jax2onnx"):  # one warning line per untyped value otherwise
        logging.getLogger(name).setLevel(logging.ERROR)
    return jax2onnx


def for_export(encoder: birdjepa.model.ViT) -> birdjepa.model.ViT:
    """The same weights computing in float32 (the residual stream too) with the XLA attention
    and no remat (see above)."""
    out = copy.copy(encoder)
    cfg = dataclasses.replace(encoder.cfg, compute_dtype="float32", attention="xla",
                              remat="none", residual_dtype="float32")
    object.__setattr__(out, "cfg", cfg)
    blocks = copy.copy(encoder.blocks)
    object.__setattr__(blocks, "dtype", "float32")
    object.__setattr__(blocks, "attention", "xla")
    object.__setattr__(blocks, "residual", "float32")
    object.__setattr__(out, "blocks", blocks)
    return out


def graph_fn(m):
    """fbank (b, t, m) -> embedding, or (embedding, logits, probabilities) with a head."""
    enc = for_export(m.encoder)
    head = m.head
    act = (lambda x: jax.nn.softmax(x, axis=-1)) if m.activation == "softmax" else jax.nn.sigmoid

    def fn(fbank_btm):
        emb_bd = enc(fbank_btm).pooled_bd
        if head is None:
            return emb_bd
        logits_bc = head(emb_bd)
        return emb_bd, logits_bc, act(logits_bc)

    return fn


EMBED_REL_BOUND = (1e-4, 1e-2)
"""How closely the graph's outputs equal `birdjepa.embeddings`'s (max |difference| over max |value|)
for a float32 and a bfloat16 model. The graph computes in float32; embed computes a bfloat16
model in bfloat16, as it trained, so the two differ by bfloat16 round-off (measured 8e-4 to 3e-3
on small models, checked in tests/test_export_onnx.py; bfloat16 keeps 8 significant bits)."""


def contract(m) -> dict:
    """The graph's input and outputs, as config.json and the card state them."""
    a, n = m.audio, len(m.classes or [])
    outputs = {"embedding": ["batch", m.encoder.width]}
    if m.head is not None:
        outputs |= {"logits": ["batch", n], "probabilities": ["batch", n]}
    return {"file": FILE, "input": {INPUT: ["batch", a["n_frames"], a["n_mels"]]},
            "dtype": "float32", "outputs": outputs, "pool": m.encoder.cfg.pool,
            "activation": m.activation if m.head is not None else None,
            "exported_dtype_note": f"computed in float32 (trained with compute_dtype "
                                   f"{m.encoder.cfg.compute_dtype})",
            "embed_rel_bound": EMBED_REL_BOUND[m.encoder.cfg.compute_dtype == "bfloat16"]}


def convert(m):
    """The onnx.ModelProto of `graph_fn(m)` with a dynamic batch axis."""
    jax2onnx = _import_jax2onnx()
    a = m.audio
    names = OUTPUTS if m.head is not None else OUTPUTS[:1]
    return jax2onnx.to_onnx(graph_fn(m), [("batch", a["n_frames"], a["n_mels"])],
                            model_name="birdjepa_encoder", return_mode="proto",
                            input_names=[INPUT], output_names=list(names))


def export(m, out_dir: str | os.PathLike) -> pathlib.Path:
    """Write `out_dir/model.onnx`, config.json and README.md for `m`, a
    `birdjepa.models.artifact.Model` (`artifact.open_model(MODEL)`)."""
    proto = convert(m)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    blob = proto.SerializeToString()
    meta = {"format": FORMAT, "version": VERSION,
            "model": dataclasses.asdict(m.encoder.cfg), "audio": m.audio,
            "head": {"kind": m.head_kind, "classes": m.classes, "activation": m.activation},
            "onnx": contract(m),
            "source": m.source, **m.info}
    run_dir = m.source if "config" in m.info else None
    with contextlib.ExitStack() as files:  # every file written before any is renamed in
        tmp = {n: files.enter_context(outputs.replacing(out / n))
               for n in (FILE, "config.json", "README.md")}
        tmp[FILE].write_bytes(blob)
        tmp["config.json"].write_text(json.dumps(meta, indent=1, default=str) + "\n")
        tmp["README.md"].write_text(card.render_onnx(meta, run_dir))
    return out
