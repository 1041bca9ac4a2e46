"""Simulated hosts for multi-host tests (issue 37; docs/issues/025-many-hosts): one network
namespace per host, joined by veth pairs to a bridge in a switch namespace (addresses 10.N.0.x
assigned inside the namespaces only), and for each process its own hostname (UTS namespace),
its own /etc/hosts naming every host and a private /tmp (mount namespace). The paths a test
shares (the run directory, the corpus, the checkout and its virtual environment) are bound back
at their own paths inside the private /tmp, as nodes share a cluster file system.

    with SimHosts(2, shared=[tmp_path]) as hosts:
        p = hosts.popen(0, [sys.executable, "-c", "..."], env={...}, log=tmp_path / "h0.log")

Needs root (CI runs as root); `ip` (iproute2) and `unshare` (util-linux) are installed from
Debian when missing. Everything is removed on exit, also after a failure.
"""

import itertools
import os
import pathlib
import shlex
import subprocess
import sys

import slurm_cluster

_ids = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class SimHosts:
    def __init__(self, n: int, *, shared: list[os.PathLike]):
        self.n = n
        tag = f"{os.getpid() % 10000}{next(_ids)}"
        self.net = 10 + (os.getpid() + int(tag)) % 200
        self.names = [f"host{i}" for i in range(n)]
        self.ns = [f"bj{tag}h{i}" for i in range(n)]
        self.switch = f"bj{tag}sw"
        self.addrs = [f"10.{self.net}.0.{i + 1}" for i in range(n)]
        repo = pathlib.Path(__file__).resolve().parents[2]
        self.shared = sorted({str(pathlib.Path(p).resolve()) for p in [*shared, repo,
                                                                        sys.prefix]})
        self.hosts_file = pathlib.Path(shared[0]) / f".hosts-{tag}"
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "SimHosts":
        slurm_cluster.ensure_installed(binaries=("ip", "unshare"),
                                       packages=("iproute2", "util-linux"))
        try:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for i, ns in enumerate(self.ns):
                _ip("netns", "add", ns)
                _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}",
                    "netns", self.switch)
                _ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
                _ip("-n", ns, "addr", "add", f"{self.addrs[i]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        lines = ["127.0.0.1 localhost"] + [f"{a} {h}" for a, h in zip(self.addrs, self.names,
                                                                      strict=True)]
        self.hosts_file.write_text("\n".join(lines) + "\n")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
        for ns in [*self.ns, self.switch]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.hosts_file.unlink(missing_ok=True)

    def _prelude(self, host: int) -> str:
        """Shell lines run inside the host's new UTS and mount namespaces: hostname, hosts file,
        a private /tmp with the shared paths bound back where they were."""
        q = shlex.quote
        lines = [f"hostname {q(self.names[host])}",
                 f"mount --bind {q(str(self.hosts_file))} /etc/hosts",
                 "mkdir -p /run/bj-orig-tmp", "mount --bind /tmp /run/bj-orig-tmp",
                 "mount -t tmpfs tmpfs /tmp"]
        for p in self.shared:
            if p == "/tmp" or p.startswith("/tmp/"):
                rel = p[len("/tmp/"):]
                lines += [f"mkdir -p {q(p)}", f"mount --bind {q('/run/bj-orig-tmp/' + rel)} {q(p)}"]
        return " && ".join(lines)

    def popen(self, host: int, argv: list[str], *, env: dict[str, str],
              log: os.PathLike) -> subprocess.Popen:
        """Start `argv` on simulated host `host` with `env`, output to `log`."""
        script = f"{self._prelude(host)} && exec {shlex.join(argv)}"
        cmd = ["ip", "netns", "exec", self.ns[host], "unshare", "--uts", "--mount",
               "--propagation", "private", "sh", "-c", script]
        out = open(log, "w")  # noqa: SIM115 - owned by the process
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.procs.append(p)
        return p


    def signal(self, index: int, signum: int) -> None:
        """Send `signum` to the `index`-th process started (`exec` leaves the command itself as
        the process `popen` started: no shell in between)."""
        self.procs[index].send_signal(signum)

    def link(self, host: int, *, up: bool) -> None:
        """Take host `host`'s network link down (it leaves the network) or bring it back up."""
        _ip("-n", self.ns[host], "link", "set", "eth0", "up" if up else "down")


def slurm_env(hosts: SimHosts, rank: int, tasks_per_node: int, *, job_id: int = 4242
              ) -> dict[str, str]:
    """The environment Slurm gives task `rank` of a step over every simulated host with
    `tasks_per_node` tasks each (submitit reads it as a Slurm job)."""
    node, local = divmod(rank, tasks_per_node)
    return {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": str(job_id),
            "SLURM_NTASKS": str(hosts.n * tasks_per_node), "SLURM_JOB_NUM_NODES": str(hosts.n),
            "SLURM_NODEID": str(node), "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local),
            "SLURM_JOB_NODELIST": f"host[0-{hosts.n - 1}]",
            "SLURM_STEP_TASKS_PER_NODE": f"{tasks_per_node}(x{hosts.n})"}
