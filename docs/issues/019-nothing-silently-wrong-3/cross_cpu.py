"""Resume tests/fixtures/pre-schema-run (recorded on the developer's CPU) on this machine and
print, per metric of steps 3-4, the stored value, this machine's value and their relative
difference (issue 30 item 17). Usage: python docs/issues/019-nothing-silently-wrong-3/cross_cpu.py"""

import json
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "support")]
import resume_helpers  # noqa: E402

import birdjepa.demo_data  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "pre-schema-run"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        birdjepa.demo_data.write(tmp / "corpus", n_recordings=24, n_shards=2, min_s=5.0,
                                 max_s=8.0, workers=1)
        run = tmp / "run"
        (run / "checkpoints").mkdir(parents=True)
        shutil.copytree(FIXTURE / "2", run / "checkpoints" / "2")
        for name in ("config.toml", "run_id", "metrics.jsonl"):
            shutil.copy(FIXTURE / name, run / name)
        shutil.copy(FIXTURE / "cfg.toml", tmp / "cfg.toml")
        subprocess.run([sys.executable, "-m", "birdjepa.pretrain", "--cfg", "cfg.toml",
                        "--run_dir=run"], cwd=tmp, env=resume_helpers.env(), check=True,
                       capture_output=True)
        got: dict[int, dict] = {}
        for line in (run / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line)
            got.setdefault(row["step"], {}).update(row)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    print(f"cpu: {cpu}; avx512f: {'avx512f' in open('/proc/cpuinfo').read()}")
    for line in (FIXTURE / "reference-steps-3-4.jsonl").read_text().splitlines():
        want = json.loads(line)
        for key in ("loss", "grad_norm", "probe_loss", "param_norm", "lr", "eval/probe_loss"):
            if key in want:
                have = got[want["step"]][key]
                rel = abs(have - want[key]) / abs(want[key])
                print(f"step {want['step']} {key:16s} stored {want[key]!r:22} here {have!r:22} "
                      f"rel {rel:.2e}")


if __name__ == "__main__":
    main()
