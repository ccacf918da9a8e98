"""Multi-Agent PPO (MAPPO): PPO per agent with a centralised critic that reads the global state.

Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games",
https://arxiv.org/abs/2103.01955
"""

from __future__ import annotations

import dataclasses

from skrl_marl_ext.agents.on_policy import OnPolicyAgent
from skrl_marl_ext.agents.on_policy_cfg import OnPolicyCfg


@dataclasses.dataclass(kw_only=True)
class MAPPO_CFG(OnPolicyCfg):
    """Configuration of :class:`MAPPO` (all fields are those of :class:`~skrl_marl_ext.agents.OnPolicyCfg`)."""


class MAPPO(OnPolicyAgent):
    """Multi-Agent Proximal Policy Optimization, a drop-in for ``skrl.multi_agents.torch.mappo.MAPPO``.

    The value model reads the env's global state: ``inputs["states"]`` is the state (``env.state()``), and
    ``inputs["observations"]`` the agent's own observation. Construction fails without ``state_spaces``.

    :param possible_agents: Names of all the agents the env can have.
    :param models: ``{agent: {"policy": Model, "value": Model}}``. Agents given the same policy object and the same
        value object share them and train as one batch (one forward pass, one loss, one optimiser step).
    :param memories: Optional ``{agent: Memory}`` (skrl's ``RandomMemory(memory_size=rollouts, num_envs=...)``).
        Accepted for drop-in compatibility and checked (``memory_size`` must equal ``cfg.rollouts``, ``num_envs`` the
        env's); the rollout itself is stored in one preallocated buffer per agent group. None is fine.
    :param observation_spaces: ``{agent: gymnasium.Space}``.
    :param state_spaces: ``{agent: gymnasium.Space}`` of the global state (required).
    :param action_spaces: ``{agent: gymnasium.Space}`` (Box, Discrete or MultiDiscrete).
    :param device: Device of the agent's data and computation.
    :param cfg: :class:`MAPPO_CFG` or a dict of its fields (``{}`` gives the defaults). Unknown keys are refused.
    """

    cfg_class = MAPPO_CFG
    requires_states = True
