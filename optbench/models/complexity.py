"""Complexity of any model: flops, params and activations as Xiao et al. (Appendix D) define them.

- flops: multiply-adds of every conv and matrix multiplication, attention's QK^T and AV included;
  norms, nonlinearities, softmax and residual adds are not counted.
- params: all learned parameters (`sum(p.numel())`).
- acts: elements in the outputs of every conv and matrix multiplication; for attention that is the
  q/k/v and output projections (matmuls), the attention map QK^T and the AV product.

They are counted by watching the aten ops of one forward pass (a TorchDispatchMode), not by
per-model formulas, so any timm model is counted. The pass runs on the meta device: no memory for
weights or activations, no arithmetic, so a 72 GF model costs as little as a tiny one.

torch.utils.flop_counter counts flops the same way but not activations, and it misses the CPU
attention kernel (`_scaled_dot_product_flash_attention_for_cpu`); hence this small counter.
Fused attention kernels never build the attention map, so their counts come from q/k/v shapes;
the unfused (math) path is a pair of bmm's and is counted like any matmul, with the same result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from optbench.models import create_model

aten = torch.ops.aten

# Ops whose output is a matrix product: (.., m, k) @ (.., k, n) -> (.., m, n).
# The last argument pair is the product's operands (addmm/baddbmm take the bias first).
_MATMULS = {
    aten.mm.default: (0, 1),
    aten.bmm.default: (0, 1),
    aten.addmm.default: (1, 2),
    aten.baddbmm.default: (1, 2),
    aten._addmm_activation.default: (1, 2),
}
_CONVS = {aten.convolution.default, aten._convolution.default}


def _is_fused_attention(func: Any) -> bool:
    """Every forward kernel behind F.scaled_dot_product_attention (flash, efficient, cudnn, CPU)."""
    name = func.__name__  # e.g. "_scaled_dot_product_flash_attention_for_cpu.default"
    return name.startswith("_scaled_dot_product_") and "backward" not in name


def _count_op(func: Any, args: tuple, out: Any) -> tuple[int, int]:
    """(multiply-adds, output elements) of one aten op; (0, 0) for ops that are not counted."""
    if func in _MATMULS:
        i, j = _MATMULS[func]
        a, b = args[i], args[j]
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        batch = math.prod(a.shape[:-2])
        return batch * m * k * n, batch * m * n
    if func in _CONVS:
        x, weight, transposed = args[0], args[1], args[6]
        # weight is (C_out, C_in/groups, *k), or (C_in, C_out/groups, *k) when transposed:
        # each output (input, when transposed) element costs prod(weight.shape[1:]) multiply-adds.
        per_elem = math.prod(weight.shape[1:])
        return (x.numel() if transposed else out.numel()) * per_elem, out.numel()
    if _is_fused_attention(func):
        q, k, v = args[:3]  # (B, heads, L, E), (B, heads, S, E), (B, heads, S, Ev)
        batch_heads = math.prod(q.shape[:-2])
        length, dim, source, dim_v = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
        attn_map = batch_heads * length * source  # QK^T
        return attn_map * dim + attn_map * dim_v, attn_map + batch_heads * length * dim_v
    return 0, 0


class ComplexityCounter(TorchDispatchMode):
    """Sums multiply-adds and activations of the aten ops run while the mode is active."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.acts = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flops, acts = _count_op(func, args, out)
        self.flops += flops
        self.acts += acts
        return out


def count_params(model: nn.Module) -> int:
    """All learned parameters (shared ones once)."""
    return sum(p.numel() for p in model.parameters())


def count_complexity(model: nn.Module, input_shape: Sequence[int]) -> dict[str, int]:
    """{"flops", "params", "acts"} of one forward pass of `model` on an input of `input_shape`
    (batch included; divide by the batch for per-image counts).

    The pass runs on the meta device, with the model's parameters and buffers swapped for meta
    tensors (`torch.func.functional_call`), so the model itself is neither copied nor changed and
    may live on any device. It runs in eval mode (no dropout, no stochastic depth), as at test time.
    """
    meta_state = {
        name: torch.empty_like(t, device="meta")
        for name, t in [*model.named_parameters(), *model.named_buffers()]
    }
    x = torch.empty(tuple(input_shape), device="meta")
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with ComplexityCounter() as counter, torch.no_grad():
            torch.func.functional_call(model, meta_state, (x,))
    finally:
        for module, training in modes:
            module.training = training
    return {"flops": counter.flops, "params": count_params(model), "acts": counter.acts}


def model_complexity(
    name: str, *, num_classes: int, in_chans: int, img_size: int
) -> dict[str, int]:
    """{"flops", "params", "acts"} for one image of `name` (any optbench or timm model), built
    on the meta device so that no weights are allocated (on the CPU if its constructor needs data)."""
    args = dict(num_classes=num_classes, in_chans=in_chans, img_size=img_size)
    try:
        with torch.device("meta"):
            model = create_model(name, **args)
    except (NotImplementedError, RuntimeError):  # e.g. .item() or .tolist() on a meta tensor
        model = create_model(name, **args)
    return count_complexity(model, (1, in_chans, img_size, img_size))
