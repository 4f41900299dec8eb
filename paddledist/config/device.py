"""Device specs: `cpu`, `cpu:0,1`, `gpu`, `gpu:0,1,2,3`, and PaddleX's other kinds `xpu`, `npu`, `mlu`, `dcu`."""

from __future__ import annotations

from dataclasses import dataclass

from paddledist.errors import UserError

ACCELERATORS = ("gpu", "xpu", "npu", "mlu", "dcu")
"""Device kinds PaddleX allows besides cpu; all but gpu are passed on untested (no such card here)."""
PADDLE_DEVICE = {"dcu": "gpu"}
"""paddle.set_device's name where it differs from PaddleX's: a DCU is a ROCm build's gpu."""


@dataclass(frozen=True)
class DeviceSpec:
    kind: str
    """"cpu" or one of ACCELERATORS."""
    ids: tuple[int, ...]
    """Device ids on each machine; one worker process per id."""

    @property
    def accelerator(self) -> bool:
        """One worker per listed card, chosen with the launcher's --devices."""
        return self.kind != "cpu"

    @property
    def nproc(self) -> int:
        return len(self.ids)


def parse_device(spec: str) -> DeviceSpec:
    """`"gpu:0,1"` -> DeviceSpec("gpu", (0, 1)); a bare kind means one device, id 0."""
    kind, _, ids_text = str(spec).strip().lower().partition(":")
    if kind not in ("cpu", *ACCELERATORS):
        raise UserError(f"Global.device: unknown device {spec!r}; use cpu, cpu:0,1, gpu:0,1,2,3 "
                        f"(or {', '.join(ACCELERATORS[1:])} with ids like gpu)")
    if not ids_text:
        return DeviceSpec(kind, (0,))
    try:
        ids = tuple(int(part) for part in ids_text.split(","))
    except ValueError:
        raise UserError(f"Global.device: {spec!r} must list integer ids, e.g. {kind}:0,1") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise UserError(f"Global.device: {spec!r} must list distinct non-negative ids, e.g. {kind}:0,1")
    return DeviceSpec(kind, ids)
