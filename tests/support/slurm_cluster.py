"""A real single-node Slurm cluster for the test suite.

`SlurmCluster` installs Debian's slurm-wlm, slurmdbd, munge and mariadb-server when they are
missing, then runs munged, mariadbd, slurmdbd, slurmctld and slurmd as root, in the foreground,
each with its own files under one temporary directory and on private 127.0.0.1 ports, so that it
never touches (or clashes with) a system Slurm. slurmdbd is there so that `sacct` works: without
it submitit's `job.result()` can wait forever on a job killed before it wrote its result.

Clients find the cluster through `SLURM_CONF`: use `cluster.env`, `cluster.run([...])` or
`with cluster.activated(): ...` (which sets it in `os.environ`, as submitit needs).

`slurm_cluster` is a session-scoped pytest fixture built by `slurm_cluster_fixture()`. However
many modules register it, one cluster is started per process and stopped at session end.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

PACKAGES = ("slurm-wlm", "munge", "slurmdbd", "mariadb-server")
# One binary per package, plus the clients the tests and submitit call.
BINARIES = (
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "munged",
    "munge",
    "mariadbd",
    "mariadb-install-db",
    "mariadb",
    "sacctmgr",
    "sbatch",
    "srun",
    "sacct",
    "squeue",
    "sinfo",
    "scontrol",
    "scancel",
)
PARTITION = "debug"
NODE_NAME = "localhost"
CLUSTER_NAME = "birdjepa"
# Every process this module starts (and so every job of the cluster) carries this variable,
# set to the cluster's directory; teardown finds strays by it.
MARKER_ENV = "BIRDJEPA_SLURM_CLUSTER"
KEEP_ENV = "BIRDJEPA_SLURM_KEEP"  # set to 1 to keep the cluster's directory (logs) after stop

_apt_updated = False


class SlurmClusterError(RuntimeError):
    """The cluster could not be installed, started or queried."""


def missing_binaries(binaries=BINARIES) -> list[str]:
    return [b for b in binaries if shutil.which(b) is None]


def ensure_installed(timeout: float = 480.0, *, binaries=BINARIES, packages=PACKAGES) -> float:
    """Install the Debian `packages` (default: Slurm's) if any of `binaries` is missing; return
    the seconds spent."""
    global _apt_updated
    if not missing_binaries(binaries):
        return 0.0
    if os.geteuid() != 0:
        raise SlurmClusterError(
            f"missing {missing_binaries(binaries)} and not root: install {' '.join(packages)}"
        )
    t0 = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    # Keep the packages' postinst scripts from starting system daemons on the default ports.
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = False
    if not policy.exists():
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        made_policy = True
    try:
        steps = []
        if not _apt_updated:
            steps.append(["apt-get", *lock, "update", "-q"])
        steps.append(
            ["apt-get", *lock, "install", "-y", "-q", "--no-install-recommends", *packages]
        )
        for cmd in steps:
            left = timeout - (time.monotonic() - t0)
            try:
                p = subprocess.run(
                    cmd, env=env, capture_output=True, text=True, timeout=max(left, 1)
                )
            except subprocess.TimeoutExpired as e:
                raise SlurmClusterError(f"{' '.join(cmd)} timed out after {timeout} s") from e
            if p.returncode != 0:
                raise SlurmClusterError(
                    f"{' '.join(cmd)} exited {p.returncode}:\n{_tail(p.stdout + p.stderr)}"
                )
            if cmd[3] == "update":
                _apt_updated = True
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)
    if missing_binaries(binaries):
        raise SlurmClusterError(f"still missing after install: {missing_binaries(binaries)}")
    return time.monotonic() - t0


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _mem_total_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise SlurmClusterError("no MemTotal in /proc/meminfo")


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL the daemon if the Python process that started it dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class SlurmCluster:
    """A single-node Slurm cluster with accounting, run by this process; a context manager."""

    def __init__(
        self,
        root: str | Path | None = None,
        *,
        cpus: int | None = None,
        cred_expire: int = 5,
        startup_timeout: float = 90.0,
        install: bool = True,
    ):
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="bjslurm-")).resolve()
        self.cpus = cpus or len(os.sched_getaffinity(0))  # as nproc
        self.cred_expire = cred_expire
        self.startup_timeout = startup_timeout
        self.install = install
        self.hostname = socket.gethostname().split(".")[0]
        self.partition = PARTITION
        self.node_name = NODE_NAME
        self.cluster_name = CLUSTER_NAME
        self.etc = self.root / "etc"
        self.conf_path = self.etc / "slurm.conf"
        self.dbd_conf_path = self.etc / "slurmdbd.conf"
        self.log_dir = self.root / "log"
        self.munge_socket = self.root / "munge" / "munge.socket.2"
        self.mysql_socket = self.root / "mysql" / "mysqld.sock"
        ctld, slurmd, dbd, mysql = _free_ports(4)
        self.ports = {"slurmctld": ctld, "slurmd": slurmd, "slurmdbd": dbd, "mariadb": mysql}
        self.env: dict[str, str] = {
            **os.environ,
            "SLURM_CONF": str(self.conf_path),
            MARKER_ENV: str(self.root),
        }
        self.timings: dict[str, float] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, Path] = {}
        self._lock = threading.Lock()
        self.started = False

    # ---------------------------------------------------------------- public helpers

    def run(
        self, args: Sequence[str], *, check: bool = True, timeout: float = 60.0, **kwargs
    ) -> subprocess.CompletedProcess[str]:
        """Run a client command (sbatch, sacct, ...) against this cluster; output captured."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        env = {**self.env, **kwargs.pop("env", {})}
        try:
            p = subprocess.run(list(args), env=env, timeout=timeout, **kwargs)
        except subprocess.TimeoutExpired as e:
            raise SlurmClusterError(f"{' '.join(args)} timed out after {timeout} s") from e
        if check and p.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(args)} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
            )
        return p

    @contextlib.contextmanager
    def activated(self) -> Iterator[SlurmCluster]:
        """Set SLURM_CONF (and the marker) in os.environ for the block, for in-process clients."""
        keys = ("SLURM_CONF", MARKER_ENV)
        old = {k: os.environ.get(k) for k in keys}
        os.environ.update({k: self.env[k] for k in keys})
        try:
            yield self
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def sbatch(self, script: str, *args: str, cwd: str | Path | None = None) -> str:
        """Submit a batch script given as text; return the job id."""
        p = self.run(["sbatch", "--parsable", *args], input=script, cwd=cwd or self.root)
        return p.stdout.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        """The job's state as sacct reports it ("" while it is not in the database yet)."""
        p = self.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", str(job_id)], check=False)
        lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
        return lines[-1].split()[0] if lines else ""

    def wait_job(self, job_id: str, timeout: float = 60.0, poll: float = 0.5) -> str:
        """Wait until sacct shows the job in a final state; return that state."""
        final = {
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "OUT_OF_MEMORY",
            "NODE_FAIL",
            "BOOT_FAIL",
            "DEADLINE",
            "PREEMPTED",
        }
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in final:
                return state
            time.sleep(poll)
        raise SlurmClusterError(
            f"job {job_id} not finished after {timeout} s (sacct state {state!r})\n"
            + self.log_tails()
        )

    def log_tails(self, n: int = 25) -> str:
        parts = []
        for name, path in self._logs.items():
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            parts.append(f"--- {name} ({path}) ---\n{_tail(text, n)}")
        return "\n".join(parts)

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> SlurmCluster:
        t0 = time.monotonic()
        if self.install:
            self.timings["install"] = ensure_installed()
        elif missing_binaries():
            raise SlurmClusterError(f"missing binaries: {missing_binaries()}")
        if os.geteuid() != 0:
            raise SlurmClusterError("SlurmCluster runs its daemons as root")
        t1 = time.monotonic()
        try:
            for d in ("etc", "log", "munge", "mysql", "state", "spool", "run", "tmp"):
                (self.root / d).mkdir(parents=True, exist_ok=True)
            self._write_configs()
            self._start_munge()
            self._start_mariadb()
            self._start_slurmdbd()
            self._start_slurmctld()
            self._start_slurmd()
        except BaseException:
            self.stop()
            raise
        self.started = True
        self.timings["start"] = time.monotonic() - t1
        self.timings["total"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Cancel jobs, stop every daemon by PID, kill stray job processes, remove the dir."""
        with self._lock:
            if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
                with contextlib.suppress(Exception):
                    self.run(["scancel", "--full", "--user=root"], check=False, timeout=10)
                    deadline = time.monotonic() + 15
                    while time.monotonic() < deadline:
                        p = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10)
                        if p.returncode != 0 or not p.stdout.strip():
                            break
                        time.sleep(0.5)
            for name in reversed(list(self._procs)):
                self._terminate(self._procs.pop(name))
            self._kill_strays()
            self.started = False
            if self._own_root and os.environ.get(KEEP_ENV) != "1":
                shutil.rmtree(self.root, ignore_errors=True)

    # ---------------------------------------------------------------- internals

    def _write_configs(self) -> None:
        r = self.root
        auth = f"socket={self.munge_socket}"
        mem = max(_mem_total_mb() - 256, 256)
        conf = f"""\
ClusterName={self.cluster_name}
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={self.ports["slurmctld"]}
SlurmdPort={self.ports["slurmd"]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo={auth},cred_expire={self.cred_expire}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
MailProg=/bin/true
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS={r}/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.ports["slurmdbd"]}
AccountingStoragePass={self.munge_socket}
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
PreemptType=preempt/none
PreemptMode=OFF
JobRequeue=1
ReturnToService=2
MaxJobCount=10000
MinJobAge=10
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MessageTimeout=10
SlurmdParameters=config_overrides
NodeName={self.node_name} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={mem} State=UNKNOWN
PartitionName={self.partition} Nodes={self.node_name} Default=YES MaxTime=INFINITE \
OverSubscribe=NO State=UP
"""
        dbd = f"""\
AuthType=auth/munge
AuthInfo={auth}
DbdHost={self.hostname}
DbdAddr=127.0.0.1
DbdPort={self.ports["slurmdbd"]}
SlurmUser=root
DebugLevel=info
LogFile={r}/log/slurmdbd.log
PidFile={r}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.ports["mariadb"]}
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
"""
        self.conf_path.write_text(conf)
        self.dbd_conf_path.write_text(dbd)
        self.dbd_conf_path.chmod(0o600)  # slurmdbd refuses a readable one

    def _spawn(self, name: str, cmd: list[str], log: Path) -> subprocess.Popen:
        self._logs[name] = log
        out = open(self.log_dir / f"{name}.out", "ab")  # noqa: SIM115 - closed by the child
        try:
            p = subprocess.Popen(
                cmd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            out.close()
        self._procs[name] = p
        return p

    def _wait_for(self, name: str, ready, what: str, timeout: float | None = None) -> None:
        """Poll ready() until True; fail with the log tails if the daemon dies or time runs out."""
        timeout = timeout or self.startup_timeout
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise SlurmClusterError(
                    f"{name} exited with {proc.returncode} before {what}\n{self._tails_for(name)}"
                )
            try:
                if ready():
                    return
            except Exception as e:  # noqa: BLE001 - reported on timeout
                last = e
            time.sleep(0.25)
        raise SlurmClusterError(
            f"{name}: no {what} within {timeout} s (last error: {last!r})\n{self._tails_for(name)}"
        )

    def _tails_for(self, name: str) -> str:
        out = self.log_dir / f"{name}.out"
        extra = f"--- {name} stdout/stderr ---\n{_tail(out.read_text(errors='replace'))}"
        return self.log_tails() + "\n" + (extra if out.exists() else "")

    def _ok(self, args: Sequence[str], timeout: float = 10.0) -> bool:
        try:
            return self.run(args, check=False, timeout=timeout).returncode == 0
        except SlurmClusterError:
            return False

    def _start_munge(self) -> None:
        d = self.root / "munge"
        d.chmod(0o755)  # munged wants the socket's directory searchable by all
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        log = self.log_dir / "munged.log"
        log.touch(mode=0o600)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--log-file={log}",
                f"--pid-file={d / 'munged.pid'}",
                f"--seed-file={d / 'munged.seed'}",
            ],
            log,
        )

        def ready() -> bool:
            if not self.munge_socket.exists():
                return False
            cred = self.run(["munge", "-n", "-S", str(self.munge_socket)], timeout=5)
            self.run(["unmunge", "-S", str(self.munge_socket)], input=cred.stdout, timeout=5)
            return True

        self._wait_for("munged", ready, "munge round trip")

    def _mysql(self, sql: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        return self.run(
            ["mariadb", "--no-defaults", f"--socket={self.mysql_socket}", "-uroot", "-e", sql],
            timeout=timeout,
        )

    def _start_mariadb(self) -> None:
        d = self.root / "mysql"
        data = d / "data"
        log = self.log_dir / "mariadb.log"
        t0 = time.monotonic()
        self.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            timeout=self.startup_timeout,
        )
        self.timings["mariadb_install_db"] = time.monotonic() - t0
        self._spawn(
            "mariadbd",
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={self.mysql_socket}",
                f"--port={self.ports['mariadb']}",
                "--bind-address=127.0.0.1",
                "--user=root",
                f"--pid-file={d / 'mariadbd.pid'}",
                f"--log-error={log}",
                "--skip-name-resolve",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=64M",
                "--innodb-lock-wait-timeout=900",
            ],
            log,
        )
        self._wait_for("mariadbd", lambda: self._mysql("SELECT 1", timeout=5) and True, "SQL")
        # slurmdbd connects over TCP; the socket's root login works only for the OS root.
        self._mysql(
            "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';"
            "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
        )

    def _start_slurmdbd(self) -> None:
        self._spawn("slurmdbd", ["slurmdbd", "-D"], self.log_dir / "slurmdbd.log")
        self._wait_for(
            "slurmdbd", lambda: self._ok(["sacctmgr", "-n", "-P", "list", "cluster"]), "sacctmgr"
        )
        self.run(["sacctmgr", "-i", "add", "cluster", self.cluster_name])
        self.run(["sacctmgr", "-i", "add", "account", "birdjepa", f"Cluster={self.cluster_name}"])
        self.run(["sacctmgr", "-i", "add", "user", "root", "Account=birdjepa"], check=False)

    def _start_slurmctld(self) -> None:
        self._spawn(
            "slurmctld",
            ["slurmctld", "-D", "-c", "-f", str(self.conf_path)],
            self.log_dir / "slurmctld.log",
        )

        def ready() -> bool:
            p = self.run(["scontrol", "ping"], check=False, timeout=10)
            return "UP" in p.stdout

        self._wait_for("slurmctld", ready, "scontrol ping UP")

    def _start_slurmd(self) -> None:
        self._spawn(
            "slurmd",
            ["slurmd", "-D", "-N", self.node_name, "-f", str(self.conf_path)],
            self.log_dir / "slurmd.log",
        )

        def ready() -> bool:
            p = self.run(
                ["sinfo", "-h", "-N", "-n", self.node_name, "-o", "%T"], check=False, timeout=10
            )
            return p.stdout.strip() == "idle"

        self._wait_for("slurmd", ready, "idle node in sinfo")

    @staticmethod
    def _terminate(proc: subprocess.Popen, grace: float = 15.0) -> None:
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)

    def _stray_pids(self) -> list[int]:
        """Processes left by this cluster: those whose environment carries the marker of this
        cluster's directory (slurmstepd inherits it from slurmd), and all their descendants
        (job tasks submitted from an environment without it)."""
        marker = f"{MARKER_ENV}={self.root}".encode()
        me = os.getpid()
        parent: dict[int, int] = {}
        marked: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            pid = int(entry.name)
            try:
                stat = (entry / "stat").read_text()
                parent[pid] = int(stat.rsplit(")", 1)[1].split()[1])
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    marked.add(pid)
            except (OSError, ValueError, IndexError):
                continue
        found = set(marked)
        grew = True
        while grew:
            new = {p for p, pp in parent.items() if pp in found and p not in found and p != me}
            found |= new
            grew = bool(new)
        return sorted(found)

    def _kill_strays(self) -> None:
        """SIGKILL what _stray_pids finds, until nothing is left (bounded)."""
        for _ in range(5):
            found = self._stray_pids()
            if not found:
                return
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)


# -------------------------------------------------------------------- pytest fixture

_shared: SlurmCluster | None = None
_users = 0


def _acquire() -> SlurmCluster:
    global _shared, _users
    if _shared is None:
        cluster = SlurmCluster()
        atexit.register(cluster.stop)  # if the session dies before the fixture's teardown
        cluster.start()
        _shared = cluster
    _users += 1
    return _shared


def _release() -> None:
    global _shared, _users
    _users -= 1
    if _users <= 0 and _shared is not None:
        cluster, _shared = _shared, None
        cluster.stop()


def slurm_cluster_fixture(name: str = "slurm_cluster", scope: str = "session"):
    """Build a pytest fixture yielding the process-wide SlurmCluster (started on first use)."""

    @pytest.fixture(scope=scope, name=name)
    def _fixture() -> Iterator[SlurmCluster]:
        try:
            cluster = _acquire()
        except SlurmClusterError as e:
            pytest.fail(f"local Slurm cluster failed to start:\n{e}", pytrace=False)
        try:
            yield cluster
        finally:
            _release()

    return _fixture


slurm_cluster = slurm_cluster_fixture()


if __name__ == "__main__":
    # By hand: `python tests/slurm_cluster.py`, then in another shell `export SLURM_CONF=...`.
    with SlurmCluster() as _cluster:
        print(f"export SLURM_CONF={_cluster.conf_path}", flush=True)
        print(f"timings {_cluster.timings}; Ctrl-C to stop", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
