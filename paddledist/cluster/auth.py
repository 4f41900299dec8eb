"""The job secret: PADDLEDIST_JOB_SECRET, or the file Train.job_secret_file readable by its owner only.

With one, the job's own etcd runs with authentication (cluster/etcdserver.py): its root and job users' passwords
derive from the secret, so a stranger without it can neither read nor write the job's keys. Paddle's own TCP
store and collectives are not covered (docs/security.md).
"""

from __future__ import annotations

import os
import secrets
import stat
from typing import Mapping, Optional

from paddledist.errors import UserError

SECRET_ENV = "PADDLEDIST_JOB_SECRET"
MIN_SECRET = 16
"""Characters a job secret needs at least (a generated one has 64)."""
_MAX_SECRET_FILE = 4096
HINT = (f"paddledist: the job's etcd on Train.port runs without authentication; to refuse strangers set "
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
