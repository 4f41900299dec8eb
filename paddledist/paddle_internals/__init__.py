"""Every use of paddle's private API, in one place, each behind a named capability with a probe.

paddle's underscore names (`Tensor._share_buffer_to`, `_C_ops.momentum_`, an optimizer's `_velocity_acc_str`...)
change between minor releases without notice. Nothing else in paddledist touches them: it calls the functions
here, and a path that needs one asks `missing(name)` first. A probe checks that the thing exists *and* computes
what we expect on a tiny tensor; it runs once per process, on first use, in a few milliseconds. A failed probe
takes its paths out of `Train.grad_sync=auto`'s choice and makes an explicit request of them a one-line error
naming the capability and the paddle version, instead of refusing the whole paddle release.

PADDLEDIST_DISABLE_CAPABILITIES=name,name treats those capabilities as failed: a way around a private API that
misbehaves on a paddle release nobody has tested yet (and how the tests make a probe fail for real).
"""

from __future__ import annotations

import ctypes
import functools
import os
import warnings
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import numpy as np
import paddle
from paddle.base import core

from paddledist.errors import UserError
from paddledist.paddle_internals import grad_view as _grad_view
from paddledist.paddle_internals.grad_view import grad_view, is_view  # noqa: F401
from paddledist.paddle_internals.momentum import (momentum_kind, momentum_terms, momentum_update,  # noqa: F401
                                                  momentum_velocities)

DISABLE_VAR = "PADDLEDIST_DISABLE_CAPABILITIES"


@dataclass(frozen=True)
class Capability:
    name: str
    uses: str
    """The private names it stands for, as a user would search for them."""
    probe: Callable[[], None]
    """Raises (AssertionError for a wrong result) when this paddle does not do what paddledist expects."""


# --- the private calls themselves ---------------------------------------------------------------------------

def on_grad_ready(param, fn: Callable[[], None]) -> None:
    """fn() runs when backward has accumulated param's gradient of this pass (paddle's reducer hook)."""
    param._register_backward_hook(fn)


def give_grad(param, value) -> None:
    """Give `param` (whose .grad is None: unused in this pass) a gradient of its own holding `value`."""
    param._copy_gradient_from(value)


def ensure_grad(param) -> None:
    """A gradient of zeros for `param` when backward gave it none (unused in this pass here, maybe not on other
    ranks, which still send theirs)."""
    if param.grad is None:
        give_grad(param, paddle.zeros_like(param))


def numpy_view(tensor) -> np.ndarray:
    """A writable numpy array over a CPU tensor's memory, no copy, that keeps `tensor` alive. paddle 3.0
    exports only the legacy DLPack capsule, which numpy marks read-only: there the array is laid over the
    tensor's data_ptr() instead (same memory, same dtype and shape), and holds the tensor until it is
    collected (without that, `numpy_view(t.astype(...))` read freed memory once paddle reused it)."""
    array = np.from_dlpack(tensor)
    if array.flags.writeable:
        return array
    memory = (ctypes.c_char * array.nbytes).from_address(tensor.data_ptr())
    memory.tensor = tensor  # the array's base (this buffer) holds the tensor, so its memory outlives the array
    return np.frombuffer(memory, dtype=array.dtype).reshape(array.shape)


def as_tensor(array: np.ndarray):
    """A paddle tensor over the same memory as `array` (writable both ways on every paddle 3.x)."""
    return paddle.utils.dlpack.from_dlpack(array.__dlpack__())


def share_buffer(source, target) -> None:
    """Point `target` at `source`'s memory (no copy): writes to either are seen through both."""
    source._share_buffer_to(target)


def global_all_reduce(tensor):
    """SUM all-reduce of `tensor` in place on the default group's process group, callable from any thread
    (paddle.distributed.all_reduce keeps dygraph mode in thread-local state and takes its static path on
    another thread). Returns paddle's task; `.wait()` it."""
    group = paddle.distributed.collective._get_global_group()
    return group.process_group.all_reduce(tensor, core.ReduceOp.SUM, True)


def unwrap(model):
    """The network inside paddle's DataParallel wrapper (the model itself when it is not wrapped)."""
    return model._layers if isinstance(model, paddle.DataParallel) else model


def has_onednn() -> bool:
    """Whether this paddle build has oneDNN (mkldnn) kernels for paddle inference."""
    return bool(core.is_compiled_with_mkldnn())


def export_softmax() -> Callable:
    """The softmax(x, axis) an exported program's forward calls, chosen now: a probe must not run inside the
    trace. paddle 3.3's F.softmax goes through _C_ops with `out=None`, which in a traced PIR program prints
    "Paddle static graph(PIR) not support input out tensor for now!!!!!" to stderr on every export (job scripts
    read stderr); paddle's PIR op builder makes the same softmax op without it. Without the capability,
    F.softmax (and its warning)."""
    return _pir_softmax if missing("pir_softmax") is None else paddle.nn.functional.softmax


def _pir_softmax(x, axis: int = -1):
    if paddle.framework.in_pir_mode():
        return paddle._pir_ops.softmax(x, axis)
    return paddle.nn.functional.softmax(x, axis=axis)


# --- probes ---------------------------------------------------------------------------------------------------

def _probe_grad_hook() -> None:
    weight = paddle.create_parameter([3], "float32")
    seen = []
    on_grad_ready(weight, lambda: seen.append(weight.grad.numpy().copy()))
    (weight * paddle.to_tensor([1.0, 2.0, 3.0])).sum().backward()
    assert len(seen) == 1 and np.array_equal(seen[0], [1.0, 2.0, 3.0]), f"the hook saw {seen}"


def _probe_give_grad() -> None:
    weight = paddle.create_parameter([2], "float32")
    give_grad(weight, paddle.full([2], 3.0))
    assert weight.grad is not None and np.array_equal(weight.grad.numpy(), [3.0, 3.0]), "no gradient given"


def _probe_numpy_view() -> None:
    tensor = paddle.zeros([2, 3])
    view = numpy_view(tensor)
    view[1, 2] = 4.0
    assert view.shape == (2, 3) and tensor.numpy()[1, 2] == 4.0, "a write through the view is not in the tensor"
    array = np.zeros(3, dtype=np.float32)
    alias = as_tensor(array)
    alias.add_(paddle.ones([3]))
    assert array.tolist() == [1.0, 1.0, 1.0], "a tensor made from an array does not share its memory"


def _probe_share_buffer() -> None:
    array = np.zeros(4, dtype=np.float32)
    source, target = as_tensor(array), paddle.ones([4])
    share_buffer(source, target)
    array[2] = 5.0
    assert target.numpy()[2] == 5.0, "the target does not see the source's memory"


def _probe_global_all_reduce() -> None:
    # A collective needs every rank: the probe checks the names, check_global_all_reduce the sum.
    assert callable(paddle.distributed.collective._get_global_group), "collective._get_global_group"
    assert hasattr(core.ReduceOp, "SUM") and hasattr(core.ProcessGroup, "all_reduce"), "ProcessGroup.all_reduce"


def _probe_unwrap() -> None:
    inner = paddle.nn.Linear(1, 1)
    with warnings.catch_warnings():  # one process: "The program will return to single-card operation"
        warnings.simplefilter("ignore")
        wrapped = paddle.DataParallel(inner)
    assert unwrap(wrapped) is inner and unwrap(inner) is inner, "DataParallel._layers"


def _probe_softmax() -> None:
    """The PIR builder makes paddle's softmax op with the axis asked for (built, not run: running a program
    would print the executor's own log lines, and the exported program's answers are checked by its tests)."""
    paddle.enable_static()
    try:
        program = paddle.static.Program()
        with paddle.static.program_guard(program):
            paddle._pir_ops.softmax(paddle.static.data("x", [2, 3], "float32"), 1)
        ops = program.global_block().ops
        built = [(op.name(), op.attrs().get("axis")) for op in ops]
    finally:
        paddle.disable_static()
    assert built == [("pd_op.data", None), ("pd_op.softmax", 1)], f"the PIR builder made {built}"


def _probe_onednn() -> None:
    assert isinstance(has_onednn(), bool)


def _probe_momentum() -> None:
    """One step of paddle's Momentum (L2 decay, Nesterov, a per-parameter multiplier) through optimizer.step()
    and through momentum_update on a copy: bit-identical parameters and velocities."""
    start, grad = np.linspace(-1, 1, 6, dtype=np.float32), np.linspace(0.5, -0.5, 6, dtype=np.float32)
    results = []
    for by_kernel in (False, True):
        weight = paddle.create_parameter([6], "float32", attr=paddle.ParamAttr(learning_rate=0.5))
        weight.set_value(start)
        opt = paddle.optimizer.Momentum(0.1, 0.9, parameters=[weight], use_nesterov=True, weight_decay=1e-2)
        assert momentum_kind(opt), "a plain Momentum is not recognised"
        (velocity,) = momentum_velocities(opt, [weight])
        for _ in range(2):
            give_grad(weight, paddle.to_tensor(grad)) if weight.grad is None else weight.grad.set_value(grad)
            if by_kernel:
                terms = momentum_terms(opt, weight)
                momentum_update(opt, weight, weight.grad, velocity, paddle.full([1], 0.1 * terms[2]), terms)
            else:
                opt.step()
        results.append((weight.numpy().copy(), velocity.numpy().copy()))
    (p0, v0), (p1, v1) = results
    assert np.array_equal(p0, p1) and np.array_equal(v0, v1), "the kernel's update differs from optimizer.step()"


CAPABILITIES = {c.name: c for c in (
    Capability("grad_hook", "Tensor._register_backward_hook", _probe_grad_hook),
    Capability("give_grad", "Tensor._copy_gradient_from", _probe_give_grad),
    Capability("grad_view", "Tensor._slice, DenseTensor._set_dims, Tensor._copy_gradient_from (a gradient that is a "
               "view of a bucket)", _grad_view.probe),
    Capability("share_buffer", "Tensor._share_buffer_to", _probe_share_buffer),
    Capability("numpy_view", "DLPack both ways (paddle 3.0's legacy export: data_ptr)", _probe_numpy_view),
    Capability("global_all_reduce", "collective._get_global_group().process_group.all_reduce, core.ReduceOp",
               _probe_global_all_reduce),
    Capability("shared_momentum_step", "_C_ops.momentum_, Momentum's _momentum/_use_nesterov/_rescale_grad/"
               "_regularization_*, _create_accumulators, _get_accumulator_master, _velocity_acc_str",
               _probe_momentum),
    Capability("unwrap_data_parallel", "DataParallel._layers", _probe_unwrap),
    Capability("onednn_build", "paddle.base.core.is_compiled_with_mkldnn", _probe_onednn),
    Capability("pir_softmax", "paddle._pir_ops.softmax (F.softmax's out=None warns in traced programs)",
               _probe_softmax),
)}


def check_global_all_reduce(world_size: int) -> Optional[str]:
    """The computing half of global_all_reduce's probe: a SUM of ones from every rank must be the world size.
    Why not, or None (right, or already missing here). Every rank calls it at the same point (engine/sync's
    build, before the sync is chosen), so all see one answer; `with_job_checks` folds it into `missing`."""
    if missing("global_all_reduce") is not None:
        return None
    try:
        ones = paddle.ones([2], dtype="float32")
        global_all_reduce(ones).wait()
        got = ones.numpy().tolist()
    except Exception as e:  # noqa: BLE001  (a private API can fail any way; the job goes on without it)
        got = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return None if got == [float(world_size)] * 2 else f"a SUM over {world_size} ranks gave {got}"


def with_job_checks(found: Mapping[str, Optional[str]]) -> Callable[[str], Optional[str]]:
    """`missing`, with what checks that need every rank found in this job (name -> why, or None)."""
    return lambda name: found.get(name) or missing(name)


def disabled(environ=None) -> set[str]:
    """The capabilities PADDLEDIST_DISABLE_CAPABILITIES names (UserError for a name that is none of them)."""
    text = (os.environ if environ is None else environ).get(DISABLE_VAR, "")
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(CAPABILITIES))
    if unknown:
        raise UserError(f"{DISABLE_VAR} names unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}")
    return names


@functools.lru_cache(maxsize=None)
def _probe(name: str) -> Optional[str]:
    paddle.disable_static()  # dygraph, as training runs; a probe leaves no state behind
    try:
        CAPABILITIES[name].probe()
    except Exception as e:  # noqa: BLE001  (any way a private API can fail: gone, renamed, new signature, wrong)
        return f"{type(e).__name__}: {e}".strip().splitlines()[0][:200]
    return None


def missing(name: str) -> Optional[str]:
    """None when capability `name` works on this paddle, else why not (probed once per process)."""
    if name not in CAPABILITIES:
        raise KeyError(name)
    if name in disabled():
        return f"disabled by {DISABLE_VAR}"
    return _probe(name)


def failure(names, check: Callable[[str], Optional[str]] = missing) -> Optional[str]:
    """For the first of `names` that does not work here, "paddle's <name> capability (<private names>), which
    paddle <version> here fails (<why>)"; None when all work."""
    for name in names:
        why = check(name)
        if why is not None:
            return (f"paddle's {name} capability ({CAPABILITIES[name].uses}), which paddle {paddle.__version__} "
                    f"here fails ({why})")
    return None
