"""GPU sets as Slurm gives them (issue 37 item 4) and the loopback coordinator refusal (item 2),
as pure functions of the environment: no GPU and no second host needed."""

import pytest

import birdjepa.runtime.slurm_env as slurm_env


def env(**kw) -> dict[str, str]:
    return {k: str(v) for k, v in kw.items()}


@pytest.mark.parametrize("spec,node,want", [
    ("4", 0, 4), ("2(x3)", 2, 2), ("2,1", 1, 1), ("3(x2),1", 2, 1), ("2(x2),1(x2)", 3, 1),
])
def test_tasks_on_node_reads_slurms_compressed_list(spec, node, want):
    assert slurm_env.tasks_on_node(env(SLURM_STEP_TASKS_PER_NODE=spec, SLURM_NODEID=node)) \
        == want


def test_one_task_per_node_drives_every_visible_gpu():
    assert slurm_env.local_device_ids(env(SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURM_NODEID=1,
                                            CUDA_VISIBLE_DEVICES="0,1,2,3",
                                            SLURM_STEP_GPUS="0,1,2,3")) is None
    assert slurm_env.local_device_ids({}) is None


def test_gpus_bound_per_task_are_numbered_from_zero():
    """--gpus-per-task 2 on a 4-GPU node: Slurm shows rank 1 GPUs 2,3 only, which CUDA numbers
    0 and 1 in that process."""
    for local, visible in ((0, "0,1"), (1, "2,3")):
        e = env(SLURM_STEP_TASKS_PER_NODE="2", SLURM_LOCALID=local, CUDA_VISIBLE_DEVICES=visible,
                SLURM_STEP_GPUS="0,1,2,3")
        assert slurm_env.local_device_ids(e) == [0, 1]
    # A partial node (the step got GPUs 4-7 of 8), bound one per task.
    e = env(SLURM_STEP_TASKS_PER_NODE="4", SLURM_LOCALID=3, CUDA_VISIBLE_DEVICES="7",
            SLURM_STEP_GPUS="4,5,6,7")
    assert slurm_env.local_device_ids(e) == [0]


def test_shared_gpus_are_split_by_local_rank():
    """Every task sees the node's GPUs: rank 1 of 2 takes the second half, GPUs 2,3."""
    shared = dict(SLURM_STEP_TASKS_PER_NODE="2", CUDA_VISIBLE_DEVICES="0,1,2,3")
    assert slurm_env.local_device_ids(env(SLURM_LOCALID=0, **shared)) == [0, 1]
    assert slurm_env.local_device_ids(env(SLURM_LOCALID=1, **shared)) == [2, 3]
    # The step's set equals what is visible (CUDA_VISIBLE_DEVICES lists the step's GPUs 2-5).
    e = env(SLURM_STEP_TASKS_PER_NODE="2", SLURM_LOCALID=1, CUDA_VISIBLE_DEVICES="2,3,4,5",
            SLURM_STEP_GPUS="2,3,4,5")
    assert slurm_env.local_device_ids(e) == [2, 3]
    # Nothing visible named, the step's list only.
    e = env(SLURM_STEP_TASKS_PER_NODE="4", SLURM_LOCALID=2, SLURM_STEP_GPUS="0,1,2,3")
    assert slurm_env.local_device_ids(e) == [2]
    with pytest.raises(slurm_env.SlurmEnvError, match="expected the node's 3 GPUs .* to divide evenly over "
                                         "its 2 tasks"):
        slurm_env.local_device_ids(env(SLURM_STEP_TASKS_PER_NODE="2", SLURM_LOCALID=0,
                                         CUDA_VISIBLE_DEVICES="0,1,2"))
    # CPU tasks: no GPUs named, nothing to split.
    assert slurm_env.local_device_ids(env(SLURM_STEP_TASKS_PER_NODE="2", SLURM_LOCALID=1)) \
        is None


def test_a_loopback_coordinator_is_refused_on_the_other_hosts():
    """Across hosts, a coordinator name that resolves to loopback on a host other than the
    coordinator's would make that host wait on nothing; on the coordinator's own host (and in a
    one-host job) loopback reaches it."""
    slurm_env.check_coordinator("localhost", 1, coordinator_node=False)  # one host
    slurm_env.check_coordinator("localhost", 2, coordinator_node=True)  # its own host
    with pytest.raises(slurm_env.SlurmEnvError, match="expected the address of the job's first host "
                                           r"\(of 2\), got loopback 127.0.0.1 on this host"):
        slurm_env.check_coordinator("localhost", 2, coordinator_node=False)
    with pytest.raises(slurm_env.SlurmEnvError, match="got loopback 127.0.1.1"):
        slurm_env.check_coordinator("127.0.1.1", 4, coordinator_node=False)
    slurm_env.check_coordinator("10.0.0.1", 2, coordinator_node=False)  # routable
    with pytest.raises(slurm_env.SlurmEnvError, match="cannot be resolved"):
        slurm_env.check_coordinator("no-such-host.invalid", 2, coordinator_node=False)


@pytest.mark.parametrize(("rank", "node"), [(0, 0), (1, 1), (2, 0)])
def test_the_coordinators_host_is_slurm_node_0_whatever_the_distribution(rank, node):
    """Issue 47 item 14: with `--distribution=cyclic` (or uneven tasks per node) "on the
    coordinator's host" was decided by `rank < local_world_size`: rank 2 on node 0 was refused
    the loopback its host allows, and rank 1 on node 1 skipped the check. The host is Slurm's
    node number (the coordinator is the first host of SLURM_JOB_NODELIST: node 0), the node
    count SLURM_JOB_NUM_NODES."""
    environ = {"SLURM_NODEID": str(node), "SLURM_JOB_NUM_NODES": "2", "SLURM_PROCID": str(rank),
               "SLURM_LOCALID": str(rank // 2), "SLURM_NTASKS": "3"}
    assert slurm_env.on_coordinator_host(environ) == (node == 0)
    assert slurm_env.n_nodes(environ, default=99) == 2
    assert slurm_env.n_nodes({}, default=3) == 3  # not under Slurm: the caller's count
    if node == 0:
        slurm_env.check_coordinator("localhost", 2,
                                    coordinator_node=slurm_env.on_coordinator_host(environ))
    else:
        with pytest.raises(slurm_env.SlurmEnvError, match="got loopback"):
            slurm_env.check_coordinator(
                "localhost", 2, coordinator_node=slurm_env.on_coordinator_host(environ))


def test_launch_dry_run_prints_each_ranks_node_and_gpus():
    """`launch --dry_run --slurm.nodes 2 --slurm.tasks_per_node 2 --slurm.gpus_per_node 4`:
    four ranks, two per node, each driving its half of the node's GPUs."""
    import birdjepa.launch.sweep

    lc = birdjepa.launch.LaunchConfig(sweep="x", slurm=birdjepa.launch.SlurmConfig(nodes=2, tasks_per_node=2,
                                                                 gpus_per_node=4))
    lines = birdjepa.launch.dry_run.layout_lines(lc)
    assert lines[0].startswith("layout: 2 node(s) x 2 task(s) = 4 JAX process(es); "
                               "coordinator: node 0")
    assert lines[1:] == [
        "layout: rank 0: node 0, local rank 0, GPUs 0,1",
        "layout: rank 1: node 0, local rank 1, GPUs 2,3",
        "layout: rank 2: node 1, local rank 0, GPUs 0,1",
        "layout: rank 3: node 1, local rank 1, GPUs 2,3"]
    one = birdjepa.launch.LaunchConfig(sweep="x", slurm=birdjepa.launch.SlurmConfig(nodes=2, gpus_per_node=4))
    assert birdjepa.launch.dry_run.layout_lines(one)[1:] == ["layout: rank 0: node 0, local rank 0, GPUs 0,1,2,3",
                                            "layout: rank 1: node 1, local rank 0, GPUs 0,1,2,3"]
    cpu = birdjepa.launch.LaunchConfig(sweep="x", slurm=birdjepa.launch.SlurmConfig(tasks_per_node=2))
    assert birdjepa.launch.dry_run.layout_lines(cpu)[2] == "layout: rank 1: node 0, local rank 1, CPU"
    odd = birdjepa.launch.LaunchConfig(sweep="x", slurm=birdjepa.launch.SlurmConfig(tasks_per_node=3,
                                                                  gpus_per_node=4))
    with pytest.raises(birdjepa.launch.SweepError, match="to divide evenly over its 3 tasks"):
        birdjepa.launch.dry_run.layout_lines(odd)
    assert birdjepa.launch.dry_run.layout_lines(birdjepa.launch.LaunchConfig(sweep="x", executor="local")) == []
