"""Generalized Advantage Estimation (GAE), batched, with a plain reference beside it.

Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage Estimation",
https://arxiv.org/abs/1506.02438

The two done signals do different things (as in the Gymnasium API):

* ``terminated``: the episode really ended; the value of the next observation is worth nothing,
  so the bootstrap term ``gamma * V(s_{t+1})`` is dropped.
* ``truncated``: the episode was cut by a time limit. With ``time_limit_bootstrap`` the bootstrap term is kept
  (the episode would have gone on; the caller passes the value of the episode's own final observation) and the
  recursion ``gamma * lambda * A_{t+1}`` is cut, so no advantage flows into the next episode. Without it the
  truncation is not an episode end here, as in skrl 2.1.1: the bootstrap and the recursion run on into the next
  episode (an approximation; treating a time-out as terminal instead learned worse on time-limited tasks).
"""

from __future__ import annotations

import torch


def compute_gae(
    *,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    discount_factor: float,
    lambda_coefficient: float,
    time_limit_bootstrap: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Compute GAE advantages and returns, batched over every dimension but the first (time).

    :param rewards: Rewards, shape ``(T, *batch)`` (e.g. ``(T, num_agents, num_envs, 1)``).
    :param values: Values ``V(s_t)`` of the observations the actions were taken on, shape ``(T, *batch)``.
    :param next_values: Values ``V(s_{t+1})`` of the observations that followed, shape ``(T, *batch)``.
        For a rollout of an auto-resetting env this is ``values`` shifted by one, ending with the value
        of the observation after the last step.
    :param terminated: Termination signals, shape ``(T, *batch)``, bool or 0/1.
    :param truncated: Truncation signals, shape ``(T, *batch)``, bool or 0/1.
    :param discount_factor: Discount factor ``gamma`` in ``[0, 1]``.
    :param lambda_coefficient: GAE ``lambda`` in ``[0, 1]``.
    :param time_limit_bootstrap: At truncated steps keep the bootstrap ``gamma * V(s_{t+1})`` and cut the recursion;
        off, truncation is ignored (skrl's behaviour).

    :return: ``(advantages, returns)``, each of shape ``(T, *batch)``; ``returns = advantages + values``.
    """
    terminated = terminated.to(values.dtype)
    # what multiplies gamma * V(s_{t+1}) and what multiplies gamma * lambda * A_{t+1}
    bootstrap = 1.0 - terminated
    ends = torch.clamp(terminated + truncated.to(values.dtype), max=1.0) if time_limit_bootstrap else terminated
    carry = (1.0 - ends) * (discount_factor * lambda_coefficient)
    # one-step TD errors for every step at once; only the recursion runs over time
    deltas = rewards + discount_factor * bootstrap * next_values - values
    advantages = torch.empty_like(deltas)
    advantage = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        advantage = deltas[t] + carry[t] * advantage
        advantages[t] = advantage
    return advantages, advantages + values


def compute_gae_reference(
    *,
    rewards,
    values,
    next_values,
    terminated,
    truncated,
    discount_factor,
    lambda_coefficient,
    time_limit_bootstrap=False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain reference for :func:`compute_gae`: one Python loop per element, in float64, no tricks.

    Same arguments and shapes as :func:`compute_gae`. Used by the tests only.
    """
    T = rewards.shape[0]
    r = rewards.double().reshape(T, -1).tolist()
    v = values.double().reshape(T, -1).tolist()
    nv = next_values.double().reshape(T, -1).tolist()
    term = terminated.bool().reshape(T, -1).tolist()
    trunc = truncated.bool().reshape(T, -1).tolist()
    num = len(r[0]) if T else 0
    adv = [[0.0] * num for _ in range(T)]
    for j in range(num):
        running = 0.0
        for t in reversed(range(T)):
            # a truncation ends the episode only with time_limit_bootstrap (off: skrl's behaviour)
            episode_ends = term[t][j] or (trunc[t][j] and time_limit_bootstrap)
            target = r[t][j] if term[t][j] else r[t][j] + discount_factor * nv[t][j]
            if episode_ends:
                running = 0.0
            running = target - v[t][j] + discount_factor * lambda_coefficient * running
            adv[t][j] = running
    advantages = torch.tensor(adv, dtype=torch.float64).reshape(rewards.shape)
    return advantages, advantages + values.double()
