"""Preprocessors: the MAPPO paper's ValueNorm, and masked, rank-consistent statistics updates.

:class:`ValueNorm` follows the paper's code (Yu et al. 2022, https://arxiv.org/abs/2103.01955,
``onpolicy/utils/valuenorm.py``): running first and second moments with exponential decay ``beta`` and a
debiasing term, so early estimates are not pulled towards the zero initialisation. It has skrl's preprocessor
interface (``forward(x, train=False, inverse=False)``), so it is passed where skrl takes a value preprocessor::

    cfg = MAPPO_CFG(value_preprocessor=ValueNorm)

Unlike skrl's ``RunningStandardScaler`` it never clips: a return ten standard deviations out is learned as such.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from skrl.resources.preprocessors.torch import RunningStandardScaler
from torch import nn

from skrl_marl_ext import distributed


class ValueNorm(nn.Module):
    def __init__(
        self,
        size: int = 1,
        *,
        beta: float = 0.99999,
        epsilon: float = 1e-5,
        min_variance: float = 1e-2,
        device: str | torch.device | None = None,
    ) -> None:
        """Running normalisation of value targets with debiased exponential moments.

        The paper's update rule with ``per_element_update=False`` (what its MAPPO builds), in float64. By design the
        agents fold in a rollout's unmasked returns once, before the epochs, where the paper's code folds in every
        mini-batch's returns (masked rows included) inside the loss (``docs/value_normalization.md``).

        :param size: Size of the last dimension of the values (1 for scalar values).
        :param beta: Decay of the running moments (the paper's 0.99999 averages almost uniformly over updates).
        :param epsilon: Lower bound of the debiasing term.
        :param min_variance: Lower bound of the variance (the paper's 1e-2), so near-constant targets are not blown up.
        :param device: Device of the statistics.
        """
        super().__init__()
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"ValueNorm: beta must be in [0, 1), got {beta}")
        self.beta = beta
        self.epsilon = epsilon
        self.min_variance = min_variance
        self.register_buffer("running_mean", torch.zeros(size, dtype=torch.float64, device=device))
        self.register_buffer("running_mean_sq", torch.zeros(size, dtype=torch.float64, device=device))
        self.register_buffer("debiasing_term", torch.zeros((), dtype=torch.float64, device=device))

    def mean_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Debiased running mean and variance, shape ``(size,)`` each, float64."""
        debias = self.debiasing_term.clamp(min=self.epsilon)
        mean = self.running_mean / debias
        mean_sq = self.running_mean_sq / debias
        return mean, (mean_sq - mean * mean).clamp(min=self.min_variance)

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Fold a batch into the running moments.

        :param x: Values, shape ``(..., size)``.
        :param mask: Boolean mask of shape ``(..., 1)``; masked-out entries are ignored. The moments are averaged
            over all ranks of a distributed run, so every rank keeps the same statistics.
        """
        fold_sums_(self, *masked_sums(x, mask))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / std``, in the dtype of ``x``."""
        mean, var = self.mean_var()
        return ((x - mean) / var.sqrt()).to(x.dtype)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """``x * std + mean``, in the dtype of ``x``."""
        mean, var = self.mean_var()
        return (x * var.sqrt() + mean).to(x.dtype)

    def forward(
        self, x: torch.Tensor | None, *, train: bool = False, inverse: bool = False, no_grad: bool = True
    ) -> torch.Tensor | None:
        """skrl's preprocessor interface.

        :param x: Values, shape ``(..., size)``, or None.
        :param train: Update the statistics with ``x`` first.
        :param inverse: Map normalised values back to the original scale.
        :param no_grad: Whether to disable the gradient computation.
        """
        if x is None:
            return None
        if train:
            self.update(x)
        with torch.set_grad_enabled(not no_grad and torch.is_grad_enabled()):
            return self.denormalize(x) if inverse else self.normalize(x)


def identity(x, *args, **kwargs):
    """The preprocessor used when none is configured."""
    return x


def make_preprocessor(cls: type | None, kwargs: dict | None, *, size: Any, device: Any) -> Callable:
    """Instantiate a skrl-style preprocessor, filling ``size`` and ``device`` when the class takes them.

    :param cls: Preprocessor class, or None/False for :func:`identity`.
    :param kwargs: The user's keyword arguments (``size``/``device`` given there win).
    :param size: Space or int passed as ``size`` unless the user gave one.
    :param device: Device passed as ``device`` unless the user gave one.
    """
    if not cls:
        return identity
    kwargs = dict(kwargs or {})
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        parameters = {}
    if "size" in parameters and "size" not in kwargs:
        kwargs["size"] = size
    if "device" in parameters and "device" not in kwargs:
        kwargs["device"] = device
    return cls(**kwargs)


@torch.no_grad()
def masked_sums(x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sum, sum of squares and count of the unmasked rows of ``x``, in float64, summed over all ranks (one
    collective, no host read).

    :param x: Data, shape ``(..., size)``; masked-out rows may hold NaN (they never reach the sums).
    :param mask: Boolean mask of shape ``(..., 1)``, or None for all rows.
    :return: ``(sum, sum of squares, count)``, shapes ``(size,)``, ``(size,)`` and ``()``.
    """
    mask = mask.reshape(1, -1, 1) if mask is not None else None
    total, total_sq, count = per_agent_sums(x.reshape(1, -1, x.shape[-1]), mask)
    return total[0], total_sq[0], count[0]


@torch.no_grad()
def per_agent_sums(x: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`masked_sums` of each of ``G`` agents (each agent's statistics its own): ``x`` ``(G, rows, size)``,
    ``mask`` ``(G, rows, 1)`` or None; returns ``(G, size)``, ``(G, size)``, ``(G,)`` in float64, one collective."""
    size = x.shape[-1]
    rows = x.transpose(0, 1).double()  # (rows, G, size): the sums reduce the first dimension
    weight = torch.ones_like(rows[..., :1]) if mask is None else mask.transpose(0, 1).double()
    rows = torch.where(weight > 0, rows, 0.0)  # NaN * 0 is NaN
    sums = torch.cat([(rows * weight).sum(0), (rows * rows * weight).sum(0), weight.sum(0)], dim=-1)
    distributed.all_reduce_sum_(sums)
    return sums[:, :size], sums[:, size : 2 * size], sums[:, -1]


@torch.no_grad()
def fold_sums_(statistics: Any, total: torch.Tensor, total_sq: torch.Tensor, count: torch.Tensor) -> None:
    """Fold a batch's sums (of :func:`masked_sums`, or ``(G, ...)`` ones of :func:`per_agent_sums`) into the
    statistics of a :class:`ValueNorm` or skrl ``RunningStandardScaler`` (anything with their buffers: also the
    stacked buffers of ``G`` of them, with counts shaped ``(G, 1)``), in place."""
    count = count.unsqueeze(-1) if count.dim() else count  # (G,) -> (G, 1) against (G, size)
    if hasattr(statistics, "debiasing_term"):  # ValueNorm: exponential moments
        # a batch with no unmasked row (an agent absent for a whole rollout) is no data: it must not decay the moments
        beta = torch.where(count > 0, torch.full_like(count, statistics.beta), torch.ones_like(count))
        count = count.clamp(min=1.0)
        statistics.running_mean.mul_(beta).add_(total / count * (1.0 - beta))
        statistics.running_mean_sq.mul_(beta).add_(total_sq / count * (1.0 - beta))
        beta = beta.reshape(statistics.debiasing_term.shape)
        statistics.debiasing_term.mul_(beta).add_(1.0 - beta)
        return
    mean = total / count.clamp(min=1.0)
    m2 = (total_sq - count * mean * mean).clamp(min=0.0)  # sum of squared deviations
    merge_moments_(statistics, mean=mean, m2=m2, count=count)


@torch.no_grad()
def update_statistics(preprocessor, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Update a preprocessor's statistics with the unmasked rows of ``x``, the same on every rank.

    :class:`ValueNorm` and skrl's ``RunningStandardScaler`` are updated from the batch moments of the unmasked rows,
    summed over all ranks (no host sync; masked-out rows may hold NaN). Any other preprocessor is called as skrl would
    call it, ``preprocessor(x[mask], train=True)``, on this rank's rows only.

    :param preprocessor: The preprocessor (an object with skrl's preprocessor interface).
    :param x: Data, shape ``(..., size)``.
    :param mask: Boolean mask of shape ``(..., 1)``, or None for all rows.
    """
    if isinstance(preprocessor, ValueNorm):
        preprocessor.update(x, mask)
    elif isinstance(preprocessor, RunningStandardScaler):
        fold_sums_(preprocessor, *masked_sums(x, mask))
    else:
        rows = x.reshape(-1, x.shape[-1])
        preprocessor(rows if mask is None else rows[mask.reshape(-1)], train=True)


@torch.no_grad()
def merge_moments_(scaler: RunningStandardScaler, *, mean: torch.Tensor, m2: torch.Tensor, count: torch.Tensor) -> None:
    """Fold a batch's moments into a skrl ``RunningStandardScaler``, in place (Chan et al.'s parallel algorithm).

    The scaler keeps ``running_mean``, ``running_variance`` (population variance of everything seen) and
    ``current_count`` (float64 buffers). No host read: an empty batch (``count == 0``) leaves them as they are, and a
    batch of one sample is folded in like any other (skrl's own update takes ``torch.var`` of it: NaN).

    :param scaler: The scaler to update.
    :param mean: Batch mean, shape ``(size,)``.
    :param m2: Batch sum of squared deviations from ``mean``, shape ``(size,)``.
    :param count: Number of samples in the batch, a scalar tensor.
    """
    n_a, n_b = scaler.current_count, count.to(scaler.current_count.dtype)
    total = n_a + n_b
    delta = mean.to(scaler.running_mean.dtype) - scaler.running_mean
    share = n_b / total.clamp(min=1.0)
    m2_total = scaler.running_variance * n_a + m2.to(scaler.running_variance.dtype) + delta * delta * n_a * share
    scaler.running_mean.add_(delta * share)
    scaler.running_variance.copy_(torch.where(total > 0, m2_total / total.clamp(min=1.0), scaler.running_variance))
    scaler.current_count.copy_(total)


__all__ = [
    "ValueNorm",
    "fold_sums_",
    "identity",
    "make_preprocessor",
    "masked_sums",
    "merge_moments_",
    "per_agent_sums",
    "update_statistics",
]
