"""One training across simulated hosts (issue 37; tests/support/sim_hosts.py): 2 hosts x 2
processes, each with its own network namespace, hostname, /etc/hosts and private /tmp, the run
directory shared. The run follows one process over as many devices step by step: the same
batches, the same first loss; the gradient norm differs by rounding (gloo sums the 4 processes'
gradients in another order than XLA sums 4 devices: measured 9e-8 relative), and on some CPUs
(an AMD EPYC, 2026-11-28) so do the parameters after it and the losses from the third step
(1e-7 relative); a different batch would move the loss by far more than the 1e-6 allowed."""

import json
import os
import subprocess
import sys

import pytest
import sim_hosts
import tiny

N_STEPS = 4


def metrics(run_dir) -> list[tuple]:
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows if "grad_norm" in r]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_hosts_by_two_processes_train_as_one_process(tmp_path, tiny_corpus):
    cfg = tmp_path / "tiny.toml"
    corpus = (tiny_corpus / "train").resolve()  # the demo corpus itself, not the symlink
    cfg.write_text(tiny.tiny_toml(corpus, n_steps=N_STEPS, ckpt_every=2))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    base |= {"WANDB_MODE": "disabled", "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    argv = [sys.executable, "-m", "birdjepa.pretrain", "--cfg", str(cfg), "--run_dir",
            str(tmp_path / "run"), "--distributed.init_timeout_s=60"]
    with sim_hosts.SimHosts(2, shared=[tmp_path, corpus]) as hosts:
        procs = [hosts.popen(rank // 2, argv, env={**base, **sim_hosts.slurm_env(hosts, rank, 2)},
                             log=tmp_path / f"rank{rank}.log") for rank in range(4)]
        codes = [p.wait(timeout=240) for p in procs]
    logs = [(tmp_path / f"rank{r}.log").read_text() for r in range(4)]
    assert codes == [0, 0, 0, 0], logs
    assert "| 4 device(s)" in logs[0], logs[0]
    assert (tmp_path / "run" / "COMPLETE").exists()
    one = subprocess.run([*argv[:6], str(tmp_path / "one")], capture_output=True, text=True,
                         env={**base, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
                         timeout=240)
    assert one.returncode == 0, one.stderr
    assert "| 4 device(s)" in one.stdout
    got, want = metrics(tmp_path / "run"), metrics(tmp_path / "one")
    assert len(got) == N_STEPS and [g[0] for g in got] == [w[0] for w in want], (got, want)
    assert got[0][1] == want[0][1], (got, want)  # the first step: the same batch, bit for bit
    for (_, lg, g), (_, lw, w) in zip(got, want, strict=True):  # after it, rounding alone
        assert abs(lg - lw) <= 1e-6 * abs(lw) and abs(g - w) <= 1e-6 * abs(w), (got, want)
