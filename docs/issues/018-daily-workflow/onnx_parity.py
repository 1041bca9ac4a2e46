"""ONNX export against `birdjepa.embed` (docs/issues/018-daily-workflow, "ONNX export"): max
|onnxruntime - embed| / max |embed| for a Bird-MAE-shaped model and a Bird-MAE-Base-sized one
(random weights under the published key names), on our transform's input and on the model
card's kaldi-native-fbank recipe. Run from the repository root with the dev extra installed:

    python docs/issues/018-daily-workflow/onnx_parity.py
"""

import pathlib
import sys
import tempfile
import time

import onnxruntime as ort

import birdjepa
import birdjepa.models.artifact as artifact
import birdjepa.models.bird_mae as bird_mae
import birdjepa.models.onnx_export
import birdjepa.models.safetensors

sys.path[:0] = ["tests", "tests/support"]
import test_export_onnx as t  # noqa: E402  (the tests' input recipes)
import test_models_import as tmi  # noqa: E402  (random weights in the published key names)


def parity(m, out: pathlib.Path, seconds: float, label: str) -> None:
    t0 = time.perf_counter()
    birdjepa.models.onnx_export.export(m, out)
    size = (out / "model.onnx").stat().st_size / 1e6
    print(f"{label}: convert {time.perf_counter() - t0:.1f} s, {size:.1f} MB")
    x_n = t.wave(seconds, seed=1)
    want = birdjepa.embeddings(m, (x_n, t.SR))["emb_mean"]
    sess = ort.InferenceSession(str(out / "model.onnx"))
    ours = sess.run(None, {"fbank": t.our_input(m, x_n, 5.0)})[0]
    card = sess.run(None, {"fbank": t.card_input(x_n, m.audio, 5.0)})[0]
    print(f"{label}: relative difference, our input {t.rel(ours, want):.2g}, "
          f"card recipe {t.rel(card, want):.2g}")


def main() -> None:
    d = pathlib.Path(tempfile.mkdtemp())
    sd = tmi.random_state_dict(64, 2, sincos=True)
    small = artifact.Model(bird_mae.convert(sd, width=64, depth=2, n_heads=4),
                           dict(bird_mae.AUDIO), source="bird-mae-shaped")
    parity(small, d / "small", 7.0, "Bird-MAE-shaped 64 x 2 (first conversion)")
    parity(small, d / "small2", 7.0, "Bird-MAE-shaped 64 x 2 (second conversion)")
    birdjepa.models.safetensors.save(tmi.random_state_dict(768, 12, seed=2), d / "base.safetensors")
    base = artifact.open_model(f"bird-mae-base:{d / 'base.safetensors'}")
    parity(base, d / "base", 10.0, "Bird-MAE-Base size")


if __name__ == "__main__":
    main()
