"""Device specs: `cpu`, `cpu:0,1`, `gpu`, `gpu:0,1,2,3`."""

from __future__ import annotations

from dataclasses import dataclass

from paddledist.errors import UserError


@dataclass(frozen=True)
class DeviceSpec:
    kind: str
    """"cpu" or "gpu"."""
    ids: tuple[int, ...]
    """Device ids on each machine; one worker process per id."""

    @property
    def nproc(self) -> int:
        return len(self.ids)


def parse_device(spec: str) -> DeviceSpec:
    """`"gpu:0,1"` -> DeviceSpec("gpu", (0, 1)); a bare kind means one device, id 0."""
    kind, _, ids_text = str(spec).strip().lower().partition(":")
    if kind not in ("cpu", "gpu"):
        raise UserError(f"Global.device: unknown device {spec!r}; use cpu, cpu:0,1 or gpu:0,1,2,3")
    if not ids_text:
        return DeviceSpec(kind, (0,))
    try:
        ids = tuple(int(part) for part in ids_text.split(","))
    except ValueError:
        raise UserError(f"Global.device: {spec!r} must list integer ids, e.g. {kind}:0,1") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise UserError(f"Global.device: {spec!r} must list distinct non-negative ids, e.g. {kind}:0,1")
    return DeviceSpec(kind, ids)
