"""Is a TCP port free here, and if not, which process holds it (psutil: the sockets of this network namespace
and the processes whose file descriptors hold them). Processes of other users or of another pid namespace stay
invisible; the message then says so.
"""

from __future__ import annotations

import errno
import socket
from typing import Optional

import psutil


def bind_error(port: int, host: str = "") -> Optional[OSError]:
    """Why this machine cannot listen on `port` (at `host`, all addresses by default), or None when it can."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        return None
    except OSError as e:
        return e
    finally:
        sock.close()


def holders(port: int, host: str = "") -> list[tuple[int, str]]:
    """(pid, command line) of every visible process with a socket on local `port` (at `host` or all addresses,
    when given; TIME_WAIT sockets belong to no process and never block a bind)."""
    pids = {c.pid for c in psutil.net_connections(kind="tcp")
            if c.laddr and c.laddr.port == port and c.pid and c.status != psutil.CONN_TIME_WAIT
            and (not host or c.laddr.ip in (host, "0.0.0.0", "::"))}
    return sorted((pid, command_line(pid)) for pid in pids)


def command_line(pid: int) -> str:
    try:
        text = " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return "?"
    return text if len(text) <= 160 else text[:157] + "..."


def describe_holders(port: int, host: str = "") -> str:
    """`pid 123 (python -m http.server 6170)`, or why no holder is named."""
    found = holders(port, host)
    if not found:
        return "held by a process this user cannot see (another user or container)"
    return "held by " + ", ".join(f"pid {pid} ({cmd})" for pid, cmd in found)


def in_use(port: int, what: str, where: str, host: str = "") -> Optional[str]:
    """The one-line refusal when this machine cannot listen on `port` (`what` it is for, `where` names the
    machine), or None when it can."""
    error = bind_error(port, host)
    if error is not None and error.errno == errno.EADDRNOTAVAIL:  # not an address of this machine: any
        host, error = "", bind_error(port)
    if error is None:
        return None
    held = describe_holders(port, host) if error.errno == errno.EADDRINUSE else error.strerror
    return (f"port {port} ({what}) on {where} is in use, {held}; stop that process or choose another "
            "-o Train.port=... (the same on every machine)")
