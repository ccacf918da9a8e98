"""Straight-through Gumbel-softmax, the relaxation MADDPG uses for discrete actions.

Jang et al. 2017 (https://arxiv.org/abs/1611.01144); Lowe et al. 2017 (MADDPG, https://arxiv.org/abs/1706.02275)
train discrete actors through it: the forward pass gives the critic a one-hot action, the backward pass the
gradient of the tempered softmax.
"""

from __future__ import annotations

import torch


def sample_gumbel(like: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise of the shape, dtype and device of ``like`` (drawn as torch's ``gumbel_softmax`` draws it).

    :param like: Any tensor, e.g. logits of shape ``(batch, num_actions)``.
    :return: ``-log(E)`` with ``E ~ Exponential(1)``, same shape as ``like``.
    """
    return -torch.empty_like(like, memory_format=torch.legacy_contiguous_format).exponential_().log()


def one_hot_actions(actions: torch.Tensor, num_actions: int) -> torch.Tensor:
    """One-hot encoding of integer actions.

    :param actions: Action indexes, shape ``(batch, 1)`` (any integer or float dtype holding integers).
    :param num_actions: Number of discrete actions ``n``.
    :return: Float tensor of shape ``(batch, n)``.
    """
    return torch.nn.functional.one_hot(actions.reshape(-1).long(), num_actions).float()


def gumbel_softmax_st(
    *, logits: torch.Tensor, temperature: float = 1.0, gumbel_noise: torch.Tensor | None = None
) -> torch.Tensor:
    """Straight-through Gumbel-softmax sample.

    ``y_soft = softmax((logits + g) / temperature)`` with ``g ~ Gumbel(0, 1)``; the result is
    ``one_hot(argmax y_soft) - y_soft.detach() + y_soft``: exactly one-hot in value, with the gradient of ``y_soft``.

    :param logits: Unnormalised log-probabilities, shape ``(batch, num_actions)``.
    :param temperature: Softmax temperature ``> 0``; lower is closer to the argmax and has higher-variance gradients.
    :param gumbel_noise: Gumbel noise of the shape of ``logits``; drawn with :func:`sample_gumbel` when None.
    :return: Shape ``(batch, num_actions)``, one-hot rows, differentiable with respect to ``logits``.
    """
    if temperature <= 0:
        raise ValueError(f"gumbel_softmax_st: temperature must be > 0, got {temperature}")
    if gumbel_noise is None:
        gumbel_noise = sample_gumbel(logits)
    y_soft = torch.softmax((logits + gumbel_noise) / temperature, dim=-1)
    index = y_soft.argmax(dim=-1, keepdim=True)
    y_hard = torch.zeros_like(y_soft).scatter_(-1, index, 1.0)
    return y_hard - y_soft.detach() + y_soft
