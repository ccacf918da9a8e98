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

    The value model reads the agent's own observation: it is given under ``inputs["observations"]`` *and* under
    ``inputs["states"]``, so the critic stays local whichever key it reads (skrl 2.1.1's IPPO hands the critic the
    global state under ``"states"``). The policy receives the env's states under ``"states"`` as in skrl, when the env
    has any. ``state_spaces`` may be omitted.

    Parameters are those of :class:`~skrl_marl_ext.MAPPO`, with ``cfg`` an :class:`IPPO_CFG` or a dict.
    """

    cfg_class = IPPO_CFG
    critic_reads_states = False
