"""Plain-socket measurements between two namespace hosts, for benchmarks/bench_hosts.py (run inside a host with
`python -m paddledist.testing.sockbench ...`; no paddle):

    sink PORT / source HOST PORT SECONDS     one stream's Mbit/s
    echo PORT / ping HOST PORT               the median round trip of 1 byte, ms
    exchange (--listen PORT | --connect HOST PORT) --bytes N --rounds R
        both sides send and receive N bytes at once, R times (one step's gradient exchange per rank); prints
        this process's CPU and wall seconds per round (medians after the first) as JSON: the cost of the
        kernel's TCP alone, no all-reduce."""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from typing import Optional

_CHUNK = 1 << 20


def _listen(port: int) -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    print("ready", flush=True)
    conn, _ = server.accept()
    server.close()
    return conn


def sink(port: int) -> None:
    conn, received, started = _listen(port), 0, None
    while True:
        data = conn.recv(_CHUNK)
        if not data:
            break
        started = started or time.perf_counter()
        received += len(data)
    print(received * 8 / (time.perf_counter() - started) / 1e6, flush=True)


def source(host: str, port: int, seconds: float) -> None:
    conn, chunk = socket.create_connection((host, port)), b"x" * _CHUNK
    end = time.time() + seconds
    while time.time() < end:
        conn.sendall(chunk)
    conn.close()


def echo(port: int) -> None:
    conn = _listen(port)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(1):
        conn.sendall(data)


def ping(host: str, port: int, count: int = 200) -> None:
    conn = socket.create_connection((host, port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        conn.sendall(b"x")
        conn.recv(1)
        times.append(time.perf_counter() - started)
    conn.close()
    print(round(1000 * statistics.median(times), 3))


def exchange(conn: socket.socket, nbytes: int, rounds: int) -> dict:
    """Per round: send `nbytes` on a thread while receiving `nbytes`; (CPU, wall) medians after round one."""
    payload = memoryview(bytearray(nbytes))
    buffer = bytearray(_CHUNK)
    cpu, wall = [], []
    for _ in range(rounds):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        sender = threading.Thread(target=conn.sendall, args=(payload,))
        sender.start()
        left = nbytes
        while left:
            got = conn.recv_into(buffer, min(left, _CHUNK))
            if not got:
                raise SystemExit("the other host closed the exchange early")
            left -= got
        sender.join()
        cpu.append(time.process_time() - cpu0)
        wall.append(time.perf_counter() - wall0)
    return {"bytes": nbytes, "rounds": rounds, "cpu_s": round(statistics.median(cpu[1:] or cpu), 5),
            "wall_s": round(statistics.median(wall[1:] or wall), 5)}


def _exchange_main(args: argparse.Namespace) -> None:
    if args.listen is not None:
        conn = _listen(args.listen)
    else:
        conn = socket.create_connection((args.connect[0], int(args.connect[1])))
    print(json.dumps(exchange(conn, args.bytes, args.rounds)), flush=True)
    conn.close()


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("sink").add_argument("port", type=int)
    s = sub.add_parser("source")
    s.add_argument("host")
    s.add_argument("port", type=int)
    s.add_argument("seconds", type=float)
    sub.add_parser("echo").add_argument("port", type=int)
    g = sub.add_parser("ping")
    g.add_argument("host")
    g.add_argument("port", type=int)
    e = sub.add_parser("exchange")
    side = e.add_mutually_exclusive_group(required=True)
    side.add_argument("--listen", type=int)
    side.add_argument("--connect", nargs=2, metavar=("HOST", "PORT"))
    e.add_argument("--bytes", type=int, required=True)
    e.add_argument("--rounds", type=int, default=6)
    args = p.parse_args(argv)
    run = {"sink": lambda: sink(args.port), "source": lambda: source(args.host, args.port, args.seconds),
           "echo": lambda: echo(args.port), "ping": lambda: ping(args.host, args.port),
           "exchange": lambda: _exchange_main(args)}
    run[args.what]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
