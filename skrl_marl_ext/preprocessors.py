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
        fold_moments_(self, *masked_moments(x, mask, shift=self.running_mean))

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


CHUNK_ELEMENTS = 1 << 22
""":func:`per_agent_moments` works through its input in chunks whose float32 temporaries hold at most this many
elements, or a quarter of the input's, whichever is more."""


@torch.no_grad()
def masked_moments(
    x: torch.Tensor, mask: torch.Tensor | None = None, *, shift: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, sum of squared deviations from it and count of the unmasked rows of ``x``, over all ranks (see
    :func:`per_agent_moments`).

    :param x: Data, shape ``(..., size)``; masked-out rows may hold NaN (they never reach the moments).
    :param mask: Boolean mask of shape ``(..., 1)``, or None for all rows.
    :param shift: ``(size,)`` values equal on every rank near the mean (e.g. the running mean), for the merge over ranks.
    :return: ``(mean, m2, count)``, float64, shapes ``(size,)``, ``(size,)`` and ``()``.
    """
    mask = mask.reshape(1, -1, 1) if mask is not None else None
    mean, m2, count = per_agent_moments(x.reshape(1, -1, x.shape[-1]), mask, agents=1, agent_dim=0, shift=shift)
    return mean[0], m2[0], count[0]


@torch.no_grad()
def per_agent_moments(
    x: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    agents: int,
    agent_dim: int,
    shift: torch.Tensor | None = None,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, sum of squared deviations from it and count of each agent's unmasked rows of ``x``, each agent's its own,
    over all ranks (one collective, no host read).

    ``x`` is reduced over every dimension but the agents' and the last, in chunks of rows: within a chunk in float32
    (float64 data in float64), centred on the chunk's mean with the corrected two-pass algorithm (Chan, Golub and
    LeVeque 1983); the chunks' moments are merged in float64 with Chan et al.'s parallel formula, then over ranks. A
    shared input (agent dimension of size 1) is never expanded to the agents: a chunk's temporaries are ``agents``
    times its rows, at most ``chunk_elements`` or a quarter of ``x``'s elements. The same rows and mask for every
    agent are reduced once.

    :param x: Data, shape ``(..., size)`` with the agents along ``agent_dim`` (``agents`` of them, or 1: the same rows
        for every agent); masked-out rows may hold NaN.
    :param mask: Boolean mask shaped as ``x`` with a last dimension of 1 (its agent dimension ``agents`` or 1), or None
        for all rows.
    :param agents: ``G``, the number of agents.
    :param agent_dim: The agents' dimension of ``x`` and ``mask``.
    :param shift: Values equal on every rank near each agent's mean (``(G, size)`` or ``(size,)``; zeros when None),
        subtracted before the moments are summed over ranks (a distributed run only).
    :param chunk_elements: The elements of a chunk's float32 temporaries (at least a quarter of ``x``'s).
    :return: ``(mean, m2, count)``, float64, shapes ``(G, size)``, ``(G, size)`` and ``(G,)``.
    """
    x = _rows_of(x.movedim(agent_dim, 0))  # (R, A, B, size): the rows are A x B
    mask = _rows_of(mask.movedim(agent_dim, 0)) if mask is not None else None
    G = 1 if x.shape[0] == 1 and (mask is None or mask.shape[0] == 1) else agents
    size, dtype = x.shape[-1], torch.promote_types(x.dtype, torch.float32)
    rows = max(1, max(chunk_elements, x.numel() // 4) // (G * size))  # per chunk
    mean = torch.zeros(G, size, dtype=torch.float64, device=x.device)
    m2, count = torch.zeros_like(mean), torch.zeros(G, 1, dtype=torch.float64, device=x.device)
    for chunk in _chunks(*x.shape[1:3], rows=rows):
        values = x[chunk].to(dtype)
        keep = mask[chunk] if mask is not None else None
        if keep is None:  # every row: values is (G, a, b, size) here
            n = torch.full((G, 1), float(values.shape[1] * values.shape[2]), dtype=torch.float64, device=x.device)
            chunk_mean = values.sum((1, 2)) / n.clamp(min=1.0).to(dtype)
            deviations = values - chunk_mean.view(G, 1, 1, size)
        else:
            n = keep.sum((1, 2), dtype=torch.float64).expand(G, 1)
            chunk_mean = torch.where(keep, values, 0.0).sum((1, 2)) / n.clamp(min=1.0).to(
                dtype
            )  # where: NaN * 0 is NaN
            deviations = (values - chunk_mean.view(G, 1, 1, size)).masked_fill_(~keep, 0.0)
        correction = deviations.sum((1, 2)).double()  # the rounding of the chunk's mean
        chunk_m2 = deviations.square_().sum((1, 2)).double() - correction * correction / n.clamp(min=1.0)
        del deviations
        # the corrected mean and Chan et al.'s merge, float64
        chunk_mean = chunk_mean.double() + correction / n.clamp(min=1.0)
        total = count + n
        delta = chunk_mean - mean
        share = n / total.clamp(min=1.0)
        mean = mean + delta * share
        m2 = m2 + chunk_m2.clamp(min=0.0) + delta * delta * count * share
        count = total
    if distributed.is_distributed():  # moments about a common shift, summed over ranks in one collective
        shift = torch.zeros_like(mean) if shift is None else shift.to(mean).reshape(-1, size)[: mean.shape[0]]
        shift = shift.expand_as(mean)
        offset = mean - shift
        sums = torch.cat([count * offset, m2 + count * offset * offset, count], dim=-1)
        distributed.all_reduce_sum_(sums)
        count = sums[:, -1:]
        offset = sums[:, :size] / count.clamp(min=1.0)
        mean = shift + offset
        m2 = (sums[:, size : 2 * size] - count * offset * offset).clamp(min=0.0)
    if G < agents:
        mean, m2, count = mean.expand(agents, -1), m2.expand(agents, -1), count.expand(agents, -1)
    return mean, m2, count[:, 0]


def _rows_of(x: torch.Tensor) -> torch.Tensor:
    """``(R, A, ..., size)`` as ``(R, A, B, size)``, ``B`` the product of the row dimensions after ``A`` (a view for
    at most one of them)."""
    return x.flatten(2, -2) if x.dim() > 3 else x.unsqueeze(2)


def _chunks(A: int, B: int, *, rows: int):
    """Index tuples ``(:, a0:a1, b0:b1)`` covering ``A x B`` rows, about ``rows`` of them each."""
    if rows >= B:
        step = rows // B
        for start in range(0, A, step):
            yield slice(None), slice(start, start + step), slice(None)
    else:
        for a in range(A):
            for start in range(0, B, rows):
                yield slice(None), slice(a, a + 1), slice(start, start + rows)


@torch.no_grad()
def fold_moments_(statistics: Any, mean: torch.Tensor, m2: torch.Tensor, count: torch.Tensor) -> None:
    """Fold a batch's moments (of :func:`masked_moments`, or ``(G, ...)`` ones of :func:`per_agent_moments`) into the
    statistics of a :class:`ValueNorm` or skrl ``RunningStandardScaler`` (anything with their buffers: also the
    stacked buffers of ``G`` of them, with counts shaped ``(G, 1)``), in place."""
    count = count.unsqueeze(-1) if count.dim() else count  # (G,) -> (G, 1) against (G, size)
    if hasattr(statistics, "debiasing_term"):  # ValueNorm: exponential moments
        # a batch with no unmasked row (an agent absent for a whole rollout) is no data: it must not decay the moments
        beta = torch.where(count > 0, torch.full_like(count, statistics.beta), torch.ones_like(count))
        mean_sq = m2 / count.clamp(min=1.0) + mean * mean
        statistics.running_mean.mul_(beta).add_(mean * (1.0 - beta))
        statistics.running_mean_sq.mul_(beta).add_(mean_sq * (1.0 - beta))
        beta = beta.reshape(statistics.debiasing_term.shape)
        statistics.debiasing_term.mul_(beta).add_(1.0 - beta)
        return
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
        fold_moments_(preprocessor, *masked_moments(x, mask, shift=preprocessor.running_mean))
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
    "fold_moments_",
    "identity",
    "make_preprocessor",
    "masked_moments",
    "merge_moments_",
    "per_agent_moments",
    "update_statistics",
]
