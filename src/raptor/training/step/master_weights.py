"""float32 master weights for bf16/fp16 trainable parameters.

bf16 has 8 significant bits: an update smaller than half the spacing of a weight (2^-9 of its
magnitude) rounds away, and DP updates (a noisy gradient divided by n_hat, times a small learning
rate) are often that small. So for every trainable bf16/fp16 parameter p the optimizer steps a
float32 copy m (the master weight) instead:

1. the release (float32 for bf16 parameters, :func:`raptor.per_sample.norms.sum_dtype`) becomes
   ``m.grad`` without rounding;
2. the optimizer (its moments float32 too, as they follow m) updates m;
3. p <- bf16(m): the model's weights are refreshed from the masters after every step, so the
   forward pass uses the rounded masters and small updates accumulate in m until they show.

:func:`master_copies` makes the masters (float32/float64 parameters are their own master: nothing
changes for them) and :func:`with_master_weights` wraps an optimizer over masters so that its
``step`` refreshes the parameters and its ``state_dict`` carries the masters (the checkpoint
saves them with the optimizer state, and a resumed bf16 run continues from the unrounded
weights). Memory: 4 bytes per trainable bf16 parameter, plus float32 moments.

Privacy: post-processing of the released gradients only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from raptor.errors import ConfigError

LOW_PRECISION = (torch.bfloat16, torch.float16)


def needs_master(param: torch.Tensor) -> bool:
    return param.dtype in LOW_PRECISION


def master_copies(params: Mapping[str, nn.Parameter]) -> dict[str, torch.Tensor]:
    """{name: float32 leaf copy} for bf16/fp16 parameters, {name: the parameter itself} otherwise."""
    return {n: p.detach().float().clone().requires_grad_(True) if needs_master(p) else p for n, p in params.items()}


class MasterWeightOptimizer:
    """An optimizer over float32 masters that refreshes the low-precision parameters after each
    step; its state dict holds the inner optimizer's and the masters' values."""

    def __init__(self, optimizer: torch.optim.Optimizer, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]):
        self.optimizer = optimizer
        self.pairs = [(m, p) for m, p in pairs if m is not p]  # (master, low-precision parameter)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def refresh(self) -> None:
        """parameter <- master, rounded to the parameter's dtype."""
        for m, p in self.pairs:
            p.copy_(m)

    def step(self) -> None:
        self.optimizer.step()
        self.refresh()

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "master_weights": [m.detach().clone() for m, _ in self.pairs]}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or set(state) != {"optimizer", "master_weights"} \
                or len(state["master_weights"]) != len(self.pairs):
            raise ConfigError("the checkpoint's optimizer state has no matching float32 master weights: it was "
                              "written by a run with another performance.dtype; resume with the same performance.dtype")
        self.optimizer.load_state_dict(state["optimizer"])
        for (m, _), saved in zip(self.pairs, state["master_weights"], strict=True):
            if saved.shape != m.shape:
                raise ConfigError(f"master weight of shape {tuple(saved.shape)} for a parameter of shape "
                                  f"{tuple(m.shape)}; resume with the same model and method")
            m.copy_(saved)
        self.refresh()


def with_master_weights(optimizer: torch.optim.Optimizer, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]):
    """``optimizer`` (built over the masters of ``pairs`` = (master, parameter)) itself when every
    parameter is its own master, else a :class:`MasterWeightOptimizer`."""
    if all(m is p for m, p in pairs):
        return optimizer
    return MasterWeightOptimizer(optimizer, pairs)
