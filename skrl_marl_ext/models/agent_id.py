"""One-hot agent ids for policies (and critics) shared by several agents.

Agents that share one policy see the same network; when their observations alone do not say which agent is
acting, appending a one-hot id lets the shared network behave differently per agent (the MAPPO paper does this
for its shared critic's agent-specific state). With ``cfg.agent_id_input=True`` the agents append, for the agent
at position ``i`` of its group (its order in ``possible_agents``), a one-hot vector of the group's size to the
preprocessed observations, and to the states the critic reads. Size the models with :func:`agent_id_space`.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import torch
from skrl.utils.spaces.torch import compute_space_size


def agent_id_space(space: gymnasium.Space, num_agents: int) -> gymnasium.spaces.Box:
    """The space a model sees when a one-hot agent id of ``num_agents`` entries is appended to ``space``.

    Example (a policy shared by 3 agents)::

        policy = Policy(observation_space=agent_id_space(env.observation_space("agent_0"), 3), ...)

    :param space: The env's (observation or state) space.
    :param num_agents: Number of agents that share the model.

    :return: A flat ``Box`` of size ``flatdim(space) + num_agents``.
    """
    size = compute_space_size(space, occupied_size=True) + num_agents
    return gymnasium.spaces.Box(low=-np.inf, high=np.inf, shape=(size,), dtype=np.float32)


def append_agent_id(x: torch.Tensor, num_agents: int) -> torch.Tensor:
    """Append one-hot agent ids to agent-major rows.

    :param x: Inputs of ``num_agents`` agents stacked agent-major, shape ``(num_agents * batch, size)``.
    :param num_agents: Number of agents.

    :return: Shape ``(num_agents * batch, size + num_agents)``; rows of agent ``i`` end with ``e_i``.
    """
    batch = x.shape[0] // num_agents
    ids = torch.eye(num_agents, dtype=x.dtype, device=x.device).repeat_interleave(batch, dim=0)
    return torch.cat([x, ids], dim=-1)


def with_agent_ids(x: torch.Tensor) -> torch.Tensor:
    """Append one-hot agent ids to stacked inputs ``(G, N, size)``: ``(G, N, size + G)``, agent ``i``'s rows ending
    with ``e_i`` (:func:`append_agent_id` on agent-major rows)."""
    G, N = x.shape[:2]
    ids = torch.eye(G, dtype=x.dtype, device=x.device).view(G, 1, G).expand(G, N, G)
    return torch.cat([x, ids], dim=-1)
