"""The agents: MAPPO and IPPO (one on-policy core) and MADDPG, on one grouped base.

Map: :mod:`~skrl_marl_ext.agents.base` (the lifecycle every agent shares), :mod:`~skrl_marl_ext.agents.groups`
(agents run as one batch), :mod:`~skrl_marl_ext.agents.on_policy` (MAPPO/IPPO: acting, recording, the PPO update),
:mod:`~skrl_marl_ext.agents.rollout` (the on-policy storage), :mod:`~skrl_marl_ext.agents.maddpg` (MADDPG),
:mod:`~skrl_marl_ext.agents.replay` (its joint replay), ``*_cfg`` (the configs), :mod:`~skrl_marl_ext.agents.config`
(config building), :mod:`~skrl_marl_ext.agents.validation` (construction checks) and
:mod:`~skrl_marl_ext.agents.checkpoint` (safe, strict loading). The math is in :mod:`skrl_marl_ext.functional`.
"""

from skrl_marl_ext.agents.maddpg import MADDPG as MADDPG
from skrl_marl_ext.agents.maddpg_cfg import MADDPG_CFG as MADDPG_CFG
from skrl_marl_ext.agents.on_policy_cfg import OnPolicyCfg as OnPolicyCfg
from skrl_marl_ext.algorithms.mappo import IPPO as IPPO
from skrl_marl_ext.algorithms.mappo import IPPO_CFG as IPPO_CFG
from skrl_marl_ext.algorithms.mappo import MAPPO as MAPPO
from skrl_marl_ext.algorithms.mappo import MAPPO_CFG as MAPPO_CFG
from skrl_marl_ext.algorithms.mappo import OnPolicyAgent as OnPolicyAgent
from skrl_marl_ext.keys import AGENT_MASK_KEY as AGENT_MASK_KEY
from skrl_marl_ext.keys import MEAN_ACTIONS_KEY as MEAN_ACTIONS_KEY
