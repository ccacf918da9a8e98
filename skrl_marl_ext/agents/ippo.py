"""Independent PPO (IPPO): PPO per agent, each critic reading only that agent's observation.

de Witt et al. 2020, "Is Independent Learning All You Need in the StarCraft Multi-Agent Challenge?",
https://arxiv.org/abs/2011.09533
"""

from __future__ import annotations

import dataclasses

from skrl_marl_ext.agents.on_policy import OnPolicyAgent
from skrl_marl_ext.agents.on_policy_cfg import OnPolicyCfg


@dataclasses.dataclass(kw_only=True)
class IPPO_CFG(OnPolicyCfg):
    """Configuration of :class:`IPPO` (all fields are those of :class:`~skrl_marl_ext.agents.OnPolicyCfg`)."""


class IPPO(OnPolicyAgent):
    """Independent Proximal Policy Optimization, a drop-in for ``skrl.multi_agents.torch.ippo.IPPO``.

    The models get exactly what skrl 2.1.1's IPPO gives them (and what MAPPO gives them): the agent's observation
    under ``inputs["observations"]`` and the env's state under ``inputs["states"]`` (None when the env has no state).
    An independent critic is a value model that reads ``"observations"`` (e.g.
    ``ValueMLP(..., input="observations")``); a value model sized from the state space reads ``"states"``, as Isaac
    Lab's ``skrl_ippo_cfg.yaml`` files build it. ``state_spaces`` may be omitted.

    Parameters are those of :class:`~skrl_marl_ext.MAPPO`, with ``cfg`` an :class:`IPPO_CFG` or a dict.
    """

    cfg_class = IPPO_CFG
    requires_states = False
