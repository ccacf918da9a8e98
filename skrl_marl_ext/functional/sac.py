"""The soft actor-critic terms of MASAC and HASAC (Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290 and
https://arxiv.org/abs/1812.05905; HASAC: Liu et al. 2024, https://arxiv.org/abs/2306.10715), each with a plain
reference.

Layout: a group's terms are ``(G, B, 1)`` (agents of the group, sampled joint transitions); temperatures and target
entropies broadcast against them, ``(G, 1, 1)`` (each agent its own) or one number. A group's loss is the masked mean
over all its rows, or with ``per_agent`` the sum of each agent's own masked mean (as :mod:`.maddpg`'s losses).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from skrl_marl_ext.functional.ppo import check_group_terms, check_shape, group_mean, masked_mean


def squashed_gaussian_log_prob(
    *, log_prob: torch.Tensor, pre_tanh: torch.Tensor, scale: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-density of ``a = center + scale * tanh(u)`` from that of the Gaussian sample ``u`` (SAC's appendix C):
    ``sum_j log N(u_j) - sum_j log(1 - tanh(u_j)^2) - sum_j log scale_j``, with ``log(1 - tanh(u)^2)`` written as
    ``2 (log 2 - u - softplus(-2u))`` (finite for any ``u``), summed in that order as HARL's squashed Gaussian policy
    sums it.

    :param log_prob: ``log N(u_j; mean, std)`` per action dimension, shape ``(N, A)``.
    :param pre_tanh: ``u``, shape ``(N, A)``.
    :param scale: Half the action range per dimension, shape ``(A,)``; None: 1 (actions in ``[-1, 1]``).
    :return: Shape ``(N, 1)``.
    """
    check_shape("squashed_gaussian_log_prob", "pre_tanh", pre_tanh, log_prob.shape)
    correction = 2.0 * (math.log(2.0) - pre_tanh - torch.nn.functional.softplus(-2.0 * pre_tanh))
    out = log_prob.sum(dim=-1, keepdim=True) - correction.sum(dim=-1, keepdim=True)
    if scale is not None:
        check_shape("squashed_gaussian_log_prob", "scale", scale, pre_tanh.shape[-1:])
        out = out - scale.log().sum()
    return out


def soft_q_target(
    *,
    rewards: torch.Tensor,
    next_q_values: Sequence[torch.Tensor],
    next_log_prob: torch.Tensor,
    temperature: torch.Tensor | float,
    terminated: torch.Tensor,
    discount_factor: float | torch.Tensor,
) -> torch.Tensor:
    """``y = r + gamma (min_k Q'_k(s', a') - alpha log pi(a' | s')) (1 - terminated)``: the soft Bellman target with
    twin (or one) target critics, ``a'`` drawn from the current policies (HARL's soft twin critic).

    :param rewards: ``r``, shape ``(G, B, 1)``.
    :param next_q_values: One or two target critic values ``Q'_k(s', a')``, each ``(G, B, 1)``.
    :param next_log_prob: ``log pi(a' | s')`` the entropy term reads (the joint policy's, or the agent's own),
        ``(G, B, 1)``.
    :param temperature: ``alpha >= 0``, a number or a tensor broadcastable to ``(G, B, 1)``.
    :param terminated: Boolean (or 0/1) termination flags, ``(G, B, 1)``.
    :param discount_factor: ``gamma`` in ``[0, 1]``, or each row's ``gamma^k`` (n-step targets), ``(..., 1)``.
    :return: Targets, ``(G, B, 1)``.
    """
    if len(next_q_values) not in (1, 2):
        raise ValueError(f"soft_q_target: expected one or two next_q_values, got {len(next_q_values)}")
    terms = {f"next_q_values[{k}]": q for k, q in enumerate(next_q_values)}
    check_group_terms("soft_q_target", rewards=rewards, next_log_prob=next_log_prob, terminated=terminated, **terms)
    next_q = torch.minimum(*next_q_values) if len(next_q_values) == 2 else next_q_values[0]
    alive = 1.0 - terminated.to(next_q.dtype)
    return rewards + discount_factor * (next_q - temperature * next_log_prob) * alive


def soft_actor_loss(
    *,
    q_values: torch.Tensor,
    log_prob: torch.Tensor,
    temperature: torch.Tensor | float,
    mask: torch.Tensor,
    per_agent: bool = False,
) -> dict[str, torch.Tensor]:
    """``J = group mean of (alpha log pi(a_i | o_i) - Q(s, .., a_i, ..))``, ``a_i`` the policy's reparameterised (or
    straight-through) sample: the soft policy objective, negated.

    :param q_values: The critic's value of the joint action holding the agent's sample (HASAC: the smaller of the twin
        critics), ``(G, B, 1)``.
    :param log_prob: ``log pi(a_i | o_i)`` of that sample, ``(G, B, 1)``.
    :param temperature: ``alpha``, a number or ``(G, 1, 1)``; no gradient flows into it here.
    :param mask: Boolean rows that count, ``(G, B, 1)``.
    :param per_agent: See :func:`~skrl_marl_ext.functional.ppo.group_mean`.
    :return: ``{"loss": J, "loss_q": -mean Q, "loss_entropy": mean alpha log pi}`` (scalars).
    """
    check_group_terms("soft_actor_loss", q_values=q_values, log_prob=log_prob, mask=mask)
    if torch.is_tensor(temperature):
        temperature = temperature.detach()
    loss = group_mean(temperature * log_prob - q_values, mask, per_agent=per_agent)
    with torch.no_grad():
        loss_q = -group_mean(q_values, mask, per_agent=per_agent)
        loss_entropy = group_mean(temperature * log_prob, mask, per_agent=per_agent)
    return {"loss": loss, "loss_q": loss_q, "loss_entropy": loss_entropy}


def temperature_loss(
    *,
    log_temperature: torch.Tensor,
    log_prob: torch.Tensor,
    target_entropy: torch.Tensor | float,
    mask: torch.Tensor,
    per_agent: bool = False,
) -> torch.Tensor:
    """``L = -group mean of log alpha * (log pi(a | s) + target entropy)``: lowers ``alpha`` while the policy's entropy
    is below the target, raises it above (SAC's automatic temperature; HARL's and skrl's form, on ``log alpha``).

    :param log_temperature: ``log alpha`` (the only input with a gradient), broadcastable to ``(G, B, 1)``, e.g.
        ``(G, 1, 1)``.
    :param log_prob: ``log pi(a | s)`` of fresh samples, ``(G, B, 1)`` (detached here).
    :param target_entropy: A number or ``(G, 1, 1)``.
    :param mask: Boolean rows that count, ``(G, B, 1)``.
    :param per_agent: See :func:`~skrl_marl_ext.functional.ppo.group_mean`.
    :return: A scalar.
    """
    check_group_terms("temperature_loss", log_prob=log_prob, mask=mask)
    gap = log_prob.detach() + target_entropy
    return group_mean(-(log_temperature * gap), mask, per_agent=per_agent)


# ---------------------------------------------------------------- plain references (used by the tests)


def squashed_gaussian_log_prob_reference(*, log_prob, pre_tanh, scale=None) -> torch.Tensor:
    """Plain reference for :func:`squashed_gaussian_log_prob`: row by row in float64, with ``log(1 - tanh(u)^2)``
    as written in the SAC paper (moderate ``u`` only)."""
    scales = [1.0] * pre_tanh.shape[-1] if scale is None else scale.double().tolist()
    out = []
    for lp_row, u_row in zip(log_prob.double().tolist(), pre_tanh.double().tolist(), strict=True):
        total = 0.0
        for lp, u, s in zip(lp_row, u_row, scales, strict=True):
            total += lp - math.log(1.0 - math.tanh(u) ** 2) - math.log(s)
        out.append([total])
    return torch.tensor(out, dtype=torch.float64)


def _agent_values(value, G: int) -> list[float]:
    """A number or a ``(G, 1, 1)`` tensor as one float per agent."""
    if torch.is_tensor(value):
        return (
            value.double().reshape(-1).expand(G).tolist() if value.numel() == 1 else value.double().reshape(G).tolist()
        )
    return [float(value)] * G


def _mean(rows: list[list[float]], mask: list[list[bool]], per_agent: bool) -> float:
    if per_agent:
        means = []
        for xs, ms in zip(rows, mask, strict=True):
            kept = [v for v, m in zip(xs, ms, strict=True) if m]
            means.append(sum(kept) / len(kept) if kept else 0.0)
        return sum(means)
    kept = [v for xs, ms in zip(rows, mask, strict=True) for v, m in zip(xs, ms, strict=True) if m]
    return sum(kept) / len(kept) if kept else 0.0


def soft_q_target_reference(
    *, rewards, next_q_values, next_log_prob, temperature, terminated, discount_factor
) -> torch.Tensor:
    """Plain reference for :func:`soft_q_target`: a loop over agents and rows, in float64."""
    G, B = rewards.shape[:2]
    alphas = _agent_values(temperature, G)
    r, lp = rewards.double().reshape(G, B).tolist(), next_log_prob.double().reshape(G, B).tolist()
    qs, done = [q.double().reshape(G, B).tolist() for q in next_q_values], terminated.bool().reshape(G, B).tolist()
    out = [
        [
            r[g][b] + (0.0 if done[g][b] else discount_factor * (min(q[g][b] for q in qs) - alphas[g] * lp[g][b]))
            for b in range(B)
        ]
        for g in range(G)
    ]
    return torch.tensor(out, dtype=torch.float64).unsqueeze(-1)


def soft_actor_loss_reference(*, q_values, log_prob, temperature, mask, per_agent=False) -> dict[str, torch.Tensor]:
    """Plain reference for :func:`soft_actor_loss`: a loop over agents and rows, in float64."""
    G, B = q_values.shape[:2]
    alphas = _agent_values(temperature, G)
    q, lp = q_values.double().reshape(G, B).tolist(), log_prob.double().reshape(G, B).tolist()
    m = mask.bool().reshape(G, B).tolist()
    entropy = [[alphas[g] * lp[g][b] for b in range(B)] for g in range(G)]
    loss_q = -_mean(q, m, per_agent)
    loss_entropy = _mean(entropy, m, per_agent)
    values = {"loss": loss_entropy + loss_q, "loss_q": loss_q, "loss_entropy": loss_entropy}
    return {name: torch.tensor(value, dtype=torch.float64) for name, value in values.items()}


def temperature_loss_reference(*, log_temperature, log_prob, target_entropy, mask, per_agent=False) -> torch.Tensor:
    """Plain reference for :func:`temperature_loss`: a loop over agents and rows, in float64."""
    G, B = log_prob.shape[:2]
    logs, targets = _agent_values(log_temperature, G), _agent_values(target_entropy, G)
    lp, m = log_prob.double().reshape(G, B).tolist(), mask.bool().reshape(G, B).tolist()
    terms = [[-logs[g] * (lp[g][b] + targets[g]) for b in range(B)] for g in range(G)]
    return torch.tensor(_mean(terms, m, per_agent), dtype=torch.float64)


__all__ = [
    "masked_mean",
    "soft_actor_loss",
    "soft_actor_loss_reference",
    "soft_q_target",
    "soft_q_target_reference",
    "squashed_gaussian_log_prob",
    "squashed_gaussian_log_prob_reference",
    "temperature_loss",
    "temperature_loss_reference",
]
