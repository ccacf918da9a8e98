"""Straight-through Gumbel-softmax, the relaxation MADDPG uses for discrete actions.

Jang et al. 2017 (https://arxiv.org/abs/1611.01144); Lowe et al. 2017 (MADDPG, https://arxiv.org/abs/1706.02275)
train discrete actors through it: the forward pass gives the critic a one-hot action, the backward pass the
gradient of the tempered softmax.

Action masks: every function here takes an optional boolean ``mask`` ``(batch, num_actions)``, True where an action is
allowed. Masked entries get the lowest finite value of the dtype (as
:func:`skrl_marl_ext.models.mask_logits` does) *after* the noise and the temperature are applied, so they have weight
exactly 0 in the softmax, are never the argmax (unless a row allows nothing) and receive a zero, finite gradient.
"""

from __future__ import annotations

import torch


def sample_gumbel(like: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise of the shape, dtype and device of ``like`` (drawn as torch's ``gumbel_softmax`` draws it).

    :param like: Any tensor, e.g. logits of shape ``(batch, num_actions)``.
    :return: ``-log(E)`` with ``E ~ Exponential(1)``, same shape as ``like``.
    """
    return -torch.empty_like(like, memory_format=torch.legacy_contiguous_format).exponential_().log()


def fill_masked(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``x`` with the entries where ``mask`` is False set to the lowest finite value of ``x``'s dtype.

    The fill of :func:`skrl_marl_ext.models.mask_logits`: finite (not ``-inf``), so a softmax over it gives those
    entries weight exactly 0 and a row with nothing allowed stays finite (uniform) instead of NaN.

    :param x: Scores, shape ``(batch, num_actions)``.
    :param mask: Boolean (or 0/1) mask of allowed actions, shape ``(batch, num_actions)``, or None (nothing masked).
    :return: Same shape and dtype as ``x``.
    """
    if mask is None:
        return x
    return x.masked_fill(~mask.bool(), torch.finfo(x.dtype).min)


def gumbel_max_actions(
    *, logits: torch.Tensor, mask: torch.Tensor | None = None, gumbel_noise: torch.Tensor | None = None
) -> torch.Tensor:
    """A sample of ``Categorical(logits)`` restricted to the allowed actions, by the Gumbel-max trick.

    ``argmax(fill_masked(logits + g, mask))`` with ``g ~ Gumbel(0, 1)``. With ``logits`` all zero it is a uniform draw
    among the allowed actions. A row with no allowed action gives action 0.

    :param logits: Unnormalised log-probabilities, shape ``(batch, num_actions)``.
    :param mask: Boolean mask of allowed actions, shape ``(batch, num_actions)``, or None.
    :param gumbel_noise: Gumbel noise of the shape of ``logits``; drawn with :func:`sample_gumbel` when None.
    :return: Action indexes, ``int64`` of shape ``(batch, 1)``.
    """
    if gumbel_noise is None:
        gumbel_noise = sample_gumbel(logits)
    return fill_masked(logits + gumbel_noise, mask).argmax(dim=-1, keepdim=True)


def one_hot_actions(actions: torch.Tensor, num_actions: int) -> torch.Tensor:
    """One-hot encoding of integer actions.

    :param actions: Action indexes, shape ``(batch, 1)`` (any integer or float dtype holding integers).
    :param num_actions: Number of discrete actions ``n``.
    :return: Float tensor of shape ``(batch, n)``.
    """
    return torch.nn.functional.one_hot(actions.reshape(-1).long(), num_actions).float()


def gumbel_softmax_st(
    *, logits: torch.Tensor, temperature: float = 1.0, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Straight-through Gumbel-softmax sample, optionally restricted to the allowed actions.

    torch's ``gumbel_softmax(fill_masked(logits, mask), tau=temperature, hard=True)``: ``y_soft = softmax((logits + g)
    / temperature)`` with ``g ~ Gumbel(0, 1)`` (drawn as :func:`sample_gumbel` draws it), and the result
    ``one_hot(argmax y_soft) - y_soft.detach() + y_soft``: exactly one-hot in value, with the gradient of ``y_soft``.

    With a mask, the masked logits hold the lowest finite value, so the masked entries of both the relaxed and the
    hard sample are exactly 0 and their gradient is 0 (finite). A row that allows no action is taken as allowing all
    (it stays finite).

    :param logits: Unnormalised log-probabilities, shape ``(batch, num_actions)``.
    :param temperature: Softmax temperature ``> 0``; lower is closer to the argmax and has higher-variance gradients.
    :param mask: Boolean mask of allowed actions, shape ``(batch, num_actions)``, or None (nothing masked).
    :return: Shape ``(batch, num_actions)``, one-hot rows, differentiable with respect to ``logits``.
    """
    if temperature <= 0:
        raise ValueError(f"gumbel_softmax_st: temperature must be > 0, got {temperature}")
    if mask is not None:
        mask = mask.bool()
        mask = mask | ~mask.any(dim=-1, keepdim=True)
    return torch.nn.functional.gumbel_softmax(fill_masked(logits, mask), tau=temperature, hard=True)
