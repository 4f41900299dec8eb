"""The open files a supervisor needs: node 0 holds one connection per machine (preflight, heartbeats), and the
usual soft limit of 1024 would make its accept fail with EMFILE past about a thousand machines. The soft limit
is raised at start, up to the hard limit, which only the administrator can raise."""

from __future__ import annotations

import resource

from paddledist.errors import UserError

SPARE = 256
"""Descriptors beside the connections: paddle's launcher pipes, log files, the selector, libraries' own."""


def needed_by(nnodes: int, node_rank: int) -> int:
    """Open files this node's supervisor needs: node 0 one per other machine, the others one."""
    return SPARE + (nnodes if node_rank == 0 else 1)


def ensure_open_files(needed: int, who: str) -> None:
    """Raise this process's soft open-file limit to `needed`; UserError when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise UserError(f"{who} needs {needed} open files (one connection per machine), but the hard limit here "
                        f"is {hard}: raise it (ulimit -Hn {needed} as root, LimitNOFILE={needed} for a systemd "
                        f"service, docker run --ulimit nofile={needed}) or run on fewer machines")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
