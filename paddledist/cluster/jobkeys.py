"""One generation of a job in etcd, followed by a watch: who registered, the plan, the verdict, who is done.

Keys under /paddledist/<job id>/g<generation>/: node/<address> (a hello, under that supervisor's lease), plan
(the machines of this launch, created once by transaction), verdict (why the job stops, created once), preempt,
done/<address>. `GenerationView` reads them once, then follows a watch from that revision (reopened on another
endpoint when a stream ends), so every supervisor sees the same keys in the same order. Decisions are keys
created by transaction: the first writer wins and every machine reads that value.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from typing import Callable, Optional

import requests

from paddledist.cluster.etcdlink import Store

_STREAM_IDLE_S = 20.0
"""A watch stream silent this long is reopened from the last revision (a member may be gone unseen)."""


def enc(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def dec(text: str) -> str:
    return base64.b64decode(text).decode()


def range_end(prefix: str) -> str:
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def create(store: Store, key: str, value: object, lease: int = 0) -> bool:
    """Put `key` only if it does not exist (one transaction); True when this call created it."""
    put = {"key": enc(key), "value": enc(json.dumps(value)), **({"lease": lease} if lease else {})}
    txn = {"compare": [{"key": enc(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
           "success": [{"request_put": put}], "failure": []}
    return bool(store.call(lambda c: c.post(c.get_url("/kv/txn"), json=txn)).get("succeeded"))


def put(store: Store, key: str, value: object, lease: int = 0) -> None:
    body = {"key": enc(key), "value": enc(json.dumps(value)), **({"lease": lease} if lease else {})}
    store.call(lambda c: c.post(c.get_url("/kv/put"), json=body))


def read_prefix(store: Store, prefix: str) -> tuple[int, dict[str, dict]]:
    """(revision, {key: {"value": decoded JSON, "lease": id}}) of every key under `prefix`."""
    body = {"key": enc(prefix), "range_end": enc(range_end(prefix))}
    answer = store.call(lambda c: c.post(c.get_url("/kv/range"), json=body))
    found = {dec(kv["key"]): {"value": _load(kv.get("value")), "lease": int(kv.get("lease", 0))}
             for kv in answer.get("kvs", [])}
    return int(answer["header"]["revision"]), found


def _load(value: Optional[str]) -> object:
    try:
        return json.loads(dec(value)) if value else None
    except ValueError:
        return None


def _open_stream(client, body: dict) -> requests.Response:
    """A watch stream on `client`; a connection failure in etcd3gw's terms, so the store tries the next member."""
    from etcd3gw import exceptions
    try:
        response = client.session.post(client.get_url("/watch"), json=body, stream=True, timeout=(5, _STREAM_IDLE_S))
    except requests.RequestException as e:
        raise exceptions.ConnectionFailedError(str(e)) from None
    if response.status_code != 200:
        response.close()
        raise exceptions.ConnectionFailedError(f"watch refused: HTTP {response.status_code}")
    return response


def _socket(response: Optional[requests.Response]):
    """The socket under a streaming response (urllib3's connection), or None."""
    connection = getattr(getattr(response, "raw", None), "connection", None)
    return getattr(connection, "sock", None)


class GenerationView:
    """What etcd holds for one generation, kept current by a watch thread; `wait(test, timeout)` for changes."""

    def __init__(self, store: Store, prefix: str, on_change: Optional[Callable[[], None]] = None) -> None:
        self.store, self.prefix, self.on_change = store, prefix, on_change
        self.nodes: dict[str, dict] = {}
        """address -> hello, for every registered supervisor whose key is still there."""
        self.hellos: dict[str, dict] = {}
        """address -> hello, for every supervisor that registered in this generation, its key gone or not."""
        self.leases: dict[str, int] = {}
        self.gone: list[str] = []
        """Addresses whose key was deleted (a lease expired or revoked), in the order etcd saw it."""
        self.plan: Optional[dict] = None
        self.verdict: Optional[dict] = None
        self.preempt: Optional[dict] = None
        self.done: set[str] = set()
        self.revision = 0
        self._changed = threading.Condition()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="paddledist-etcd-watch", daemon=True)
        self._response: Optional[requests.Response] = None

    def start(self) -> "GenerationView":
        revision, found = read_prefix(self.store, self.prefix)
        with self._changed:
            for key, kv in found.items():
                self._apply(key, kv["value"], kv["lease"], deleted=False)
            self.revision = revision
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop following at once: the stream's socket is shut (closing the response would wait for the
        watch thread's read to return, up to _STREAM_IDLE_S)."""
        self._closed.set()
        sock = _socket(self._response)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def wait(self, test: Callable[[], object], timeout_s: float) -> object:
        """`test()` (called with the view locked) once truthy, or its last value after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                value = test()
                left = deadline - time.monotonic()
                if value or left <= 0:
                    return value
                self._changed.wait(min(left, 0.5))

    def _follow(self) -> None:
        while not self._closed.is_set():
            try:
                self._stream()
            except Exception:  # noqa: BLE001 - a cut stream (or one closed under it) is reopened from its revision
                if self._closed.is_set():
                    return
            if not self._closed.is_set():
                time.sleep(0.2)

    def _stream(self) -> None:
        body = {"create_request": {"key": enc(self.prefix), "range_end": enc(range_end(self.prefix)),
                                   "start_revision": self.revision + 1}}
        response = self.store.call(lambda c: _open_stream(c, body))
        self._response = response
        with response:
            for line in response.iter_lines():
                if self._closed.is_set():
                    return
                if line:
                    self._events(json.loads(line).get("result", {}))

    def _events(self, result: dict) -> None:
        events = result.get("events", [])
        if not events:
            return
        with self._changed:
            for event in events:
                kv = event["kv"]
                deleted = event.get("type") == "DELETE"
                self._apply(dec(kv["key"]), None if deleted else _load(kv.get("value")), int(kv.get("lease", 0)),
                            deleted)
                self.revision = max(self.revision, int(kv.get("mod_revision", 0)))
            self._changed.notify_all()
        if self.on_change is not None:
            self.on_change()

    def _apply(self, key: str, value: object, lease: int, deleted: bool) -> None:
        name = key[len(self.prefix):]
        if name.startswith("node/"):
            address = name[len("node/"):]
            if deleted:
                if self.nodes.pop(address, None) is not None:
                    self.gone.append(address)
            elif isinstance(value, dict):
                self.nodes[address] = self.hellos[address] = value
                self.leases[address] = lease
        elif name.startswith("done/") and not deleted:
            self.done.add(name[len("done/"):])
        elif name in ("plan", "verdict", "preempt") and isinstance(value, dict):
            setattr(self, name, value)
