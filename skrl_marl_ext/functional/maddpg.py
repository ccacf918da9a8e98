"""MADDPG's losses and targets (Lowe et al. 2017, https://arxiv.org/abs/1706.02275), with TD3's target policy
smoothing and clipped double Q (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477), each with a plain reference.

Layout: a group's terms are ``(G, B, ...)`` (agents of the group, sampled joint transitions). A group's loss is the
masked mean over all its rows (agents sharing one model), or with ``per_agent`` the sum of each agent's own masked
mean (agents with models of their own, so that each model's gradient is its agent's loss alone).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from skrl_marl_ext.functional.ppo import check_group_terms, check_shape, group_mean
from skrl_marl_ext.functional.td import td_target


def smooth_target_actions(
    *, actions: torch.Tensor, noise: torch.Tensor, noise_clip: float, low: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """TD3's target policy smoothing: ``clip(a' + clip(noise, -c, c), low, high)``.

    :param actions: Target policy actions ``a'``, shape ``(N, A)``.
    :param noise: Noise drawn by the caller, shape ``(N, A)``.
    :param noise_clip: ``c >= 0``.
    :param low: Lower action bounds, shape ``(A,)``.
    :param high: Upper action bounds, shape ``(A,)``.
    :return: Smoothed actions, shape ``(N, A)``.
    """
    check_shape("smooth_target_actions", "noise", noise, actions.shape)
    check_shape("smooth_target_actions", "low", low, actions.shape[-1:])
    check_shape("smooth_target_actions", "high", high, actions.shape[-1:])
    noise = noise.clamp(-noise_clip, noise_clip)
    return torch.maximum(torch.minimum(actions + noise, high), low)


def critic_target(
    *,
    rewards: torch.Tensor,
    next_q_values: Sequence[torch.Tensor],
    terminated: torch.Tensor,
    discount_factor: float | torch.Tensor,
) -> torch.Tensor:
    """``y = r + gamma (1 - terminated) min_k Q'_k(s', a')``: one target critic, or the smaller of twin ones (clipped
    double Q).

    :param rewards: Rewards, shape ``(G, B, 1)``.
    :param next_q_values: One or two target critic values ``Q'_k(s', a')``, each ``(G, B, 1)``.
    :param terminated: Boolean (or 0/1) termination flags, shape ``(G, B, 1)``.
    :param discount_factor: ``gamma`` in ``[0, 1]``, or each row's ``gamma^k`` (n-step targets), ``(..., 1)``.
    :return: Targets, shape ``(G, B, 1)``.
    """
    if len(next_q_values) not in (1, 2):
        raise ValueError(f"critic_target: expected one or two next_q_values, got {len(next_q_values)}")
    terms = {f"next_q_values[{k}]": q for k, q in enumerate(next_q_values)}
    check_group_terms("critic_target", rewards=rewards, terminated=terminated, **terms)
    next_q = torch.minimum(*next_q_values) if len(next_q_values) == 2 else next_q_values[0]
    return td_target(rewards=rewards, next_q_values=next_q, terminated=terminated, discount_factor=discount_factor)


def critic_loss(
    *, q_values: Sequence[torch.Tensor], targets: torch.Tensor, mask: torch.Tensor, per_agent: bool = False
) -> dict[str, torch.Tensor]:
    """``L = sum_k group mean of (Q_k(s, a) - y)^2`` over one critic or twin ones (skrl TD3's sum).

    :param q_values: One or two critic values ``Q_k(s, a)``, each ``(G, B, 1)``.
    :param targets: ``y`` (no gradient flows into it here), shape ``(G, B, 1)``.
    :param mask: Boolean rows that count (live agents; truncated rows left out by the caller), shape ``(G, B, 1)``.
    :param per_agent: See :func:`group_mean`.
    :return: ``{"loss": L, "squared_error": (Q_1 - y)^2}`` (the error ``(G, B, 1)``).
    """
    if len(q_values) not in (1, 2):
        raise ValueError(f"critic_loss: expected one or two q_values, got {len(q_values)}")
    terms = {f"q_values[{k}]": q for k, q in enumerate(q_values)}
    check_group_terms("critic_loss", targets=targets, mask=mask, **terms)
    error = (q_values[0] - targets) ** 2
    loss = group_mean(error, mask, per_agent=per_agent)
    for q in q_values[1:]:
        loss = loss + group_mean((q - targets) ** 2, mask, per_agent=per_agent)
    return {"loss": loss, "squared_error": error}


def joint_with_own_actions(
    *, joint_actions: torch.Tensor, own_actions: torch.Tensor, columns: torch.Tensor
) -> torch.Tensor:
    """For each agent ``i`` of a group, the joint action with agent ``i``'s columns replaced by its own action (one
    scatter; gradients reach ``own_actions`` only).

    :param joint_actions: The stored joint action, shape ``(B, J)``.
    :param own_actions: Each agent's own action, shape ``(G, B, A)``.
    :param columns: Each agent's columns in the joint action, long ``(G, A)``.
    :return: ``(G, B, J)``.
    """
    G, B, A = own_actions.shape
    check_shape("joint_with_own_actions", "joint_actions", joint_actions, (B, joint_actions.shape[-1]))
    check_shape("joint_with_own_actions", "columns", columns, (G, A))
    columns = columns.unsqueeze(1).expand(G, B, -1)
    return joint_actions.unsqueeze(0).expand(G, B, -1).scatter(2, columns, own_actions)


def actor_loss(
    *,
    q_values: torch.Tensor,
    mask: torch.Tensor,
    pre_tanh: torch.Tensor | None = None,
    regularization: float = 0.0,
    per_agent: bool = False,
) -> dict[str, torch.Tensor]:
    """``J = -group mean of Q(s, a_1, .., mu_i(o_i), .., a_n) + w * group mean of mean_j pre_tanh_j^2``: the critic's
    value of the joint action with each agent's own action from its policy, and the MADDPG paper code's penalty on the
    policy's output before the tanh.

    :param q_values: ``Q`` of the joint actions with the agents' own policy actions, shape ``(G, B, 1)``.
    :param mask: Boolean rows that count, shape ``(G, B, 1)``.
    :param pre_tanh: The policy's output before the tanh, shape ``(G, B, A)``; needed when ``regularization``.
    :param regularization: ``w >= 0``.
    :param per_agent: See :func:`group_mean`.
    :return: ``{"loss": J, "loss_policy": -mean Q, "loss_regularization": w * mean square}`` (scalars; the last is 0
        without a penalty).
    """
    check_group_terms("actor_loss", q_values=q_values, mask=mask)
    loss_policy = -group_mean(q_values, mask, per_agent=per_agent)
    if not regularization:
        return {"loss": loss_policy, "loss_policy": loss_policy, "loss_regularization": torch.zeros_like(loss_policy)}
    if pre_tanh is None:
        raise ValueError("actor_loss: regularization needs pre_tanh, the policy's output before the tanh")
    if pre_tanh.dim() != 3 or pre_tanh.shape[:2] != q_values.shape[:2]:
        raise ValueError(f"actor_loss: pre_tanh has shape {tuple(pre_tanh.shape)}, expected (G, B, A)")
    square = pre_tanh.square().mean(dim=-1, keepdim=True)
    loss_regularization = regularization * group_mean(square, mask, per_agent=per_agent)
    return {
        "loss": loss_policy + loss_regularization,
        "loss_policy": loss_policy,
        "loss_regularization": loss_regularization,
    }


# ---------------------------------------------------------------- plain references (used by the tests)


def _reference_mean(x: list[list[float]], mask: list[list[bool]], per_agent: bool) -> float:
    """``x`` and ``mask`` as ``[agent][row]`` lists; an empty selection counts 0."""
    if per_agent:
        total = 0.0
        for xs, ms in zip(x, mask, strict=True):
            kept = [v for v, m in zip(xs, ms, strict=True) if m]
            total += sum(kept) / len(kept) if kept else 0.0
        return total
    kept = [v for xs, ms in zip(x, mask, strict=True) for v, m in zip(xs, ms, strict=True) if m]
    return sum(kept) / len(kept) if kept else 0.0


def _rows(x: torch.Tensor) -> list[list[float]]:
    return x.double().reshape(x.shape[0], x.shape[1]).tolist()


def smooth_target_actions_reference(*, actions, noise, noise_clip, low, high) -> torch.Tensor:
    """Plain reference for :func:`smooth_target_actions`: element by element, in float64."""
    out = []
    for a_row, n_row in zip(actions.double().tolist(), noise.double().tolist(), strict=True):
        row = []
        for a, n, lo, hi in zip(a_row, n_row, low.double().tolist(), high.double().tolist(), strict=True):
            n = max(-noise_clip, min(noise_clip, n))
            row.append(max(lo, min(hi, a + n)))
        out.append(row)
    return torch.tensor(out, dtype=torch.float64)


def critic_target_reference(*, rewards, next_q_values, terminated, discount_factor) -> torch.Tensor:
    """Plain reference for :func:`critic_target`: row by row, in float64."""
    r, d = _rows(rewards), terminated.bool().reshape(rewards.shape[:2]).tolist()
    qs = [_rows(q) for q in next_q_values]
    out = [
        [r[g][b] + (0.0 if d[g][b] else discount_factor * min(q[g][b] for q in qs)) for b in range(len(r[g]))]
        for g in range(len(r))
    ]
    return torch.tensor(out, dtype=torch.float64).unsqueeze(-1)


def critic_loss_reference(*, q_values, targets, mask, per_agent=False) -> dict[str, torch.Tensor]:
    """Plain reference for :func:`critic_loss`: a loop over critics, agents and rows, in float64."""
    y, m = _rows(targets), mask.bool().reshape(targets.shape[:2]).tolist()
    errors = [
        [[(qv - yv) ** 2 for qv, yv in zip(qs, ys, strict=True)] for qs, ys in zip(_rows(q), y, strict=True)]
        for q in q_values
    ]
    loss = sum(_reference_mean(e, m, per_agent) for e in errors)
    return {
        "loss": torch.tensor(loss, dtype=torch.float64),
        "squared_error": torch.tensor(errors[0], dtype=torch.float64).unsqueeze(-1),
    }


def joint_with_own_actions_reference(*, joint_actions, own_actions, columns) -> torch.Tensor:
    """Plain reference for :func:`joint_with_own_actions`: each agent's rows copied and its columns overwritten."""
    out = []
    for i in range(own_actions.shape[0]):
        joint = joint_actions.clone()
        for k, column in enumerate(columns[i].tolist()):
            joint[:, column] = own_actions[i, :, k]
        out.append(joint)
    return torch.stack(out)


def actor_loss_reference(
    *, q_values, mask, pre_tanh=None, regularization=0.0, per_agent=False
) -> dict[str, torch.Tensor]:
    """Plain reference for :func:`actor_loss`: a loop over agents and rows, in float64."""
    m = mask.bool().reshape(q_values.shape[:2]).tolist()
    loss_policy = -_reference_mean(_rows(q_values), m, per_agent)
    loss_regularization = 0.0
    if regularization:
        squares = [[sum(v * v for v in row) / len(row) for row in agent] for agent in pre_tanh.double().tolist()]
        loss_regularization = regularization * _reference_mean(squares, m, per_agent)
    return {
        name: torch.tensor(value, dtype=torch.float64)
        for name, value in (
            ("loss", loss_policy + loss_regularization),
            ("loss_policy", loss_policy),
            ("loss_regularization", loss_regularization),
        )
    }
