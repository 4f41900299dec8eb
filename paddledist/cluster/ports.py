"""Is a TCP port free here, and if not, which process holds it (Linux /proc; no external tools).

/proc/net/tcp and /proc/net/tcp6 list every socket of this network namespace with its local port and
inode; /proc/<pid>/fd/* links to `socket:[inode]` name the process. Processes of other users or of
another pid namespace stay invisible; the message then says so.
"""

from __future__ import annotations

import os
import socket
from typing import Iterable, Optional

_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_TIME_WAIT = "06"


def bind_error(port: int) -> Optional[OSError]:
    """Why this machine cannot listen on `port` (all addresses, as the job will), or None when it can."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))
        return None
    except OSError as e:
        return e
    finally:
        sock.close()


def socket_inodes(port: int, tables: Iterable[str] = _TCP_TABLES) -> set[int]:
    """Inodes of the sockets bound to local `port` (TIME_WAIT entries have none and never block a bind)."""
    found = set()
    for table in tables:
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            if len(fields) < 10 or fields[3] == _TIME_WAIT:
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[9] != "0":
                found.add(int(fields[9]))
    return found


def holders(port: int, proc: str = "/proc") -> list[tuple[int, str]]:
    """(pid, command line) of every visible process with a socket on local `port`."""
    inodes = {f"socket:[{inode}]" for inode in socket_inodes(port)}
    found = []
    for entry in os.listdir(proc) if inodes else ():
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            links = {os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir)}
        except OSError:  # gone, or not ours to look at
            continue
        if links & inodes:
            found.append((int(entry), command_line(int(entry), proc)))
    return sorted(found)


def command_line(pid: int, proc: str = "/proc") -> str:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            parts = f.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(p.decode(errors="replace") for p in parts if p)
    return text if len(text) <= 160 else text[:157] + "..."


def describe_holders(port: int) -> str:
    """`pid 123 (python -m http.server 6170)`, or why no holder is named."""
    found = holders(port)
    if not found:
        return "held by a process this user cannot see (another user or container)"
    return "held by " + ", ".join(f"pid {pid} ({cmd})" for pid, cmd in found)
