"""paddle's private API behind one wall (paddledist/paddle_internals/): every capability's probe passes on the
installed paddle, a capability that fails (really: disabled, or a probe that computes a wrong answer) takes its
paths out of Train.grad_sync=auto and makes an explicit request a one-line error naming it, and no other module
touches paddle's underscore names."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import paddle
import pytest

from paddledist import paddle_internals as internals
from paddledist.engine import sync as gradsync
from paddledist.engine.distenv import DistEnv
from paddledist.errors import UserError

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.unit
TWO = DistEnv(rank=0, world_size=2, nnodes=1)
TWO_HOSTS = DistEnv(rank=0, world_size=2, nnodes=2)
BIG = 1 << 40


@pytest.fixture(autouse=True)
def fresh_probes(monkeypatch):
    monkeypatch.delenv(internals.DISABLE_VAR, raising=False)
    internals._probe.cache_clear()
    yield
    internals._probe.cache_clear()


@pytest.mark.parametrize("name", sorted(internals.CAPABILITIES))
def test_every_capability_works_on_the_installed_paddle(name):
    assert internals.missing(name) is None, f"{name} on paddle {paddle.__version__}: {internals.missing(name)}"


def test_the_grad_hook_runs_after_the_gradient_is_accumulated():
    weight = paddle.create_parameter([2], "float32")
    seen = []
    internals.on_grad_ready(weight, lambda: seen.append(weight.grad.numpy().copy()))
    (weight * 3.0).sum().backward()
    (weight * 3.0).sum().backward()  # accumulates: the second hook sees 6
    assert [s.tolist() for s in seen] == [[3.0, 3.0], [6.0, 6.0]]


def test_shared_buffers_alias_and_ensure_grad_gives_zeros_only_when_missing():
    weight = paddle.create_parameter([3], "float32")
    internals.ensure_grad(weight)
    assert weight.grad.numpy().tolist() == [0.0, 0.0, 0.0]
    (weight * 2.0).sum().backward()
    internals.ensure_grad(weight)  # has one: left alone
    assert weight.grad.numpy().tolist() == [2.0, 2.0, 2.0]
    array = np.arange(3, dtype=np.float32)
    internals.share_buffer(internals.as_tensor(array), weight.grad)
    array[1] = 7.0
    assert weight.grad.numpy().tolist() == [0.0, 7.0, 2.0]


def test_the_momentum_probe_fails_when_the_kernel_computes_another_update(monkeypatch):
    """The probe compares results, not names: a kernel called with another momentum is caught."""
    real = internals.momentum_update

    def off_by_a_little(optimizer, param, grad, velocity, lr, terms):
        monkeypatch.setattr(optimizer, "_momentum", optimizer._momentum * 0.99)
        real(optimizer, param, grad, velocity, lr, terms)

    monkeypatch.setattr(internals, "momentum_update", off_by_a_little)
    why = internals.missing("shared_momentum_step")
    assert why and "differs from optimizer.step()" in why
    lin = paddle.nn.Linear(2, 2)
    assert not gradsync.SharedStep.supports(paddle.optimizer.Momentum(0.1, parameters=lin.parameters()))


@pytest.mark.parametrize("disabled,dist,expected", [
    ("", TWO, "shm"), ("share_buffer", TWO, "bucket"), ("grad_hook", TWO, "flat"), ("numpy_view", TWO, "reducer"),
    ("global_all_reduce", TWO_HOSTS, "flat"), ("give_grad", TWO_HOSTS, "reducer"), ("", TWO_HOSTS, "bucket")])
def test_auto_passes_over_a_sync_whose_capability_fails(monkeypatch, disabled, dist, expected):
    monkeypatch.setenv(internals.DISABLE_VAR, disabled)
    assert gradsync.choose("auto", "cpu", dist, 1000, BIG, arch="x86_64") == expected
    assert gradsync.choose("auto", "gpu", dist, 1000, BIG, arch="x86_64") == "reducer"  # public API on cards


@pytest.mark.parametrize("mode,capability", [("shm", "share_buffer"), ("bucket", "global_all_reduce"),
                                             ("flat", "give_grad")])
def test_an_explicit_sync_whose_capability_fails_is_one_line_naming_it(monkeypatch, mode, capability):
    monkeypatch.setenv(internals.DISABLE_VAR, capability)
    with pytest.raises(UserError) as raised:
        gradsync.choose(mode, "cpu", TWO, 1000, BIG, arch="x86_64")
    text = str(raised.value)
    assert f"Train.grad_sync={mode} needs paddle's {capability} capability" in text
    assert f"paddle {paddle.__version__}" in text and "\n" not in text
    assert gradsync.choose("reducer", "cpu", TWO, 1000, BIG, arch="x86_64") == "reducer"  # public API: no needs


def test_a_disabled_shared_step_keeps_the_optimizer_step(monkeypatch):
    lin = paddle.nn.Linear(2, 2)
    assert gradsync.SharedStep.supports(paddle.optimizer.Momentum(0.1, parameters=lin.parameters()))
    monkeypatch.setenv(internals.DISABLE_VAR, "shared_momentum_step")
    assert not gradsync.SharedStep.supports(paddle.optimizer.Momentum(0.1, parameters=lin.parameters()))


def test_an_unknown_capability_name_is_a_user_error(monkeypatch):
    monkeypatch.setenv(internals.DISABLE_VAR, "grad_hok")
    with pytest.raises(UserError, match=r"unknown capabilities \['grad_hok'\]; known: grad_hook"):
        internals.missing("grad_hook")


def paddle_private_names() -> set[str]:
    """Single-underscore attribute names of the paddle classes paddledist handles, read off the installed paddle."""
    classes = (paddle.Tensor, paddle.nn.Layer, paddle.DataParallel, paddle.optimizer.Momentum,
               paddle.optimizer.Optimizer, paddle.base.core.ProcessGroup)
    names = {n for cls in classes for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
    with warnings.catch_warnings():  # "The program will return to single-card operation"
        warnings.simplefilter("ignore")
        layer = paddle.DataParallel(paddle.nn.Linear(1, 1))
    opt = paddle.optimizer.Momentum(0.1, parameters=paddle.nn.Linear(1, 1).parameters())
    fields = set(vars(layer)) | set(layer._sub_layers) | set(vars(opt))
    return names | {n for n in fields if n.startswith("_") and not n.startswith("__")}


def private_touches(path: Path, private: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "paddle":
            if node.module.split(".")[1:2] == ["base"] or any(a.name.startswith("_") for a in node.names):
                found.append(f"{path.name}:{node.lineno} from {node.module} import ...")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            receiver = node.value.id if isinstance(node.value, ast.Name) else ""
            if receiver not in ("self", "cls") and (node.attr in private or receiver == "paddle"):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in ("base", "fluid") and isinstance(node.value, ast.Name) \
                and node.value.id == "paddle":
            found.append(f"{path.name}:{node.lineno} paddle.{node.attr}")
    return found


def test_no_module_but_the_boundary_touches_paddles_private_names():
    private = paddle_private_names()
    assert {"_register_backward_hook", "_share_buffer_to", "_layers", "_velocity_acc_str"} <= private
    files = [p for folder in ("paddledist", "tools", "benchmarks") for p in (REPO / folder).rglob("*.py")
             if "paddle_internals" not in p.parts]
    touches = [t for p in files for t in private_touches(p, private)]
    assert not touches, touches
    wall = REPO / "paddledist" / "paddle_internals"
    for module in ("__init__.py", "momentum.py"):
        assert private_touches(wall / module, private), module  # the scan does see them



def test_a_numpy_view_keeps_its_tensor_alive():
    """The view of a temporary (a cast's result) still reads its numbers after paddle has reused freed memory;
    on paddle 3.0 (the data_ptr path) the bf16 bucket mean once read garbage this way."""
    views = [internals.numpy_view(paddle.full([4096], float(k), "float64").astype("float32")) for k in range(8)]
    for _ in range(8):
        paddle.full([4096], -1.0, "float32").numpy()  # allocations of the same size: freed memory is reused
    for k, view in enumerate(views):
        assert np.all(view == k), f"view {k} reads {view[:4].tolist()}"
