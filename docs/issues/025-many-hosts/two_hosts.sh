#!/usr/bin/env bash
# Issue 37, the first experiment: one birdjepa training on two simulated hosts (run as root, from
# the checkout's root after `make setup`). Each host is a network namespace (a veth pair,
# 10.77.0.1 and 10.77.0.2), its own hostname (UTS namespace), its own /etc/hosts and a private
# /tmp (mount namespace); the work directory W is shared, as nodes share a cluster file system.
# Each process gets the environment Slurm gives a 2-node step (SLURM_JOB_NODELIST=host[0-1]...).
#   bash docs/issues/025-many-hosts/two_hosts.sh                 # both hosts name each other
#   OWN_LOOPBACK=1 bash docs/issues/025-many-hosts/two_hosts.sh  # host0: host0 -> 127.0.1.1
#   WRONG_LOOPBACK=1 bash docs/issues/025-many-hosts/two_hosts.sh  # host1: host0 -> 127.0.1.1
set -u
W=${W:-/work/issue-025}
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
PY=$REPO/.venv/bin/python
mkdir -p "$W"
[ -f "$W/corpus/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$W/corpus" \
    --n_recordings 12 --n_shards 2 --min_s 3 --max_s 6 --overwrite > /dev/null
PYTHONPATH=$REPO/tests/support $PY -c "import sys, tiny; open(sys.argv[1], 'w').write(
    tiny.tiny_toml(sys.argv[2], n_steps=6, ckpt_every=3))" "$W/tiny.toml" "$W/corpus"
good="127.0.0.1 localhost\n10.77.0.1 host0\n10.77.0.2 host1\n"
loop="127.0.0.1 localhost\n127.0.1.1 host0\n10.77.0.2 host1\n"  # Debian's own-name line
printf "$([ -n "${OWN_LOOPBACK:-}" ] && echo "$loop" || echo "$good")" > "$W/hosts0"
printf "$([ -n "${WRONG_LOOPBACK:-}" ] && echo "$loop" || echo "$good")" > "$W/hosts1"
cleanup() { ip netns del bjh0 2>/dev/null; ip netns del bjh1 2>/dev/null; }
trap cleanup EXIT
cleanup
for i in 0 1; do ip netns add bjh$i; done
ip link add bjv0 type veth peer name bjv1
ip link set bjv0 netns bjh0; ip link set bjv1 netns bjh1
for i in 0 1; do
    ip netns exec bjh$i ip addr add 10.77.0.$((i + 1))/24 dev bjv$i
    ip netns exec bjh$i ip link set bjv$i up
    ip netns exec bjh$i ip link set lo up
done
rm -rf "$W/run"
for i in 0 1; do
    ip netns exec bjh$i unshare --uts --mount --propagation private env \
        SUBMITIT_EXECUTOR=slurm SLURM_JOB_ID=4242 SLURM_NTASKS=2 SLURM_JOB_NUM_NODES=2 \
        SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 SLURM_JOB_NODELIST='host[0-1]' \
        SLURM_STEP_TASKS_PER_NODE='1(x2)' WANDB_MODE=disabled \
        XLA_FLAGS=--xla_force_host_platform_device_count=1 \
        sh -c "hostname host$i && mount --bind $W/hosts$i /etc/hosts && \
            mount -t tmpfs tmpfs /tmp && exec $PY -m birdjepa.pretrain --cfg $W/tiny.toml \
            --run_dir $W/run --distributed.init_timeout_s=20" > "$W/host$i.log" 2>&1 &
done
time wait
for i in 0 1; do echo "== host$i"; grep -E "device\(s\)|^done|Error|refus" "$W/host$i.log" | cut -c1-240; done
