"""Gradients that live in a bucket (PyTorch DDP's gradient_as_bucket_view): a parameter's gradient made a view of
a slice of one flat buffer, so backward accumulates straight into the memory an all-reduce sends. Private paddle
names: Tensor._slice, the slice's DenseTensor _set_dims, and Tensor._copy_gradient_from (which, given a tensor,
makes the parameter's gradient share its memory: paddle's own fused comm buffers do the same)."""

from __future__ import annotations

import numpy as np
import paddle


def grad_view(param, flat, start: int, end: int) -> None:
    """`param`'s gradient becomes flat[start:end] shaped as `param` (same memory, no copy)."""
    view = flat._slice(start, end)
    view.get_tensor()._set_dims(param.shape)
    param._copy_gradient_from(view)


def is_view(param, flat, start: int) -> bool:
    """Whether `param`'s gradient still lies at flat[start] (backward did not give it memory of its own)."""
    return param.grad is not None and param.grad.data_ptr() == flat.data_ptr() + 4 * start


def probe() -> None:
    """Two backwards accumulate into the buffer in place; zeroing the buffer keeps the view."""
    layer = paddle.nn.Linear(3, 2)
    flat = paddle.zeros([9], dtype="float32")
    grad_view(layer.weight, flat, 1, 7)
    x = paddle.ones([4, 3])
    for _ in range(2):
        layer(x).sum().backward()
    assert is_view(layer.weight, flat, 1), "backward gave the gradient memory of its own"
    assert np.array_equal(flat.numpy(), [0] + [8.0] * 6 + [0, 0]), f"the buffer holds {flat.numpy().tolist()}"
    flat.zero_()
    layer(x).sum().backward()
    assert np.array_equal(flat.numpy()[1:7], [4.0] * 6), "after zeroing, backward no longer writes the buffer"
