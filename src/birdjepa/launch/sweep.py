"""Submit a sweep of training runs with submitit (Slurm or local).

    python -m birdjepa.launch --sweep sweeps/lr.py [--executor slurm|local] \
        [--slurm.partition P --slurm.account A --slurm.gpus_per_node 4 --n_hours 4] [--dry_run]

A sweep file defines `make_cfgs() -> list`, each entry a `birdjepa.config.Config` or a dict of
overrides (nested, or with dotted keys) applied to the TOML named by the module-level `BASE`.
Every entry is validated before anything is submitted: a bad sweep fails whole, naming the entry
and the key. Each run gets a stable run id (sweep name, entry index, hash of its config), so
resubmitting a sweep finds the same run directories: complete runs are skipped and interrupted
ones resume from their checkpoints.

With --executor local --max_parallel N the launcher waits for its jobs, each in a process group
of its own. Ctrl-C (or SIGTERM, SIGHUP, or `kill -INT` of the launcher alone) reaches the
launcher, which forwards it to the running jobs: each saves a checkpoint at its next step
boundary and stops; the launcher waits for them, starts no further entry, says in one line where
each stopped and exits 128 + the signal (130 for Ctrl-C). A second Ctrl-C aborts at once.
"""

import dataclasses
import hashlib
import importlib.util
import json
import math
import pathlib
import shutil
import time

import submitit

import birdjepa._rs
import birdjepa.config
import birdjepa.config.command_line
import birdjepa.data
import birdjepa.data.loader
import birdjepa.data.loader_config
import birdjepa.data.sources
import birdjepa.launch.dry_run as dry_run
import birdjepa.launch.job as job
import birdjepa.runtime.preemption
import birdjepa.runtime.rundir
import birdjepa.runtime.slurm_env
from birdjepa.launch.launch_config import LaunchConfig, SlurmConfig, SweepError


def load_sweep(path: str | pathlib.Path):
    path = pathlib.Path(path)
    if not path.is_file():
        raise SweepError(f"sweep file {path}: not found")
    spec = importlib.util.spec_from_file_location(f"birdjepa_sweep_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "make_cfgs", None)):
        raise SweepError(f"sweep file {path}: expected a function make_cfgs(), found none")
    return module


def _nest(overrides: dict) -> dict:
    """{"optim.lr": 1} and {"optim": {"lr": 1}} both become {"optim": {"lr": 1}}."""
    out: dict = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            value = _nest(value)
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            node[leaf] = _merge(node[leaf], value)
        else:
            node[leaf] = value
    return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def run_id_for(sweep_name: str, index: int, cfg: birdjepa.config.Config) -> str:
    """Stable across resubmissions: the same entry with the same config gets the same id."""
    d = dataclasses.asdict(dataclasses.replace(cfg, run_id="", run_dir=""))
    digest = hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()
    return f"{sweep_name}-{index:03d}-{digest[:8]}"


def resolve(path: str | pathlib.Path) -> list[birdjepa.config.Config]:
    """The sweep's configs, validated and with stable run ids; raises naming entry and key."""
    path = pathlib.Path(path)
    module = load_sweep(path)
    base = getattr(module, "BASE", None)
    base_dict: dict = {}
    if base is not None:
        base_path = pathlib.Path(base)
        if not base_path.is_absolute() and not base_path.exists():
            base_path = path.parent / base_path
        if not base_path.is_file():
            raise SweepError(f"sweep {path}: BASE: expected a TOML config, got {base!r} (no "
                             f"such file beside the sweep or in {pathlib.Path.cwd()})")
        base_dict = birdjepa.config.strip_none(dataclasses.asdict(birdjepa.config.load(base_path)))
    entries = module.make_cfgs()
    if not isinstance(entries, list | tuple):
        raise SweepError(f"sweep {path}: make_cfgs(): expected a list of configs or dicts, got "
                         f"{type(entries).__name__}")
    if not entries:
        raise SweepError(f"sweep {path}: make_cfgs() returned no configs")
    cfgs = []
    for i, entry in enumerate(entries):
        try:
            if isinstance(entry, birdjepa.config.Config):
                cfg = entry
            elif isinstance(entry, dict):
                merged = _merge(base_dict, _nest(entry))
                cfg = birdjepa.config.from_dict(birdjepa.config.Config, merged)
            else:
                raise SweepError(f"expected a Config or a dict, got {type(entry).__name__}")
            if not cfg.run_id:
                cfg = dataclasses.replace(cfg, run_id=run_id_for(path.stem, i, cfg))
            cfg = birdjepa.runtime.rundir.assign(birdjepa.config.finalize(cfg))
            # Absolute, so the job finds it whatever its working directory (not in the id).
            cfg = dataclasses.replace(cfg, run_dir=str(pathlib.Path(cfg.run_dir).absolute()))
        except (birdjepa.config.ConfigError, SweepError, TypeError) as e:
            raise SweepError(f"sweep {path}, entry {i}: {e}") from e
        cfgs.append(cfg)
    ids = [c.run_id for c in cfgs]
    if len(set(ids)) != len(ids):
        raise SweepError(f"sweep {path}: run ids are not unique: {ids}")
    dirs = [c.run_dir for c in cfgs]
    for i, d in enumerate(dirs):
        if dirs.index(d) != i:
            raise SweepError(f"sweep {path}: expected a run directory per entry, got entries "
                             f"{dirs.index(d)} and {i} both in {d}")
    return cfgs


def check_launch(lc: LaunchConfig) -> None:
    """The launcher's own settings, before any entry is resolved or submitted (one SweepError
    naming the setting, the expected and the actual value): the counts of --slurm.* in range,
    a time limit of at least a minute, sbatch options that are a JSON object."""
    s = lc.slurm
    for name, least in (("nodes", 1), ("tasks_per_node", 1), ("gpus_per_node", 0),
                        ("cpus_per_task", 1), ("mem_gb", 1), ("signal_delay_s", 0),
                        ("max_num_timeout", 0), ("array_parallelism", 1)):
        v = getattr(s, name)
        if v is not None and v < least:
            raise SweepError(f"--slurm.{name}: expected an int >= {least}, got {v}")
    if not (math.isfinite(lc.n_hours) and lc.n_hours * 60 >= 1):
        raise SweepError(f"--n_hours: expected a finite number of hours >= 1/60 (one minute), "
                         f"got {lc.n_hours}")
    additional_parameters(s)


def additional_parameters(s: SlurmConfig) -> dict:
    """--slurm.additional_parameters as the dict submitit sends to sbatch."""
    try:
        extra = json.loads(s.additional_parameters)
    except json.JSONDecodeError as e:
        extra, why = None, f" (not JSON: {e})"
    else:
        why = ""
    if not isinstance(extra, dict):
        raise SweepError(f"--slurm.additional_parameters: expected a JSON object of sbatch "
                         f"options, got {s.additional_parameters!r}{why}")
    return extra


def is_complete(cfg: birdjepa.config.Config) -> bool:
    return birdjepa.runtime.rundir.is_complete(cfg.run_dir)


def make_executor(lc: LaunchConfig, *, job_name: str, n_workers: int):
    if lc.executor == "slurm" and shutil.which("srun") is None:
        raise SweepError("--executor slurm: expected Slurm's srun on PATH (a login node of a "
                         "Slurm cluster), found none; use --executor local to run here")
    # One folder per sweep, no "%j" template in it: submitit's local task processes create the
    # template directory itself literally (an empty `%j` beside the jobs' logs).
    folder = pathlib.Path(lc.log_dir) / job_name
    executor = submitit.AutoExecutor(folder=folder, cluster=lc.executor)
    if lc.executor == "local":
        executor._executor = job.GroupLocalExecutor(folder)
    s = lc.slurm
    params = dict(
        timeout_min=max(1, int(round(lc.n_hours * 60))),
        nodes=s.nodes,
        tasks_per_node=s.tasks_per_node,
        cpus_per_task=s.cpus_per_task or n_workers + 2,
        name=job_name,
    )
    if lc.executor == "slurm":
        params.update(
            slurm_qos=s.qos,
            slurm_partition=s.partition,
            slurm_account=s.account,
            slurm_mem=f"{s.mem_gb}G",
            slurm_signal_delay_s=s.signal_delay_s,
            slurm_setup=list(s.setup),
            slurm_array_parallelism=s.array_parallelism,
            slurm_additional_parameters=additional_parameters(s),
        )
        if s.gpus_per_node:
            params["slurm_gpus_per_node"] = s.gpus_per_node
        params = {k: v for k, v in params.items() if v is not None}
    executor.update_parameters(**params)
    # Not an update_parameters() key: the wrapped executor holds it.
    executor._executor.max_num_timeout = s.max_num_timeout
    return executor


def select(cfgs: list[birdjepa.config.Config],
           entries: tuple[int, ...]) -> dict[int, birdjepa.config.Config]:
    """The entries named by --entries (all when none), by their index in the sweep, in order."""
    bad = sorted({i for i in entries if not 0 <= i < len(cfgs)})
    if bad:
        raise SweepError(f"--entries: expected indexes 0..{len(cfgs) - 1} of the sweep's "
                         f"{len(cfgs)} entries, got {bad}")
    wanted = set(entries) or set(range(len(cfgs)))
    return {i: c for i, c in enumerate(cfgs) if i in wanted}


def launch(lc: LaunchConfig) -> list:
    """Submit the sweep's incomplete entries; with --max_parallel, wait for them group by group.
    Raises Interrupted (its one line) when a signal stopped the waiting launcher."""
    check_launch(lc)
    entries = select(resolve(lc.sweep), lc.entries)
    cfgs = list(entries.values())
    todo = [c for c in cfgs if not is_complete(c)]
    for c in cfgs:
        state = "complete, skipped" if is_complete(c) else "to run"
        print(f"{c.run_id}: {state} -> {c.run_dir}")
    if lc.max_parallel < 0 or (lc.max_parallel and lc.executor != "local"):
        raise SweepError(f"--max_parallel: expected 0, or an int >= 1 with --executor local, got "
                         f"{lc.max_parallel} with --executor {lc.executor}")
    if lc.dry_run:
        dry_run.run(entries, lc)
        return []
    busy = {c.run_id: h for c in todo if (h := birdjepa.runtime.rundir.holder(c.run_dir))}
    for c in todo:  # left training by a launcher that was killed: found, not started again
        if c.run_id in busy:
            print(f"{c.run_id}: already training ({busy[c.run_id]} holds "
                  f"{pathlib.Path(c.run_dir) / birdjepa.runtime.rundir.LOCK}); not started again"
                  + ("; waiting for it" if lc.max_parallel else ""), flush=True)
    todo = [c for c in todo if c.run_id not in busy]
    if busy and lc.max_parallel:
        _wait_for_holders([c for c in cfgs if c.run_id in busy], busy)
    if not todo:
        print("every run of this sweep is complete; nothing submitted")
        return []
    name = pathlib.Path(lc.sweep).stem
    # cpus-per-task default: fixed loader workers (train + eval) + 2; "auto" workers take what
    # the job gets, 16 unless --slurm.cpus_per_task says otherwise.
    fixed = [c.data.n_workers * 2 for c in todo if c.data.n_workers != "auto"]
    n_workers = max(fixed) if len(fixed) == len(todo) else 14
    executor = make_executor(lc, job_name=name, n_workers=n_workers)
    with job.Interrupts(enabled=bool(lc.max_parallel)) as stop:
        return _submit(executor, todo, lc.max_parallel, stop)


def _wait_for_holders(cfgs: list[birdjepa.config.Config], busy: dict[str, str]) -> None:
    """Wait until no process holds these runs' directories; say how each ended."""
    while any(birdjepa.runtime.rundir.holder(c.run_dir) for c in cfgs):
        time.sleep(0.5)
    for c in cfgs:
        state = "complete" if is_complete(c) else "without COMPLETE"
        print(f"{c.run_id} ended {state} (it trained in {busy[c.run_id]})", flush=True)


def _submit(executor, todo: list[birdjepa.config.Config], max_parallel: int,
            stop: job.Interrupts) -> list:
    """Submit `todo` in groups of `max_parallel` (0: all at once, not waited for), each group
    after the one before has ended; none after a stop signal."""
    group = max_parallel or len(todo)
    jobs = []
    for start in range(0, len(todo), group):
        chunk = todo[start:start + group]
        if stop.signum is not None:
            raise Interrupted(stop.signum, [], todo[start:])
        with executor.batch():
            new = [executor.submit(job.TrainingJob(c)) for c in chunk]
        for j, c in zip(new, chunk, strict=True):
            print(f"job {j.job_id}: {c.run_id} run_dir={c.run_dir} logs={j.paths.stdout}",
                  flush=True)
        jobs += new
        if max_parallel:
            stop.running(new, [c.run_id for c in chunk])
            states = _wait(new, chunk, stop)
            if stop.signum is not None:
                raise Interrupted(stop.signum, list(zip(chunk, states, strict=True)),
                                  todo[start + group:])
    return jobs


def _wait(jobs: list, cfgs: list[birdjepa.config.Config],
          stop: job.Interrupts) -> list[str]:
    """Wait for every job; print how each ended (a failed run does not stop the sweep) unless a
    stop signal came (Interrupted says it then). Returns how each ended."""
    while not all(job.done() for job in jobs):
        stop.notice()
        time.sleep(0.2)
    stop.notice()
    stopped = stop.signum is not None
    states = [_outcome(job, c, stopped) for job, c in zip(jobs, cfgs, strict=True)]
    if not stopped:
        for job, c, state in zip(jobs, cfgs, states, strict=True):
            print(f"job {job.job_id}: {c.run_id} {state}", flush=True)
    return states


def _outcome(job, cfg: birdjepa.config.Config, stopped: bool) -> str:
    """How an ended job ended, in a few words (`stopped`: after a stop signal)."""
    if not job.paths.result_pickle.exists():  # killed, or stopped before TrainingJob began
        return (f"stopped without saving (see {job.paths.stderr})" if stopped else
                f"failed (no result; see {job.paths.stderr})")
    try:
        summary = job.result()
    except Exception as e:  # noqa: BLE001 - submitit re-raises the job's own error
        return f"failed ({type(e).__name__}; see {job.paths.stderr})"
    if is_complete(cfg):
        return "complete"
    if isinstance(summary, dict) and summary.get("preempted"):
        return f"stopped at step {summary.get('steps')} with a checkpoint"
    return "ended without COMPLETE"


class Interrupted(Exception):
    """A signal stopped the launcher while it waited for local jobs (str: the one line)."""

    def __init__(self, signum: int, ended: list, not_started: list[birdjepa.config.Config]):
        """`ended`: (config, how it ended) of the jobs that were running."""
        ran = ", ".join(f"{c.run_id} {state}" for c, state in ended) or "no run was running"
        rest = ", ".join(c.run_id for c in not_started) or "none"
        super().__init__(f"interrupted: {ran}; run the same command again to resume; entries "
                         f"not started: {rest}")
        self.signum = signum
