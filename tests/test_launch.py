"""`python -m birdjepa.launch`: sweep validation, dry runs, stable run ids, skipping complete
runs, and the sbatch script submitit writes (no cluster needed)."""

import dataclasses
import functools
import json
import os
import pathlib
import subprocess
import sys

import pytest
import submitit  # noqa: F401 - imported before output capture: its logger binds sys.stderr

import birdjepa.config.command_line
import birdjepa.launch as launch
import birdjepa.launch.__main__
import birdjepa.launch.gpuplan.rules as rules
import birdjepa.launch.job
import birdjepa.launch.sweep
import birdjepa.runtime.rundir

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo.toml"


@pytest.fixture(scope="module")
def demo_audio(demo_corpus) -> str:
    """20 real recordings in one shard (a dry run decodes samples of its data)."""
    return demo_corpus(n_recordings=20, n_shards=1, min_s=1.0, max_s=2.0, seed=3)["out_dir"]


def demo_shards(root: pathlib.Path, corpus: str) -> None:
    """`corpus` where configs/demo.toml looks for its data (relative to `root`)."""
    (root / "data" / "demo").mkdir(parents=True)
    for split in ("train", "eval"):
        (root / "data" / "demo" / split).symlink_to(corpus, target_is_directory=True)


def write_sweep(tmp_path: pathlib.Path, entries: str, name: str = "sw") -> pathlib.Path:
    path = tmp_path / f"{name}.py"
    path.write_text(f"BASE = {str(DEMO)!r}\n\ndef make_cfgs():\n    return {entries}\n")
    return path


def test_bad_sweep_fails_whole_naming_entry_and_key(tmp_path, capsys):
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}, {"optim.lr": 2e-3, "optim.nope": 1}]')
    rc = birdjepa.launch.__main__.main(["--sweep", str(sweep), "--executor", "local",
                      "--log-dir", str(tmp_path / "logs")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "entry 1" in err and "nope" in err, err
    assert not (tmp_path / "logs").exists()  # nothing submitted, not even entry 0


def test_bad_value_type_names_entry_and_key(tmp_path, capsys):
    sweep = write_sweep(tmp_path, '[{"batch_size": "big"}]')
    assert birdjepa.launch.__main__.main(["--sweep", str(sweep), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "entry 0" in err and "batch_size" in err, err


def test_dry_run_prints_resolved_configs_and_submits_nothing(tmp_path, capsys, monkeypatch,
                                                             demo_audio):
    monkeypatch.chdir(tmp_path)
    demo_shards(tmp_path, demo_audio)
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}, {"optim.lr": 3e-3, "n_steps": 7}]')
    assert birdjepa.launch.__main__.main(["--sweep", str(sweep), "--dry-run"]) == 0
    out = capsys.readouterr().out
    cfgs = launch.resolve(sweep)
    assert [c.optim.lr for c in cfgs] == [1e-3, 3e-3]
    assert [c.n_steps for c in cfgs] == [600 if "600" in DEMO.read_text() else cfgs[0].n_steps, 7]
    for c in cfgs:
        assert f"{c.run_id}: to run -> {c.run_dir}" in out
        assert f"# {c.run_id}\n" in out
        assert pathlib.Path(c.run_dir) == tmp_path / "runs" / c.run_id
    assert "lr = 0.003" in out and "n_steps = 7" in out
    for i, c in enumerate(cfgs):  # every entry's shards were opened and checked
        for key in ("train_shards", "eval_shards"):
            line = f"entry {i} ({c.run_id}): data.{key}: 20 rows in 1 file(s), labels "
            assert line in out and "samples decoded (0 failed): ok" in out
    assert not (tmp_path / "logs").exists() and not (tmp_path / "runs").exists()


def test_run_ids_are_stable_and_follow_the_config(tmp_path):
    a = write_sweep(tmp_path, '[{"optim.lr": 1e-3}, {"optim.lr": 3e-3}]', name="s")
    ids1 = [c.run_id for c in launch.resolve(a)]
    ids2 = [c.run_id for c in launch.resolve(a)]
    assert ids1 == ids2 and len(set(ids1)) == 2
    assert all(i.startswith(f"s-{k:03d}-") for k, i in enumerate(ids1))
    # Editing entry 1 changes its id only; entry 0 keeps its run directory.
    b = write_sweep(tmp_path, '[{"optim.lr": 1e-3}, {"optim.lr": 5e-3}]', name="s")
    ids3 = [c.run_id for c in launch.resolve(b)]
    assert ids3[0] == ids1[0] and ids3[1] != ids1[1]
    # Launch-only knobs do not change the id (n_workers does not shape the stream)...
    c = write_sweep(tmp_path, '[{"optim.lr": 1e-3, "run_dir": "elsewhere"}]', name="s")
    assert launch.resolve(c)[0].run_id == ids1[0]


def test_resubmitting_complete_runs_does_nothing(tmp_path, capsys, monkeypatch, demo_audio):
    monkeypatch.chdir(tmp_path)
    demo_shards(tmp_path, demo_audio)
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}, {"optim.lr": 3e-3}]')
    cfgs = launch.resolve(sweep)
    for c in cfgs:
        pathlib.Path(c.run_dir).mkdir(parents=True)
        (pathlib.Path(c.run_dir) / birdjepa.runtime.rundir.COMPLETE).write_text(json.dumps({"steps": 600}))
    lc = launch.LaunchConfig(sweep=str(sweep), executor="local", log_dir=str(tmp_path / "logs"))
    assert launch.launch(lc) == []
    out = capsys.readouterr().out
    assert "nothing submitted" in out
    assert all(f"{c.run_id}: complete, skipped" in out for c in cfgs)
    assert not (tmp_path / "logs").exists()
    # One incomplete run: only it is to run (dry run, to submit nothing here).
    (pathlib.Path(cfgs[1].run_dir) / birdjepa.runtime.rundir.COMPLETE).unlink()
    launch.launch(launch.LaunchConfig(sweep=str(sweep), dry_run=True))
    out = capsys.readouterr().out
    assert f"{cfgs[0].run_id}: complete, skipped" in out and f"{cfgs[1].run_id}: to run" in out


@pytest.fixture
def fake_srun(tmp_path, monkeypatch):
    """An `srun` on PATH, as submitit's SlurmExecutor insists on one before it writes a script:
    this test reads the script only, and needs no Slurm installed (nor an earlier test's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_slurm_executor_without_srun_is_a_sweep_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun anywhere
    lc = launch.LaunchConfig(sweep="sweeps/lr.py", log_dir=str(tmp_path / "logs"))
    with pytest.raises(launch.SweepError, match="expected Slurm's srun on PATH"):
        launch.make_executor(lc, job_name="lr", n_workers=2)


def test_sbatch_script_has_signal_requeue_resources_and_setup(tmp_path, fake_srun):
    lc = launch.LaunchConfig(
        sweep="sweeps/lr.py", log_dir=str(tmp_path / "logs"), n_hours=2.0,
        slurm=launch.SlurmConfig(partition="preempt", account="birds", gpus_per_node=4,
                                 tasks_per_node=4, mem_gb=64, max_num_timeout=7,
                                 setup=("module load cuda",)),
    )
    ex = launch.make_executor(lc, job_name="lr", n_workers=6)
    assert ex._executor.max_num_timeout == 7
    script = ex._executor._make_submission_file_text("python -m train", "uid")
    lines = set(script.splitlines())
    for want in ("#SBATCH --signal=USR2@90", "#SBATCH --job-name=lr", "#SBATCH --time=120",
                 "#SBATCH --cpus-per-task=8", "#SBATCH --mem=64G", "#SBATCH --partition=preempt",
                 "#SBATCH --account=birds", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --ntasks-per-node=4", "#SBATCH --nodes=1", "module load cuda"):
        assert want in lines, f"{want!r} not in\n{script}"
    assert f"#SBATCH --output={tmp_path / 'logs' / 'lr'}/%j_0_log.out" in lines, script
    assert "#SBATCH --open-mode=append" in lines  # requeued attempts append to the same logs


def test_cli_help_and_missing_sweep(tmp_path):
    r = subprocess.run([sys.executable, "-m", "birdjepa.launch", "--help"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0 and "--slurm.partition" in r.stdout and "--dry_run" in r.stdout
    r = subprocess.run([sys.executable, "-m", "birdjepa.launch", "--sweep",
                        str(tmp_path / "none.py")], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode == 2 and "not found" in r.stderr


@pytest.mark.parametrize("sweep", ["lr.py", "objectives.py", "tiny.py", "ssl_recipe.py"])
def test_repo_sweeps_resolve(sweep):
    cfgs = launch.resolve(ROOT / "sweeps" / sweep)
    assert len({c.run_id for c in cfgs}) == len(cfgs) >= 2


def test_submitting_leaves_no_empty_placeholder_directory(tmp_path, capsys, monkeypatch,
                                                          demo_audio):
    """submitit creates its folder template `logs/<sweep>/%j` literally when it submits; after
    submitting, only the jobs' own log directories remain (the job is a plain print here, run
    by submitit's local executor: no training)."""
    monkeypatch.chdir(tmp_path)
    demo_shards(tmp_path, demo_audio)
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}]', name="mine")
    monkeypatch.setattr(birdjepa.launch.job, "TrainingJob",
                        lambda cfg: functools.partial(print, cfg.run_id))
    jobs = launch.launch(launch.LaunchConfig(sweep=str(sweep), executor="local",
                                             log_dir=str(tmp_path / "logs"), n_hours=0.1))
    jobs[0].result()
    job = jobs[0].job_id
    assert sorted(p.name for p in (tmp_path / "logs" / "mine").iterdir() if p.is_dir()) == []
    assert (tmp_path / "logs" / "mine" / f"{job}_0_log.out").read_text().strip().endswith(
        jobs[0].result() or "")
    assert f"job {jobs[0].job_id}:" in capsys.readouterr().out


def _timed_job(path: pathlib.Path, fail: bool):
    """A stand-in training job built from the standard library only (the job process cannot
    import this module): records when it ran; exits 1 when told to fail."""
    code = ("import pathlib, sys, time; t = time.time(); time.sleep(0.5); "
            f"pathlib.Path({str(path)!r}).write_text(f'{{t}} {{time.time()}}'); sys.exit({int(fail)})")
    return functools.partial(subprocess.run, [sys.executable, "-c", code], check=True)


def test_max_parallel_runs_one_after_another_and_reports_each(tmp_path, capsys, monkeypatch,
                                                              demo_audio):
    """--max_parallel 1 (local): the runs do not overlap, launch() returns once all have ended,
    and a failed run is reported without stopping the ones after it."""
    monkeypatch.chdir(tmp_path)
    demo_shards(tmp_path, demo_audio)
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}, {"optim.lr": 2e-3}, {"optim.lr": 3e-3}]')
    monkeypatch.setattr(birdjepa.launch.job, "TrainingJob", lambda cfg: _timed_job(
        tmp_path / f"{cfg.optim.lr}.txt", cfg.optim.lr == 2e-3))
    jobs = launch.launch(launch.LaunchConfig(sweep=str(sweep), executor="local", max_parallel=1,
                                             log_dir=str(tmp_path / "logs"), n_hours=0.1))
    spans = [tuple(map(float, (tmp_path / f"{lr}.txt").read_text().split()))
             for lr in (1e-3, 2e-3, 3e-3)]  # all written before launch() returned
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:], strict=False)), spans
    out = capsys.readouterr().out
    ids = [c.run_id for c in launch.resolve(sweep)]
    assert f"{ids[0]} ended without COMPLETE" in out and f"{ids[2]} ended without COMPLETE" in out
    assert f"{ids[1]} failed (" in out and str(jobs[1].paths.stderr) in out
    with pytest.raises(launch.SweepError, match="--max_parallel: expected 0, or an int >= 1"):
        launch.launch(launch.LaunchConfig(sweep=str(sweep), executor="slurm", max_parallel=1))


def test_entries_runs_only_the_named_entries_under_their_sweep_ids(tmp_path, capsys,
                                                                    monkeypatch, demo_audio):
    """--entries 2 --entries 0 submits entries 0 and 2 (sweep order) with the run ids they have
    in the whole sweep; an index past the sweep's end is refused, naming the range."""
    monkeypatch.chdir(tmp_path)
    demo_shards(tmp_path, demo_audio)
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}, {"optim.lr": 2e-3}, {"optim.lr": 3e-3}]')
    ids = [c.run_id for c in launch.resolve(sweep)]
    ran = []
    monkeypatch.setattr(birdjepa.launch.job, "TrainingJob", lambda cfg: ran.append(cfg.run_id))
    monkeypatch.setattr(birdjepa.launch.sweep, "make_executor", lambda lc, **kw: _InlineExecutor())
    main_out = birdjepa.launch.__main__.main(["--sweep", str(sweep), "--executor", "local", "--entries", "2",
                            "--entries", "0"])
    assert main_out == 0 and ran == [ids[0], ids[2]], ran
    out = capsys.readouterr().out
    assert ids[1] not in out and ids[0] in out and ids[2] in out
    assert birdjepa.launch.__main__.main(["--sweep", str(sweep), "--executor", "local", "--entries", "3"]) == 2
    assert "--entries: expected indexes 0..2 of the sweep's 3 entries, got [3]" in \
        capsys.readouterr().err
    assert birdjepa.launch.__main__.main(["--sweep", str(sweep), "--dry_run", "--entries", "2"]) == 0
    out = capsys.readouterr().out
    assert f"entry 2 ({ids[2]}): data.train_shards" in out and "entry 0" not in out


class _InlineExecutor:
    """Takes each submission and runs nothing (a stand-in for submitit's local executor; the
    test's TrainingJob records the run id when launch() builds the job)."""

    class _Job:
        job_id = "inline"

        class paths:  # noqa: N801 - mirrors submitit's job.paths
            stdout = "-"

    def batch(self):
        import contextlib

        return contextlib.nullcontext()

    def submit(self, job):
        return self._Job()


def test_flags_use_underscores_and_accept_dashes():
    import birdjepa.common.cli_args
    import birdjepa.config

    assert birdjepa.common.cli_args.flags(["--n-steps=4", "--slurm.tasks-per-node", "2", "--dry-run",
                                  "--run_dir=a-b", "-h", "x-y"]) == [
        "--n_steps=4", "--slurm.tasks_per_node", "2", "--dry_run", "--run_dir=a-b", "-h", "x-y"]
    cfg = birdjepa.config.command_line.cli(["--n-steps=7", "--data.view-window-s=6", "--n_classes=3"])
    assert (cfg.n_steps, cfg.data.view_window_s, cfg.n_classes) == (7, 6.0, 3)


def test_dry_run_says_from_the_plan_whether_each_entry_fits_the_gpu(tmp_path, capsys,
                                                                   monkeypatch, demo_audio):
    """--slurm.gpu with --dry_run reads the plan file: an entry planned at its batch per GPU
    (batch_size / (nodes x gpus_per_node)) fits or not, one without a row is "not planned", and
    a planned entry that does not fit fails the dry run."""
    monkeypatch.chdir(tmp_path)
    demo_shards(tmp_path, demo_audio)
    sweep = write_sweep(tmp_path, '[{"batch_size": 32}, {"batch_size": 64}]')
    a, b = launch.resolve(sweep)

    def planned(cfg, total_gb):
        key = rules.plan_key(dataclasses.replace(cfg, batch_size=cfg.batch_size // 4))
        return rules.make_row(config="sw", gpu="l40s", remat="block", batch_size=8,
                              attention="auto", key=key, chosen=True, flash_attention=2,
                              flops_per_update=1e12, device_bytes=48_305_799_168,
                              memory={"argument": 0, "output": 0, "alias": 0,
                                      "temp": int(total_gb * 1e9)})

    plan = tmp_path / "plan.json"
    rules.save(plan, [planned(a, 12.5)])
    args = ["--sweep", str(sweep), "--dry_run", "--slurm.gpus_per_node", "4",
            "--slurm.gpu", "l40s", "--plan", str(plan)]
    assert birdjepa.launch.__main__.main(args) == 0
    out = capsys.readouterr().out
    assert f"entry 0 ({a.run_id}): plan: fits on l40s: 12.5 of 48.3 GB (74 % free" in out
    assert f"entry 1 ({b.run_id}): plan: not planned (no row in {plan} for this step at " \
        "batch 16 per GPU on l40s" in out
    rules.save(plan, [planned(a, 12.5), planned(b, 45.0)])
    assert birdjepa.launch.__main__.main(args) == 2
    out, err = capsys.readouterr()
    assert f"entry 1 ({b.run_id}): plan: does NOT fit on l40s: 45.0 of 48.3 GB" in out
    assert "1 entr(ies) do not fit l40s by the plan" in err
    assert birdjepa.launch.__main__.main([*args[:-4], "--slurm.gpu", "v100"]) == 2
    assert "--slurm.gpu: expected one of h100, h200, a100-80g, l40s, got 'v100'" in \
        capsys.readouterr().err


def test_two_entries_in_one_run_directory_are_refused(tmp_path, capsys):
    """Issue 38 item 22: two entries with the same run_dir passed validation and --dry_run."""
    same = str(tmp_path / "runs" / "one")
    sweep = write_sweep(tmp_path, f'[{{"optim.lr": 1e-3, "run_dir": {same!r}}}, '
                                  f'{{"optim.lr": 2e-3, "run_dir": {same!r}}}]')
    assert birdjepa.launch.__main__.main(["--sweep", str(sweep), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"expected a run directory per entry, got entries 0 and 1 both in {same}" in err, err


@pytest.mark.parametrize(("flag", "value", "least"), [("nodes", "0", 1),
                                                      ("gpus_per_node", "-2", 0),
                                                      ("tasks_per_node", "0", 1)])
def test_slurm_counts_out_of_range_are_refused(tmp_path, capsys, flag, value, least):
    """Issue 38 item 22: `--slurm.nodes 0 --slurm.gpus_per_node -2` was accepted."""
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}]')
    assert birdjepa.launch.__main__.main(["--sweep", str(sweep), "--dry-run", f"--slurm.{flag}", value]) == 2
    err = capsys.readouterr().err
    assert f"--slurm.{flag}: expected an int >= {least}, got {value}" in err, err


@pytest.mark.parametrize(("flags", "message"), [
    (["--n_hours", "nan"], "--n_hours: expected a finite number of hours >= 1/60 (one minute), "
     "got nan"),
    (["--n_hours", "inf"], "--n_hours: expected a finite number of hours >= 1/60 (one minute), "
     "got inf"),
    (["--n_hours", "0"], "--n_hours: expected a finite number of hours >= 1/60 (one minute), "
     "got 0.0"),
    (["--n_hours", "-1"], "--n_hours: expected a finite number of hours >= 1/60 (one minute), "
     "got -1.0"),
    (["--slurm.additional_parameters", '{"constraint": '], "--slurm.additional_parameters: "
     "expected a JSON object of sbatch options, got '{\"constraint\": ' (not JSON:"),
    (["--slurm.additional_parameters", '["a100"]'], "--slurm.additional_parameters: expected a "
     "JSON object of sbatch options, got '[\"a100\"]'"),
])
def test_time_limits_and_sbatch_options_are_checked_before_anything(tmp_path, capsys, flags,
                                                                    message):
    """Issue 47 item 19: `--n_hours nan|inf` and malformed additional parameters passed
    --dry_run and ended in tracebacks at submit; 0 or -1 hours became a 1-minute limit."""
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}]')
    for dry in (["--dry-run"], []):
        assert birdjepa.launch.__main__.main(["--sweep", str(sweep), *dry, *flags]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


def test_dry_run_decodes_samples_and_fails_data_that_the_run_would_fail_on(tmp_path, capsys,
                                                                          monkeypatch,
                                                                          demo_audio):
    """Issue 38 item 24: --dry_run said "ok" for eval data whose evaluation later failed with
    TooManyFailuresError (files present, bytes not audio): the dry run now decodes the first
    failure_window samples of each split as the run's loaders do."""
    import pyarrow as pa

    import birdjepa.data

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "demo" / "eval").mkdir(parents=True)
    (tmp_path / "data" / "demo" / "train").symlink_to(demo_audio, target_is_directory=True)
    (shard,) = birdjepa.data.resolve_shards(demo_audio)
    t = pa.ipc.open_stream(pa.memory_map(shard)).read_all()
    rows = [{**r, "audio": {**r["audio"], "bytes": b"not audio " * 50}} if i % 2 else r
            for i, r in enumerate(t.to_pylist())]
    with pa.OSFile(str(tmp_path / "data/demo/eval/data.arrow"), "wb") as f, \
            pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(pa.Table.from_pylist(rows, schema=t.schema))
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}]')
    assert birdjepa.launch.__main__.main(["--sweep", str(sweep), "--dry_run"]) == 2
    out, err = capsys.readouterr()
    (cfg,) = launch.resolve(sweep)
    assert f"entry 0 ({cfg.run_id}): data.train_shards: 20 rows" in out
    assert "(0 failed): ok" in out
    (line,) = [x for x in out.splitlines() if "data.eval_shards" in x]
    assert "too many failed samples: 10 of the last 20 samples failed" in line, line
    assert "dry run: 1 shard check(s) failed" in err


@pytest.mark.heavy
@pytest.mark.parametrize("max_parallel", [0, 1])
def test_a_run_still_training_from_a_killed_launcher_is_found_not_started_again(
        tmp_path, capsys, monkeypatch, demo_audio, max_parallel):
    """Issue 47 item 5: `launch --executor local` killed by SIGKILL (the OOM killer, a lost
    login shell) leaves its job training; running the same command again reported the entry
    failed (RunDirBusy: the orphan holds the lock). The launcher finds the run by its lock's
    holder and starts it no second time; with --max_parallel it waits for it to end and says
    how it ended, then runs the others."""
    monkeypatch.chdir(tmp_path)
    demo_shards(tmp_path, demo_audio)
    sweep = write_sweep(tmp_path, '[{"optim.lr": 1e-3}, {"optim.lr": 2e-3}]')
    orphan_cfg, other_cfg = launch.resolve(sweep)
    run_dir = pathlib.Path(orphan_cfg.run_dir)
    run_dir.mkdir(parents=True)
    hold = ("import pathlib, sys, time; sys.path.insert(0, sys.argv[2]); "
            "import birdjepa.runtime.rundir as r; "
            "lock = r.Lock(pathlib.Path(sys.argv[1])).acquire(); print('held', flush=True); "
            "time.sleep(float(sys.argv[3]))")
    orphan = subprocess.Popen([sys.executable, "-c", hold, str(run_dir), str(ROOT / "src"), "3"],
                              stdout=subprocess.PIPE, text=True)
    assert orphan.stdout.readline().strip() == "held"
    started = []
    monkeypatch.setattr(birdjepa.launch.job, "TrainingJob", lambda cfg: (
        started.append(cfg.run_id), _timed_job(tmp_path / f"{cfg.optim.lr}.txt", False))[1])
    try:
        launch.launch(launch.LaunchConfig(sweep=str(sweep), executor="local",
                                          max_parallel=max_parallel,
                                          log_dir=str(tmp_path / "logs"), n_hours=0.1))
        out = capsys.readouterr().out
    finally:
        orphan.wait(timeout=30)
    assert started == [other_cfg.run_id], started
    assert (f"{orphan_cfg.run_id}: already training (pid {orphan.pid} on host" in out), out
    assert "failed" not in out, out
    if max_parallel:
        assert (f"{orphan_cfg.run_id} ended without COMPLETE (it trained in pid {orphan.pid} on "
                "host") in out, out
