"""A stranger on Train.port, for the tests of cluster/auth.py: connects to a job's hub during its preflight and
tries what an attacker would, then prints the hub's answer as one JSON line. Run inside a namespace host:

    python -m paddledist.testing.stranger --hub 10.78.0.1:6170 --claim 1 --try plain|wrong|replay|stop

plain: the job's hello without any secret; wrong: sealed with a wrong secret; replay: a hello sealed with the
right secret (--secret) for one connection's nonce (as a real node would have sent it), sent again on a new
connection; stop: a bare {"stop": ...} as if relayed by the hub. The hello is built by the real code from a
plan that names --nodes, so only the secret and the nonce make it wrong.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from typing import Optional

from paddledist.cluster.auth import introduce
from paddledist.cluster.plan import ClusterPlan
from paddledist.cluster.preflight import hello
from paddledist.cluster.wire import LineSocket
from paddledist.config import DeviceSpec


def _plan(args: argparse.Namespace) -> ClusterPlan:
    nodes = tuple(args.nodes.split(","))
    return ClusterPlan(nodes=nodes, node_rank=args.claim, ifname=None, device=DeviceSpec("cpu", (0,)),
                       port=int(args.hub.rsplit(":", 1)[1]), job_id=args.job_id, peer_timeout=30, source="stranger",
                       names=nodes)


def _connect(hub: str, source: Optional[str], wait_s: float = 60.0) -> LineSocket:
    """A connection to the hub, retried until it listens (its preflight may not have started yet)."""
    host, port = hub.rsplit(":", 1)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return LineSocket(socket.create_connection((host, int(port)), timeout=10,
                                                       source_address=(source, 0) if source else None))
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _sealed(greet: dict, message: dict, secret: bytes) -> dict:
    return introduce(greet, message, secret, "the hub")[0]


def attempt(args: argparse.Namespace) -> Optional[dict]:
    """One try; the hub's answer (None when it said nothing and closed)."""
    mine = hello(_plan(args)).to_wire()
    link = _connect(args.hub, args.source)
    greet = link.read(timeout=10)
    if args.attack == "plain":
        first = mine
    elif args.attack == "wrong":
        first = _sealed(greet, mine, b"not-the-job-secret-at-all")
    elif args.attack == "stop":
        first = {"stop": "rank 0 failed with exit code 1", "node": args.claim}
    else:  # replay: what a real node sealed for another connection's nonce
        recorded = _sealed(greet, mine, args.secret.encode())
        link.close()
        link = _connect(args.hub, args.source)
        link.read(timeout=10)
        first = recorded
    link.send(first)
    answer = link.read(timeout=10)
    link.close()
    return answer


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hub", required=True, help="host:port of node 0's Train.port")
    p.add_argument("--nodes", required=True, help="the job's machine list, as in Train.dist_ips")
    p.add_argument("--claim", type=int, default=1, help="the node this stranger claims to be")
    p.add_argument("--job-id", default="paddledist")
    p.add_argument("--try", dest="attack", choices=("plain", "wrong", "replay", "stop"), required=True)
    p.add_argument("--source", help="the address to connect from (default: the kernel's choice)")
    p.add_argument("--secret", default="", help="replay: the secret a real node sealed the recorded hello with")
    args = p.parse_args(argv)
    print(json.dumps({"answer": attempt(args)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
