"""`python -m birdjepa.launch ... --dry_run`: what a sweep would do, checked before anything is
submitted: each rank's place on the nodes (`layout_lines`), each entry's config, its shards
opened and decoded as the run's loaders will (`check_shards`) and, with --slurm.gpu, whether it
fits that GPU by the plan file (`plan_lines`). `run` prints them and raises SweepError when a
check fails."""

import dataclasses

import birdjepa._rs
import birdjepa.common.errors as errors
import birdjepa.config
import birdjepa.data
import birdjepa.data.loader
import birdjepa.data.loader_config
import birdjepa.data.sources
import birdjepa.launch.gpuplan.rules as rules
import birdjepa.launch.gpuplan.targets as targets
import birdjepa.runtime.slurm_env
from birdjepa.launch.launch_config import LaunchConfig, SweepError


def check_shards(cfg: birdjepa.config.Config) -> list[tuple[str, bool]]:
    """Open cfg's train and eval shards as the run will (columns, label range against
    n_classes), then decode the first failure_window samples of each as the run's loaders will
    (birdjepa.data.loader.trial: too many failures fail the check, as they would the run): one
    (line, ok) per split."""
    d = cfg.data
    out = []
    for key in ("train_shards", "eval_shards"):
        try:
            birdjepa.config.check_data_paths(cfg)
            paths = birdjepa.data.resolve_shards(getattr(d, key))
            mode = "train" if key == "train_shards" else "eval"
            raw = birdjepa.data.loader_config.rust_json(d, {
                **birdjepa.data.loader_config.RUN_ARGS, "batch_size": cfg.batch_size, "mode": mode})
            ds = birdjepa._rs.Dataset(paths, d.audio_column, d.label_column, config=raw)
            checked, missing = birdjepa.data.loader.check_paths(ds)  # path-only audio
            names = birdjepa.data.sources.class_names(paths, d.label_column)
            n_classes = birdjepa.data.loader.class_count(cfg.n_classes or 0, names,
                                                         d.label_column)
            labels = birdjepa.data.check_labels(ds, d.label_column)
            problem = birdjepa.data.label_problem(labels, n_classes)
            if problem:
                raise birdjepa.config.ConfigError(problem)
            span = "no labels" if not labels or labels["min"] is None else (
                f"labels {labels['min'][0]}..{labels['max'][0]} of n_classes={n_classes}")
            files = f", {checked - missing}/{checked} audio files found" if checked else ""
            tried = trial(cfg, paths, mode, n_classes)
            out.append((f"data.{key}: {ds.n_rows} rows in {len(paths)} file(s), {span}{files}, "
                        f"{tried['samples']} samples decoded ({tried['failures']} failed): ok",
                        True))
        except (errors.Error, birdjepa.config.ConfigError, OSError) as e:
            out.append((f"data.{key}: {e}", False))
    return out


def trial(cfg: birdjepa.config.Config, paths: list[str], mode: str, n_classes: int) -> dict:
    """birdjepa.data.loader.trial with the settings the run's `mode` loader gets
    (birdjepa.train.loaders.make_loaders)."""
    d = cfg.data
    if mode == "train":
        return birdjepa.data.loader.trial(paths, config=d, mode=mode, batch_size=cfg.batch_size,
                                          n_classes=n_classes)
    ecfg = d.for_eval()
    if d.eval_label_column:
        ecfg = dataclasses.replace(ecfg, label_column=d.eval_label_column)
    return birdjepa.data.loader.trial(paths, config=ecfg, mode=mode, n_classes=n_classes,
                                      batch_size=d.eval_batch_size or cfg.batch_size)


def plan_lines(cfg: birdjepa.config.Config, lc: LaunchConfig) -> list[tuple[str, bool]]:
    """With --slurm.gpu: whether the entry fits that GPU, from the plan file."""
    if not lc.slurm.gpu:
        return []
    if lc.slurm.gpu not in targets.GPUS:
        raise SweepError(f"--slurm.gpu: expected one of {', '.join(targets.GPUS)}"
                         f", got {lc.slurm.gpu!r}")
    try:
        rows = rules.load(lc.plan)
    except ValueError as e:
        return [(f"plan: {e}", False)]
    devices = lc.slurm.nodes * max(lc.slurm.gpus_per_node, 1)
    return [rules.entry_line(cfg, lc.slurm.gpu, devices, rows, lc.plan)]


def layout_lines(lc: LaunchConfig) -> list[str]:
    """Each rank's place in a Slurm run: node, local rank, the node's GPUs it drives
    (birdjepa.runtime.slurm_env.local_device_ids with every GPU of the node visible to each
    task; Slurm names the hosts at start) and the coordinator (rank 0's host)."""
    s = lc.slurm
    if lc.executor != "slurm":
        return []
    gpus = ",".join(map(str, range(s.gpus_per_node)))
    out = [f"layout: {s.nodes} node(s) x {s.tasks_per_node} task(s) = "
           f"{s.nodes * s.tasks_per_node} JAX process(es); coordinator: node 0 (the first host "
           "of SLURM_JOB_NODELIST, never loopback when nodes > 1), port from the job id"]
    for rank in range(s.nodes * s.tasks_per_node):
        node, local = divmod(rank, s.tasks_per_node)
        env = {"SLURM_STEP_TASKS_PER_NODE": f"{s.tasks_per_node}(x{s.nodes})",
               "SLURM_NODEID": str(node), "SLURM_LOCALID": str(local)}
        if gpus:
            env |= {"SLURM_STEP_GPUS": gpus, "CUDA_VISIBLE_DEVICES": gpus}
        try:
            ids = birdjepa.runtime.slurm_env.local_device_ids(env)
        except birdjepa.runtime.slurm_env.SlurmEnvError as e:
            raise SweepError(f"--slurm.gpus_per_node {s.gpus_per_node} over --slurm."
                             f"tasks_per_node {s.tasks_per_node}: {e}") from None
        where = ("CPU" if not gpus else f"GPUs {gpus}" if ids is None
                 else "GPUs " + ",".join(map(str, ids)))
        out.append(f"layout: rank {rank}: node {node}, local rank {local}, {where}")
    return out


def run(entries: dict[int, birdjepa.config.Config], lc: LaunchConfig) -> None:
    """`entries`: the sweep's own index -> config, for the entries selected."""
    for line in layout_lines(lc):
        print(line)
    failed = unfit = 0
    for i, c in entries.items():
        print(f"# {c.run_id}\n{birdjepa.config.to_toml(c)}")
        for line, ok in check_shards(c):
            print(f"entry {i} ({c.run_id}): {line}")
            failed += not ok
        for line, ok in plan_lines(c, lc):
            print(f"entry {i} ({c.run_id}): {line}")
            unfit += not ok
    if failed or unfit:
        plan = f", {unfit} entr(ies) do not fit {lc.slurm.gpu} by the plan" if unfit else ""
        raise SweepError(f"dry run: {failed} shard check(s) failed{plan} (see the entry lines "
                         "above)")
