"""JSON lines over one TCP connection, with the connection's own read buffer, so the same socket can serve
the preflight exchange (blocking, with timeouts) and then the heartbeat loop (non-blocking, select). With a
job secret, a `seal` (cluster/auth.py) wraps every message going out and checks every message coming in; a
message that fails closes the connection's reading (`broken` says why)."""

from __future__ import annotations

import errno
import json
import select
import socket
import time
from typing import Optional

MAX_LINE = 256 * 1024
"""A peer that sends a longer line is not one of ours."""
QUEUE_LIMIT = 64 * 1024
"""Bytes queued for one peer that is not reading: beyond them its messages are dropped, and its silence or
closing is judged as for any other peer, so a slow peer costs its own queue, never the hub's time."""


class LineSocket:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._in = b""
        self.out = b""
        """Bytes queued for sending in non-blocking mode (see flush)."""
        self.seal = None
        """The connection's auth.Seal once a job secret authenticated it, else None (plain JSON lines)."""
        self.broken: Optional[str] = None
        """Why this connection is no longer believed (a message failed the job secret's check), else None."""

    def send(self, message: dict, timeout: float = 5.0) -> None:
        """Blocking send of one message; raises OSError."""
        self.sock.settimeout(timeout)
        self.sock.sendall(self.encode(message))

    def read(self, timeout: float) -> Optional[dict]:
        """The next message, or None on timeout, a closed connection, or something that is not ours."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._in:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or len(self._in) > MAX_LINE:
                return None
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return None
            if not chunk:
                return None
            self._in += chunk
        line, self._in = self._in.split(b"\n", 1)
        return self.decode(line)

    def receive_ready(self) -> tuple[list[dict], bool]:
        """After select says readable (non-blocking socket): the complete messages, and whether it closed."""
        try:
            chunk = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return [], False
        except OSError:
            return [], True
        if not chunk:
            return [], True
        self._in += chunk
        *lines, self._in = self._in.split(b"\n")
        messages = []
        for line in lines:
            message = self.decode(line)
            if self.broken:
                return messages, True
            if message is not None:
                messages.append(message)
        return messages, len(self._in) > MAX_LINE

    def receive_one(self) -> tuple[Optional[dict], bool]:
        """Non-blocking: the first message once complete (the rest stays buffered for `read`), reading all that
        has arrived; and whether to give up on this connection (closed, or not one of ours)."""
        while b"\n" not in self._in and len(self._in) <= MAX_LINE:
            try:
                chunk = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return None, False
            except OSError:
                return None, True
            if not chunk:
                return None, True
            self._in += chunk
        if b"\n" not in self._in:
            return None, True  # longer than any line of ours
        line, self._in = self._in.split(b"\n", 1)
        message = self.decode(line)
        return message, message is None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet read as messages."""
        return len(self._in)

    def queue(self, message: dict, limit: int = QUEUE_LIMIT) -> None:
        """Queue for `flush`; a peer that stopped reading gets no more than `limit` bytes queued."""
        self.queue_line(self.encode(message), limit)

    def queue_line(self, line: bytes, limit: int = QUEUE_LIMIT) -> None:
        """`queue` for a message encoded once for many links (a relay to every node); unsealed links only."""
        if len(self.out) < limit:
            self.out += line

    def flush(self) -> bool:
        """Send what the kernel takes now (non-blocking); False when the connection is broken."""
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            self.out = self.out[sent:]
        return True

    def encode(self, message: dict) -> bytes:
        return encode(self.seal.wrap(message) if self.seal else message)

    def decode(self, line: bytes) -> Optional[dict]:
        """One line's message (None if not JSON); on a sealed connection, None and `broken` if it fails."""
        message = decode(line)
        if self.seal is None or message is None:
            return message
        opened = self.seal.unwrap(message)
        if opened is None:
            self.broken = "a message on its connection failed the job secret's check"
        return opened

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def close_gracefully(links: list[LineSocket], wait_s: float) -> None:
    """Close `links` without losing what was last sent: closing a socket with unread bytes (a peer's
    heartbeat) sends a reset, which makes the peer's kernel drop our last message (a stop) unread. So: end
    the sending side, discard what arrives until each peer closes too or `wait_s` passes, then close."""
    open_ = []
    for link in links:
        try:
            link.sock.shutdown(socket.SHUT_WR)
            link.sock.setblocking(False)
            open_.append(link)
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    while open_ and time.monotonic() < deadline:
        readable, _, _ = select.select([link.sock for link in open_], [], [], deadline - time.monotonic())
        for link in [link for link in open_ if link.sock in readable]:
            try:
                if link.sock.recv(65536):
                    continue
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                pass
            open_.remove(link)
    for link in links:
        link.close()


def connect_from(source: str, target: tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection to `target` sent from this machine's address `source` (the hub checks where a node's
    connection comes from); from the kernel's choice when `source` is not an address here (behind a NAT)."""
    try:
        return socket.create_connection(target, timeout=timeout, source_address=(source, 0))
    except OSError as e:
        if e.errno != errno.EADDRNOTAVAIL:
            raise
    return socket.create_connection(target, timeout=timeout)


class Waker:
    """A socket pair through which another thread wakes one sleeping on a selector (`receiving` is registered)."""

    def __init__(self) -> None:
        self.receiving, self._sending = socket.socketpair()
        self.receiving.setblocking(False)
        self._sending.setblocking(False)

    def wake(self) -> None:
        try:
            self._sending.send(b"x")
        except OSError:  # its buffer is full: a wake-up is already pending
            pass

    def drain(self) -> None:
        try:
            self.receiving.recv(4096)
        except OSError:
            pass

    def close(self) -> None:
        self.receiving.close()
        self._sending.close()


def encode(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def decode(line: bytes) -> Optional[dict]:
    try:
        message = json.loads(line.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    return message if isinstance(message, dict) else None
