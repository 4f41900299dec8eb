"""Network-namespace "hosts" for multi-host tests and benchmarks: N namespaces with lo up and
eth0 = 10.78.<x>.<i+1>/24 on a private bridge (veth pairs). Names are unique per use, so parallel or
leftover runs never clash, and everything (processes, namespaces, bridge) is removed on exit. Needs root
and `ip netns`; otherwise the test fixture (tests/helpers/netns.py) skips with the reason.

    with NetnsHosts(3) as hosts:
        hosts.run(0, ["ip", "-j", "addr"])      # in host 0
        hosts.addresses                          # ("10.78.x.1", "10.78.x.2", "10.78.x.3")
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from typing import Mapping, Optional, Sequence


class NetnsUnavailable(RuntimeError):
    """This machine cannot create network namespaces (not root, no iproute2, no permission)."""


class NetnsHosts:
    def __init__(self, count: int) -> None:
        self.count = count
        self.tag = "pd" + secrets.token_hex(3)  # interface names must stay under 16 characters
        self.subnet = f"10.78.{secrets.randbelow(250) + 1}"
        self.bridge = f"{self.tag}br"
        self.namespaces = tuple(f"{self.tag}n{i}" for i in range(count))
        self.addresses = tuple(f"{self.subnet}.{i + 1}" for i in range(count))
        self._created: list[tuple[str, str]] = []
        self._procs: list[subprocess.Popen] = []

    def __enter__(self) -> "NetnsHosts":
        _check_available()
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._created.append(("link", self.bridge))
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            _ip("netns", "add", ns)
            self._created.append(("netns", ns))
            outside, inside = f"{self.tag}h{i}", f"{self.tag}e{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self._created.append(("link", outside))
            _ip("link", "set", outside, "master", self.bridge, "up")
            _ip("link", "set", inside, "netns", ns)
            _ip("-n", ns, "link", "set", inside, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def hosts_file(self, host: int, entries: Mapping[str, str]) -> None:
        """Give host `host` its own /etc/hosts ({name: address}): `ip netns exec` bind-mounts
        /etc/netns/<namespace>/hosts over /etc/hosts for what runs there, so names resolve per host."""
        folder = os.path.join("/etc/netns", self.namespaces[host])
        os.makedirs(folder, exist_ok=True)
        self._created.insert(0, ("dir", folder))  # removed last, after the namespace's processes
        lines = ["127.0.0.1 localhost"] + [f"{address} {name}" for name, address in entries.items()]
        with open(os.path.join(folder, "hosts"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def run(self, host: int, argv: Sequence[str], timeout: float = 60, env: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(host, argv), capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else dict(env), cwd=cwd)

    def popen(self, host: int, argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
              cwd: Optional[str] = None, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(self.command(host, argv), env=None if env is None else dict(env), cwd=cwd,
                                start_new_session=True, **kwargs)
        self._procs.append(proc)
        return proc

    def close(self) -> None:
        """End every process started here or still running inside the namespaces, then remove them all."""
        for proc in self._procs:
            _kill_group(proc.pid)
        for kind, name in reversed(self._created):
            if kind == "dir":
                shutil.rmtree(name, ignore_errors=True)
            elif kind == "netns":
                _kill_namespace_processes(name)
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
            else:
                subprocess.run(["ip", "link", "del", name], capture_output=True)
        for proc in self._procs:
            proc.wait(timeout=10)
        self._created.clear()


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def _check_available() -> None:
    if os.geteuid() != 0:
        raise NetnsUnavailable("network-namespace hosts need root")
    if shutil.which("ip") is None:
        raise NetnsUnavailable("network-namespace hosts need iproute2's `ip`")
    probe = f"pd{secrets.token_hex(3)}probe"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if done.returncode != 0:
        raise NetnsUnavailable(f"`ip netns add` is not permitted here: {done.stderr.strip()}")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_namespace_processes(ns: str) -> None:
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    for pid in done.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
