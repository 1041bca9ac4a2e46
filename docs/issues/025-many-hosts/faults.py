"""Faults across simulated hosts (issue 37, docs/issues/025-many-hosts): for each fault, a tiny
training on 2 hosts x 1 process (tests/support/host_faults.py), the fault once the run has
logged 25 steps, every process's exit status and seconds to exit, then a restart as one process
of 2 devices; its losses are compared step by step with a run that never stopped. As root, from
the checkout:

    .venv/bin/python docs/issues/025-many-hosts/faults.py [FAULT ...]   (default: all of them)

FAULT: usr2, term (to every process of host 1 only), kill, stop (SIGKILL / SIGSTOP to host 1's
process), down (host 0, the coordinator's, leaves the network). Env: WORK (default /tmp/faults),
CORPUS (default data/demo/train), N_STEPS (default 600).
"""

import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tests" / "support")]
import host_faults  # noqa: E402


def main(faults: list[str]) -> None:
    work = pathlib.Path(os.environ.get("WORK", "/tmp/faults")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    corpus = pathlib.Path(os.environ.get("CORPUS", ROOT / "data" / "demo" / "train")).resolve()
    cfg = host_faults.write_config(work / "tiny.toml", corpus, int(os.environ.get("N_STEPS", 600)))
    ref = work / "reference"
    if not (ref / "COMPLETE").exists():
        rc, out = host_faults.one_process(cfg, ref, 2, log=work / "reference.log")
        assert rc == 0, out
    for fault in faults:
        run = work / fault
        o = host_faults.on_hosts(cfg, run, work, corpus, hosts=2, procs=1, fault=fault)
        saved = host_faults.checkpoints(run)
        rc, out = host_faults.one_process(cfg, run, 2, log=work / f"{fault}.resume.log")
        print(json.dumps({
            "fault": fault, "after_step": o.after_step, "exits (status, s)": o.exits,
            "stopped at": [x for log in o.logs for x in log.splitlines() if "stop requested" in x],
            "checkpoints": saved, "resume_rc": rc,
            "resumed": [x for x in out.splitlines() if x.startswith("resumed from")],
            "losses equal the uninterrupted run": host_faults.losses(run)
            == host_faults.losses(ref)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(host_faults.FAULTS))
