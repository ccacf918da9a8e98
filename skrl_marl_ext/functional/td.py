"""Temporal-difference targets of the off-policy critics (MADDPG)."""

from __future__ import annotations

import torch


def td_target(
    *,
    rewards: torch.Tensor,
    next_q_values: torch.Tensor,
    terminated: torch.Tensor,
    discount_factor: float | torch.Tensor,
) -> torch.Tensor:
    """``y = r + gamma * (1 - terminated) * Q'(s', a')``.

    Truncation does not appear here: whether a truncated transition is learned from at all is the caller's choice
    (its next observation may belong to the next episode in envs that reset in place).

    :param rewards: Rewards ``r``, shape ``(..., 1)``.
    :param next_q_values: Target critic values ``Q'(s', mu'(o'))``, shape ``(..., 1)``.
    :param terminated: Boolean (or 0/1) termination flags, shape ``(..., 1)``.
    :param discount_factor: ``gamma`` in ``[0, 1]``, or each row's ``gamma^k`` (n-step targets), ``(..., 1)``.
    :return: Targets, shape ``(..., 1)``.
    """
    return rewards + discount_factor * (1.0 - terminated.to(next_q_values.dtype)) * next_q_values
