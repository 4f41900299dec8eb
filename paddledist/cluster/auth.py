"""Who may talk to a job on Train.port: the hub's checks of a joining connection, and the job secret.

Without a secret, the hub accepts a connection as node k only when it comes from node k's listed address (or
one its host name resolves to); a joining node sends from its own listed address to make that so. With a job
secret (PADDLEDIST_JOB_SECRET, or the file Train.job_secret_file readable by its owner only), the hub opens
every connection with a fresh nonce; the joining node answers with its own nonce and its hello sealed under a
key both derive from the secret and the two nonces (HMAC-SHA256), and every later message in either direction
carries a sequence number and a MAC under that key. A stranger without the secret, with a wrong one, or
replaying a recorded hello (sealed for another nonce) is refused and named on the hub; the job goes on.
Paddle's own TCP store and collectives are not covered (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import socket
import stat
from typing import Mapping, Optional

from paddledist.errors import UserError

SECRET_ENV = "PADDLEDIST_JOB_SECRET"
MIN_SECRET = 16
"""Characters a job secret needs at least (a generated one has 64)."""
_MAX_SECRET_FILE = 4096
HINT = (f"paddledist: the control connections on Train.port are not authenticated; to refuse strangers set "
        f"{SECRET_ENV} to the same value on every machine (or Train.job_secret_file), see docs/security.md")


def job_secret(secret_file: Optional[str], env: Mapping[str, str] = os.environ) -> Optional[bytes]:
    """The job's secret: Train.job_secret_file's contents when given, else PADDLEDIST_JOB_SECRET, else None."""
    if secret_file:
        return _checked(_read_secret_file(secret_file), f"Train.job_secret_file {secret_file}")
    value = env.get(SECRET_ENV)
    return _checked(value.encode(), SECRET_ENV) if value else None


def _read_secret_file(path: str) -> bytes:
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"Train.job_secret_file {path} is not a regular file")
        if info.st_mode & 0o077:
            raise UserError(f"Train.job_secret_file {path} can be read by others (mode {info.st_mode & 0o777:o}); "
                            f"run chmod 600 {path}")
        with open(path, "rb") as f:
            return f.read(_MAX_SECRET_FILE + 1)
    except OSError as e:
        raise UserError(f"Train.job_secret_file {path} cannot be read ({e.strerror})") from None


def _checked(value: bytes, what: str) -> bytes:
    value = value.strip()
    if len(value) > _MAX_SECRET_FILE:
        raise UserError(f"{what} holds more than {_MAX_SECRET_FILE} bytes; a job secret is one line")
    if len(value) < MIN_SECRET:
        raise UserError(f"{what} is shorter than {MIN_SECRET} characters; generate one with "
                        "python -c \"import secrets; print(secrets.token_hex(32))\"")
    return value


def new_secret() -> str:
    return secrets.token_hex(32)


class Seal:
    """One connection's message authentication: a key from the secret and both nonces, a sequence number per
    direction (a message dropped, repeated or reordered fails), and a label per direction (a message
    reflected back fails)."""

    def __init__(self, secret: bytes, hub_nonce: str, node_nonce: str, is_hub: bool) -> None:
        self.key = hmac.new(secret, f"paddledist session|{hub_nonce}|{node_nonce}".encode(), hashlib.sha256).digest()
        self.out_label, self.in_label = ("hub", "node") if is_hub else ("node", "hub")
        self.sent = self.received = 0

    def wrap(self, message: dict) -> dict:
        body = json.dumps(message)
        self.sent += 1
        return {"b": body, "s": self.sent, "mac": self._mac(self.out_label, self.sent, body)}

    def unwrap(self, envelope: dict) -> Optional[dict]:
        """The message, or None when it fails (a refusal from the hub passes: it carries no authority)."""
        if envelope.get("ok") is False and "mac" not in envelope:
            return envelope
        body, seq, mac = envelope.get("b"), envelope.get("s"), envelope.get("mac")
        if not (isinstance(body, str) and seq == self.received + 1 and isinstance(mac, str)):
            return None
        if not hmac.compare_digest(mac, self._mac(self.in_label, seq, body)):
            return None
        self.received = seq
        try:
            message = json.loads(body)
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    def _mac(self, label: str, seq: int, body: str) -> str:
        return hmac.new(self.key, f"{label}|{seq}|".encode() + body.encode(), hashlib.sha256).hexdigest()


def greeting(secret: Optional[bytes]) -> tuple[str, dict]:
    """The hub's first line to every new connection: a fresh nonce, and whether a secret is needed."""
    nonce = secrets.token_hex(16)
    return nonce, {"paddledist": "hub", "nonce": nonce, "auth": secret is not None}


def introduce(greet: Optional[dict], hello: dict, secret: Optional[bytes], hub: str) -> tuple[dict, Optional[Seal]]:
    """A joining node's answer to the hub's greeting: the hello, sealed when the job has a secret."""
    if not isinstance(greet, dict) or greet.get("paddledist") != "hub" or not isinstance(greet.get("nonce"), str):
        raise UserError(f"{hub} did not greet as a paddledist hub: is another program (or another paddledist "
                        "version) on Train.port there?")
    if greet.get("auth") and secret is None:
        raise UserError(f"{hub} requires the job secret: set {SECRET_ENV} (the same value on every machine) or "
                        "Train.job_secret_file")
    if secret is None:
        return hello, None
    if not greet.get("auth"):
        raise UserError(f"this machine has a job secret but {hub} has none; set the same {SECRET_ENV} or "
                        "Train.job_secret_file on every machine")
    nonce = secrets.token_hex(16)
    seal = Seal(secret, greet["nonce"], nonce, is_hub=False)
    return {"nonce": nonce, **seal.wrap(hello)}, seal


def admit(first: dict, hub_nonce: str, secret: Optional[bytes]) -> tuple[Optional[dict], Optional[Seal], str]:
    """The hub's reading of a connection's first line: (hello, its seal, "") or (None, None, why refused)."""
    if secret is None:
        if "mac" in first:
            return None, None, "it has a job secret and this job has none"
        return first, None, ""
    if not isinstance(first.get("nonce"), str) or "mac" not in first:
        return None, None, "no job secret"
    seal = Seal(secret, hub_nonce, first["nonce"], is_hub=True)
    hello = seal.unwrap(first)
    if hello is None:
        return None, None, "wrong job secret (or a hello recorded from another connection)"
    return hello, seal, ""


def source_problem(claimed: object, listed: Optional[str], name: Optional[str], peer: str) -> Optional[str]:
    """Why a connection from `peer` may not be the node it claims (listed at `listed`, given as `name`), or None."""
    if not isinstance(listed, str) or not listed:
        return f"it claims to be node {claimed!r}, which is not a joining node of this job"
    allowed = {_plain(listed)} | _resolved(name) | _resolved(listed)
    if _plain(peer) in allowed:
        return None
    return f"it claims to be node {claimed} ({listed}) but comes from another address"


def _plain(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def _resolved(name: Optional[str]) -> set[str]:
    """The addresses a host name resolves to here (none for an address: it stands for itself)."""
    if not name:
        return set()
    try:
        ipaddress.ip_address(name)
        return set()
    except ValueError:
        pass
    try:
        return {_plain(info[4][0]) for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        return set()
