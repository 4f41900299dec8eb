"""The job's etcd as one client: endpoints from `etcd://H1:P1,H2:P2`, credentials the way etcdctl reads them.

etcd3gw speaks etcd's HTTP gateway with only `requests` (no gRPC or protobuf beside paddle's own); a call that
cannot reach one endpoint is tried on the next, and a job user's token is fetched again when etcd forgets it.
Errors become one line naming the endpoints, never a password.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import requests

from paddledist.errors import UserError

SCHEME = "etcd://"
_CALL_TIMEOUT_S = 5.0


class EtcdUnavailable(Exception):
    """No endpoint answered; the message names them."""


@dataclass(frozen=True)
class Credentials:
    """etcdctl's variables: ETCDCTL_USER (`name` or `name:password`), ETCDCTL_PASSWORD, ETCDCTL_CACERT/CERT/KEY."""

    user: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    cacert: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "Credentials":
        user, password = env.get("ETCDCTL_USER") or None, env.get("ETCDCTL_PASSWORD") or None
        if user and ":" in user and password is None:
            user, password = user.split(":", 1)
        return cls(user, password, env.get("ETCDCTL_CACERT") or None, env.get("ETCDCTL_CERT") or None,
                   env.get("ETCDCTL_KEY") or None)

    @property
    def scheme(self) -> str:
        return "https" if self.cacert or self.cert else "http"


def parse_endpoints(text: str, key: str = "Train.dist_master") -> tuple[str, ...]:
    """`etcd://h1:2379,h2:2379` -> ("h1:2379", "h2:2379"); a one-line UserError for anything else."""
    if not text.startswith(SCHEME):
        raise UserError(f"{key}={text}: an etcd cluster is written etcd://HOST:PORT[,HOST:PORT...]")
    found = tuple(part.strip() for part in text[len(SCHEME):].split(",") if part.strip())
    for endpoint in found:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UserError(f"{key}={text}: {endpoint!r} is not HOST:PORT; e.g. etcd://10.0.0.5:2379")
    if not found:
        raise UserError(f"{key}={text}: no endpoint; e.g. etcd://10.0.0.5:2379")
    return found


class Store:
    """etcd3gw clients for `endpoints`, used one at a time; `call(fn)` runs fn(client) with fail-over."""

    def __init__(self, endpoints: tuple[str, ...], creds: Credentials = Credentials(),
                 timeout_s: float = _CALL_TIMEOUT_S) -> None:
        import etcd3gw  # a dependency of the package; imported here so the module loads fast
        self.endpoints, self.creds, self._current = endpoints, creds, 0
        self._clients = [self._client(etcd3gw, e, timeout_s) for e in endpoints]

    def _client(self, etcd3gw, endpoint: str, timeout_s: float):
        host, _, port = endpoint.rpartition(":")
        session = requests.Session()
        session.trust_env = False  # a proxy from the environment must never carry the job's control traffic
        return etcd3gw.Etcd3Client(host=host.strip("[]"), port=int(port), protocol=self.creds.scheme,
                                   ca_cert=self.creds.cacert, cert_cert=self.creds.cert, cert_key=self.creds.key,
                                   timeout=timeout_s, session=session)

    def shown(self) -> str:
        return SCHEME + ",".join(self.endpoints)

    def call(self, fn: Callable):
        """fn(client) on the current endpoint, else the next ones; EtcdUnavailable when none answers."""
        from etcd3gw import exceptions
        last = ""
        for _ in range(len(self._clients)):
            client = self._clients[self._current]
            try:
                return fn(client)
            except (exceptions.ConnectionFailedError, exceptions.ConnectionTimeoutError) as e:
                last = _short(e)
            except exceptions.Etcd3Exception as e:
                if not self.creds.user or not any(m in str(e.detail_text) for m in _RELOGIN):
                    raise
                self._login(client)
                return fn(client)
            self._current = (self._current + 1) % len(self._clients)
        raise EtcdUnavailable(f"no etcd endpoint of {self.shown()} answers ({last})")

    def login(self) -> None:
        """Authenticate every client as ETCDCTL_USER (nothing to do without a user); EtcdUnavailable if none
        could be (a member that is down gets its token when it is used)."""
        if not self.creds.user:
            return
        last = None
        for client in self._clients:
            try:
                self._login(client)
            except EtcdUnavailable as e:
                last = e
        if all("Authorization" not in c.session.headers for c in self._clients):
            raise last

    def _login(self, client) -> None:
        from etcd3gw import exceptions
        client.session.headers.pop("Authorization", None)
        try:
            answer = client.post(client.get_url("/auth/authenticate"),
                                 json={"name": self.creds.user, "password": self.creds.password or ""})
        except (exceptions.ConnectionFailedError, exceptions.ConnectionTimeoutError) as e:
            raise EtcdUnavailable(f"{client.host}:{client.port}: {_short(e)}") from None
        except exceptions.Etcd3Exception as e:
            said = _message(e) or "no answer"
            if "authentication is not enabled" in said or not any(w in said for w in _REFUSALS):
                # the job's own etcd before it is secured, or a member without its quorum: not ready yet
                raise EtcdUnavailable(f"{client.host}:{client.port}: {said}") from None
            raise UserError(f"etcd {self.shown()} refused user {self.creds.user!r}: {said}; check "
                            "ETCDCTL_USER and ETCDCTL_PASSWORD") from None
        client.session.headers["Authorization"] = answer["token"]

    def wait_ready(self, timeout_s: float, what: str, key: str) -> None:
        """Return once an endpoint answers a read of `key` (one the job may read) with the credentials taken;
        UserError naming them after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.login()
                self.call(lambda c: c.get(key))
                return
            except EtcdUnavailable as e:
                if time.monotonic() >= deadline:
                    raise UserError(f"{what}: {e} after {timeout_s:g}s; start it, check the address and the "
                                    "network, or raise Train.peer_timeout") from None
            except etcd_errors() as e:
                if any(word in _message(e) for word in _REFUSALS):
                    raise UserError(f"etcd {self.shown()} refused this job: {_message(e)}; check ETCDCTL_USER and "
                                    "ETCDCTL_PASSWORD (or the job secret)") from None
                if time.monotonic() >= deadline:  # no leader, timed out: a member cut off from its quorum
                    raise UserError(f"{what}: {_message(e)} after {timeout_s:g}s") from None
            time.sleep(0.3)


_REFUSALS = ("permission denied", "authentication", "user name is empty", "invalid auth token")
"""etcd's answers that refuse these credentials (any other error is a cluster not ready yet)."""
_RELOGIN = ("invalid auth token", "user name is empty")
"""Answers that mean this client's token is stale or missing (auth came on after it connected)."""


def etcd_errors():
    """etcd's own error answers (etcd3gw's exception class: the module loads without importing it)."""
    from etcd3gw import exceptions
    return exceptions.Etcd3Exception


def _message(e: Exception) -> str:
    import json
    detail = getattr(e, "detail_text", None) or str(e)
    try:
        return json.loads(detail).get("message", detail)
    except (ValueError, AttributeError):
        return str(detail)[:200]


def _short(e: Exception) -> str:
    text = str(e)
    return text if len(text) <= 160 else text[:157] + "..."
