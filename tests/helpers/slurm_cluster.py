"""A real Slurm cluster on network-namespace hosts, for tests: Debian's slurm-wlm and munge (installed with
apt-get when missing, as root, once per machine), a private munged, slurmctld and node01's slurmd on
namespace host 0, node02's slurmd on host 1 (one slurmd per host, each in its own network namespace).
Host names resolve through /etc/netns/<namespace>/hosts, which `ip netns exec` binds over /etc/hosts.
Everything lives in a short folder under /tmp (Unix socket paths, such as slurmstepd's
spool/node01/node01_1.4294967291, must fit in 108 bytes; pytest-xdist's tmp_path is too deep for that) and is
stopped and removed afterwards.

    cluster = slurm_cluster(2)            # fixture: skips with the reason where Slurm cannot be installed
    cluster.client(["srun", "-N2", "hostname"])   # a client command, run on host 0 with SLURM_CONF set
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

import pytest

from helpers.common import unavailable
from helpers.netns import NetnsHosts, NetnsUnavailable

PROGRAMS = ("slurmctld", "slurmd", "srun", "sbatch", "sinfo", "squeue", "scancel", "scontrol", "munged")
PACKAGES = ("slurm-wlm", "munge")
APT_LOCK = "/tmp/paddledist-apt-install.lock"
"""Tests running side by side install once: the second waits for the first (apt's own lock would fail it)."""


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None and not os.path.exists(f"/usr/sbin/{p}")]


def ensure_slurm() -> Optional[str]:
    """Install slurm-wlm and munge with apt-get if any program is missing; the reason it cannot, or None."""
    if not missing_programs():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"Slurm is not installed ({', '.join(missing_programs())} missing) and apt-get as root is unavailable"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    with open(APT_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not missing_programs():
            return None
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:  # a fresh machine's package lists may be empty or stale
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
            done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr.strip().splitlines()[-1:]}"
    return None


@contextlib.contextmanager
def hosts_files(hosts: NetnsHosts, names: Mapping[str, str]) -> Iterator[None]:
    """Each namespace host's own /etc/hosts (`name -> address`), as DNS would answer on a real cluster."""
    table = "127.0.0.1 localhost\n" + "".join(f"{addr} {name}\n" for name, addr in names.items())
    folders = [Path("/etc/netns") / ns for ns in hosts.namespaces]
    try:
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text(table)
        yield
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


SOCKET_PATH_MAX = 107
"""sun_path holds 108 bytes with the terminating NUL."""
STEPD_SOCKET = "spool/node00/node00_99999.4294967291"
"""The longest socket a test's job makes: slurmstepd's for a batch step (step id 0xfffffffb)."""


SLURM_CONF = """\
ClusterName={cluster}
SlurmctldHost={hostname}({ctl})
MailProg=/bin/true
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also holds a requeued job back (120 s by default)
AuthInfo=socket={root}/munge.sock,cred_expire=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.%n.log
# A container: no cgroups, no accounting, no MPI plugin, no prolog
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/builtin
# the main scheduler looks for startable jobs every second (default 60 s), e.g. a requeued one
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
KillWait=10
InactiveLimit=0
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class SlurmCluster:
    def __init__(self, hosts: NetnsHosts, root: Path) -> None:
        self.hosts, self.root = hosts, root
        self.nodes = tuple(f"node{i + 1:02d}" for i in range(hosts.count))
        self.conf = root / "slurm.conf"
        self._munged: Optional[subprocess.Popen] = None
        self._procs: list[subprocess.Popen] = []
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def start(self) -> "SlurmCluster":
        if len(str(self.root / STEPD_SOCKET)) > SOCKET_PATH_MAX:
            raise RuntimeError(f"{self.root} is too deep for slurmstepd's Unix sockets ({SOCKET_PATH_MAX} bytes)")
        for folder in ("state", "spool"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        nodes = "\n".join(f"NodeName={n} NodeAddr={a} CPUs=2 RealMemory=1000 State=UNKNOWN"
                          for n, a in zip(self.nodes, self.hosts.addresses))
        # slurmctld only runs where the host name is SlurmctldHost's (all namespace hosts share this machine's)
        self.conf.write_text(SLURM_CONF.format(cluster=self.hosts.tag, hostname=socket.gethostname(),
                                               ctl=self.hosts.addresses[0], root=self.root, nodes=nodes))
        self._start_munged()
        self._daemon(0, ["slurmctld", "-D", "-i"], "slurmctld.out")
        for i, node in enumerate(self.nodes):
            (self.root / "spool" / node).mkdir(exist_ok=True)
            self._daemon(i, ["slurmd", "-D", "-N", node], f"slurmd.{node}.out")
        self._wait_idle()
        return self

    def _start_munged(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        argv = ["munged", "-F", "--force", f"--socket={self.root}/munge.sock", f"--key-file={key}",
                f"--pid-file={self.root}/munged.pid", f"--log-file={self.root}/munged.log",
                f"--seed-file={self.root}/munged.seed"]
        self._munged = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        _wait_for(lambda: (self.root / "munge.sock").exists(), 20, lambda: f"munged did not start: {self.logs()}")

    def _daemon(self, host: int, argv: Sequence[str], log: str) -> None:
        """A daemon in host `host`'s network namespace. Not through `ip netns exec`: that remounts /sys without
        the cgroup file systems, and slurmd refuses to start without them. A private mount namespace instead
        binds the host's hosts file over /etc/hosts for the daemon and the jobs it starts."""
        ns = self.hosts.namespaces[host]
        wrapped = ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--propagation", "private", "sh",
                   "-c", f'mount --bind /etc/netns/{ns}/hosts /etc/hosts && exec "$@"', "sh", *argv]
        out = open(self.root / log, "w")
        self._procs.append(subprocess.Popen(wrapped, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True))

    def client(self, argv: Sequence[str], timeout: float = 120, host: int = 0, cwd: Optional[str] = None,
               env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
        """A Slurm command (srun, sbatch, sinfo...) on namespace host `host`, talking to this cluster."""
        return self.hosts.run(host, argv, timeout=timeout, env={**self.env, **(env or {})}, cwd=cwd)

    def _wait_idle(self, timeout: float = 60) -> None:
        def idle() -> bool:
            done = self.client(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=20)
            states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            return done.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes)
        _wait_for(idle, timeout, lambda: f"nodes did not become idle: {self.logs()}")

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def daemons(self) -> list[subprocess.Popen]:
        return self._procs + [self._munged] * bool(self._munged)

    def close(self) -> None:
        """Daemons first (each in its own process group), then the namespaces and whatever still runs in them."""
        for proc in self.daemons():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.hosts.close()
        for proc in self.daemons():
            proc.wait(timeout=10)


def _wait_for(ready, timeout: float, message) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(message())
        time.sleep(0.5)


@pytest.fixture
def slurm_cluster():
    """`slurm_cluster(n) -> SlurmCluster`: n namespace hosts running Slurm (node01..), with hosts files naming
    them; all stopped and removed after the test. Skips only where Slurm or namespaces cannot be had."""
    made: list[tuple[SlurmCluster, contextlib.ExitStack]] = []

    def make(count: int) -> SlurmCluster:
        reason = ensure_slurm()
        if reason:
            unavailable(reason)
        try:
            hosts = NetnsHosts(count).__enter__()
        except NetnsUnavailable as e:
            unavailable(str(e))
        stack = contextlib.ExitStack()
        root = Path(tempfile.mkdtemp(prefix="pd-slurm-", dir="/tmp"))
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        cluster = SlurmCluster(hosts, root)
        made.append((cluster, stack))
        stack.enter_context(hosts_files(hosts, dict(zip(cluster.nodes, hosts.addresses))))
        return cluster.start()

    yield make
    for cluster, stack in made:
        cluster.close()
        stack.close()
