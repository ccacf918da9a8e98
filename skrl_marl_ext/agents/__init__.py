"""The agents: MAPPO and IPPO (one on-policy core) and MADDPG."""

from skrl_marl_ext.agents.ippo import IPPO, IPPO_CFG
from skrl_marl_ext.agents.maddpg import MADDPG
from skrl_marl_ext.agents.maddpg_cfg import MADDPG_CFG
from skrl_marl_ext.agents.mappo import MAPPO, MAPPO_CFG
from skrl_marl_ext.agents.on_policy import OnPolicyAgent
from skrl_marl_ext.agents.on_policy_cfg import OnPolicyCfg
from skrl_marl_ext.keys import AGENT_MASK_KEY, MEAN_ACTIONS_KEY

__all__ = [
    "AGENT_MASK_KEY",
    "IPPO",
    "IPPO_CFG",
    "MADDPG",
    "MADDPG_CFG",
    "MAPPO",
    "MAPPO_CFG",
    "MEAN_ACTIONS_KEY",
    "OnPolicyAgent",
    "OnPolicyCfg",
]
