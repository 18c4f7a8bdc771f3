"""The optimizer of a population (population.py): AdamW, SGD or Lion over the stacked weights
of K members, each member with its own lr and weight decay, in one pass per weight-decay group.

The weights of the population are stacked by weight-decay group (optim.weight_decay_groups):
one tensor (K, N) per group, row k member k's parameters flattened. Each update is elementwise,
so over a row it is the update torch.optim's AdamW / SGD (foreach, as optim.py builds them off
CUDA) or timm's Lion (as create_optimizer_v2 builds it for a solo trial) makes of that member's
parameters, in the same order of operations:

- AdamW (torch.optim.adam._multi_tensor_adam, decoupled): p *= 1 - lr wd; m.lerp_(g, 1 - b1);
  v = v b2 + (1 - b2) g g; p += (-lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
  The per-member scalars are computed in float64 as torch computes its Python scalars, and
  applied as float32 tensors, as torch applies them: the same numbers.
- SGD (torch.optim.sgd._multi_tensor_sgd, dampening 0): g += wd p; the momentum buffer is g at
  the first step and b = momentum b + g after; g += momentum b (Nesterov) or g = b; p -= lr g.
  The two updates with a per-member `alpha` run row by row, because torch's `add(alpha=)` may
  fuse its multiply-add (one rounding, not two) and a tensor of alphas would not.
- Lion (timm.optim.lion._single_tensor_lion, the path timm takes off CUDA; its foreach path
  is the same elementwise operations): g = -g if `maximize`; p *= 1 - s wd, with s = lr, or
  lr^2 / peak lr with `corrected_weight_decay`; u = sign(m.lerp(g, 1 - b1)); p += -lr u;
  m.lerp_(g, 1 - b2). The step `p += -lr u` is applied as a column of -lr: u is -1, 0 or 1,
  so -lr u is exact and fused or not, the sum rounds once. Betas and the other arguments are
  recipe.optimizer_args.lion over timm's defaults (spec/timm_optimizers.json); `caution`
  (a mask scaled by its mean over each parameter tensor, not over a row) is refused by the
  spec (spec/optimizers.py, POPULATION_REFUSED).

A member that is not `active` (it diverged) is frozen: its row of weights and optimizer state is
left as it is.
"""

from __future__ import annotations

import torch
from torch import Tensor

from optbench.data.tensor_ops import to_device
from optbench.spec.optimizers import population_refusal
from optbench.spec.recipe import Optimizer, Recipe
from optbench.spec.timm_optimizers import TIMM_OPTIMIZERS


def _column(values: list[float], like: Tensor) -> Tensor:
    """Per-member scalars as a (K, 1) tensor of `like`'s dtype (float64 math, then cast), sent
    to the device without blocking (a plain copy waits for the queued steps: a host sync)."""
    return to_device(torch.tensor(values, dtype=torch.float64), like.device).to(like.dtype)[:, None]


class PopulationOptimizer:
    """Steps the rows of `flats` (one (K, N) tensor per weight-decay group, with `.grad`);
    `decays[g]` says whether group g is decayed, `wds[k]` member k's weight decay and
    `peak_lrs[k]` its peak lr (the lr its solo optimizer is built with: Lion's max_lr)."""

    def __init__(
        self,
        flats: list[Tensor],
        decays: list[bool],
        wds: list[float],
        peak_lrs: list[float],
        opt: Optimizer,
        recipe: Recipe,
    ):
        refusal = population_refusal(opt, recipe.optimizer_args.get(opt, {}))
        if refusal:  # the spec refuses it first; this guards other callers
            raise ValueError(refusal)
        self.flats, self.decays, self.wds, self.peak_lrs = flats, decays, wds, peak_lrs
        self.opt, self.recipe = opt, recipe
        # Lion's arguments as create_optimizer_v2 passes them: the recipe's over timm's defaults
        self.lion = {**TIMM_OPTIMIZERS["lion"]["args"], **recipe.optimizer_args.get("lion", {})}
        self.steps = 0  # steps taken (torch's per-parameter `step`, the same for all)
        self.state: list[dict[str, Tensor]] = [{} for _ in flats]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch.optim's zero_grad, as the loop calls it (epoch.py)."""
        for flat in self.flats:
            if set_to_none:
                flat.grad = None
            elif flat.grad is not None:
                flat.grad.zero_()

    @torch.no_grad()
    def step(self, lrs: list[float], active: list[bool]) -> None:
        """One update of every active member, member k with lr `lrs[k]`."""
        self.steps += 1
        rows = [k for k, on in enumerate(active) if on]
        for g, flat in enumerate(self.flats):
            wds = self.wds if self.decays[g] else [0.0] * len(self.wds)
            state = self.state[g]
            if not state:
                self._init_state(state, flat)
            if len(rows) == len(active):
                self._update(flat.data, flat.grad, state, lrs, wds, self.peak_lrs)
                continue
            index = to_device(torch.tensor(rows), flat.device)
            part = {k: v[index] for k, v in state.items()}  # copies of the active rows
            p = flat.data[index]
            lrs_, wds_ = [lrs[k] for k in rows], [wds[k] for k in rows]
            self._update(p, flat.grad[index], part, lrs_, wds_, [self.peak_lrs[k] for k in rows])
            flat.data[index] = p
            for k, v in part.items():
                if k not in state:  # made at this step (SGD's first): frozen rows stay zero
                    state[k] = torch.zeros_like(flat.data)
                state[k][index] = v

    def _init_state(self, state: dict, flat: Tensor) -> None:
        if self.opt in ("adamw", "lion"):
            state["exp_avg"] = torch.zeros_like(flat.data)
        if self.opt == "adamw":
            state["exp_avg_sq"] = torch.zeros_like(flat.data)
        # SGD's momentum buffer is made at the first step, from that step's gradient

    def _update(
        self, p: Tensor, g: Tensor, state: dict, lrs: list[float], wds: list[float], peaks: list
    ) -> None:
        if self.opt == "adamw":
            self._adamw(p, g, state, lrs, wds)
        elif self.opt == "lion":
            self._lion(p, g, state, lrs, wds, peaks)
        else:
            self._sgd(p, g, state, lrs, wds)

    def _adamw(self, p: Tensor, g: Tensor, state: dict, lrs: list[float], wds: list[float]) -> None:
        beta1, beta2 = self.recipe.betas
        m, v = state["exp_avg"], state["exp_avg_sq"]
        if any(wds):
            p.mul_(_column([1 - lr * wd for lr, wd in zip(lrs, wds, strict=True)], p))
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2)
        v.addcmul_(g, g, value=1 - beta2)
        t = float(self.steps)
        bias_correction1 = 1 - beta1**t
        bias_correction2_sqrt = (1 - beta2**t) ** 0.5
        step_size = _column([(lr / bias_correction1) * -1 for lr in lrs], p)
        denom = v.sqrt()
        denom.div_(bias_correction2_sqrt)
        denom.add_(self.recipe.eps)
        p.add_(step_size * m / denom)  # torch's addcdiv: p + (value * m) / denom

    def _sgd(self, p: Tensor, g: Tensor, state: dict, lrs: list[float], wds: list[float]) -> None:
        momentum = self.recipe.momentum
        if any(wds):
            g = g.clone()
            for k, wd in enumerate(wds):
                if wd:
                    g[k].add_(p[k], alpha=wd)
        if momentum:
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = g.detach().clone()
                buf = state["momentum_buffer"]
            else:
                buf = state["momentum_buffer"]
                buf.mul_(momentum)
                buf.add_(g, alpha=1)
            if self.recipe.nesterov:
                g = g if any(wds) else g.clone()
                g.add_(buf, alpha=momentum)
            else:
                g = buf
        for k, lr in enumerate(lrs):
            p[k].add_(g[k], alpha=-lr)

    def _lion(
        self, p: Tensor, g: Tensor, state: dict, lrs: list[float], wds: list[float], peaks: list
    ) -> None:
        beta1, beta2 = self.lion["betas"]
        m = state["exp_avg"]
        if self.lion["maximize"]:
            g = -g
        if self.lion["corrected_weight_decay"]:
            scales = [lr**2 / peak for lr, peak in zip(lrs, peaks, strict=True)]
        else:
            scales = lrs
        if any(wds):  # timm multiplies by 1 - s wd = 1.0 (exactly) where wd is 0
            p.mul_(_column([1 - s * wd for s, wd in zip(scales, wds, strict=True)], p))
        update = m.lerp(g, 1 - beta1).sign_()
        p.add_(update * _column([-lr for lr in lrs], p))  # exact products: module docstring
        m.lerp_(g, 1 - beta2)

    def state_dict(self) -> dict:
        return {"steps": self.steps, "state": [dict(s) for s in self.state]}

    def load_state_dict(self, saved: dict) -> None:
        self.steps = int(saved["steps"])
        self.state = [
            {k: v.to(flat.device) for k, v in s.items()}
            for s, flat in zip(saved["state"], self.flats, strict=True)
        ]
